"""Aligned text input: the vector added to each audio frame's input that says which text token it belongs to.

Shared by the families that lay their text out over the frames (DESIGN §D, "Alignment is the bottleneck": a
tiny model given each frame's phone is intelligible within an hour on one core; left to find the alignment by
attention it was not after two). In the spirit of VALL-E R and ELLA-V, a divergence from both reports.

The alignment is a duration per text token, in frames, continuous (not rounded: DESIGN §D measured that rounding
token boundaries to whole frames costs about four WER points). Frame f's centre is at f + 0.5 frames; it belongs to
the token k whose span [start_k, end_k) holds the centre. A frame at or past the end of the last span (frames a
sampler lays out past the predicted length, or Gepard's phantom stop frame) belongs to EOT, ``eot_back`` tokens
from the end of the row (Gepard's wrapped text ends ``EOT, SOS``: 2; Luna's ends ``EOT``: 1). The added vector::

    a_f = W_tok [e(k-w); ...; e(k); ...; e(k+w)] + W_pos [p, 1 - p, log(1 + d_k), 4 p (1 - p)]

with e the backbone's own text embedding (neighbours past either end clamp to the row's first / last token),
p in [0, 1] the centre's place inside token k, and w the window (2: two tokens either side, as in the probe).

Shape legend: B batch, S text tokens, N frames, D model width, W = 2w + 1 window tokens.
"""

from __future__ import annotations

import torch
from torch import nn

NUM_POSITION_FEATURES = 4
# Positions per call of :meth:`AlignedInput.block`. A matmul's row can round differently with the number of rows
# in the call (one row and many take different kernels), so the vectors of a position are always computed in the
# same block of this many positions, whoever asks for them and for how many.
BLOCK = 64


# ---- pure functions -----------------------------------------------------------------------------------------------


def frame_tokens(durations: torch.Tensor, text_lengths: torch.Tensor, positions: torch.Tensor, eot_back: int = 1,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which token each frame belongs to.

    durations (B, S) frames per text token (0 past ``text_lengths``; every token after EOT has 0), positions (B, N)
    frame indices f -> token index k (B, N) int64, place p in [0, 1] (B, N) and that token's duration d_k (B, N).
    Frames at or past the end of the last span belong to EOT, at ``text_lengths - eot_back``.
    """
    lengths = text_lengths[:, None]  # (B, 1)
    ends = torch.cumsum(durations.float(), dim=1)  # (B, S)
    centre = positions.float() + 0.5  # (B, N)
    k = torch.searchsorted(ends.contiguous(), centre.contiguous(), right=True)  # first end > centre
    past = k >= lengths - eot_back + 1  # past EOT's span (what follows EOT lasts 0 frames)
    eot = (lengths - eot_back).expand_as(k)
    k = torch.where(past, eot, k)
    d = durations.float().gather(1, k)  # (B, N)
    start = ends.gather(1, k) - d
    p = torch.where(past, torch.ones_like(centre), ((centre - start) / d.clamp(min=1e-3)).clamp(0.0, 1.0))
    return k, p, d


def position_features(p: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """(B, N) place and duration -> (B, N, 4): p, 1 - p, log(1 + d), 4 p (1 - p)."""
    return torch.stack([p, 1.0 - p, torch.log1p(d.clamp(min=0.0)), 4.0 * p * (1.0 - p)], dim=-1)


def window_indices(k: torch.Tensor, text_lengths: torch.Tensor, window: int) -> torch.Tensor:
    """k (B, N) -> (B, N, W) token indices k - w .. k + w, clamped into the row's wrapped text."""
    offsets = torch.arange(-window, window + 1, device=k.device)  # (W,)
    hi = (text_lengths - 1)[:, None, None]
    return (k[..., None] + offsets).clamp(min=0).minimum(hi)


# ---- modules ------------------------------------------------------------------------------------------------------


class AlignedInput(nn.Module):
    """The vector a_f added to each frame's input (module docstring)."""

    def __init__(self, width: int, window: int, eot_back: int = 1):
        super().__init__()
        self.window = window
        self.eot_back = eot_back
        self.tokens = nn.Linear((2 * window + 1) * width, width)
        self.features = nn.Linear(NUM_POSITION_FEATURES, width)
        nn.init.normal_(self.tokens.weight, std=self.tokens.in_features ** -0.5)
        nn.init.zeros_(self.tokens.bias)
        nn.init.normal_(self.features.weight, std=0.02)
        nn.init.zeros_(self.features.bias)

    def forward(self, text: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        """text (B, S, D) embedded text, durations (B, S), positions (B, N) frame indices -> a (B, N, D)."""
        k, p, d = frame_tokens(durations, text_lengths, positions, self.eot_back)
        idx = window_indices(k, text_lengths, self.window)  # (B, N, W)
        b, n, w = idx.shape
        gathered = text.gather(1, idx.reshape(b, n * w, 1).expand(-1, -1, text.shape[-1]))  # (B, N*W, D)
        tokens = self.tokens(gathered.reshape(b, n, w * text.shape[-1]))  # (B, N, D)
        return tokens + self.features(position_features(p, d).to(text.dtype))

    def block(self, text: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor,
              index: int) -> torch.Tensor:
        """The vectors of frames [index * BLOCK, (index + 1) * BLOCK) (B, BLOCK, D); see :data:`BLOCK`."""
        start = index * BLOCK
        positions = torch.arange(start, start + BLOCK, device=text.device).expand(text.shape[0], -1)  # (B, BLOCK)
        return self(text, text_lengths, durations, positions)

    def table(self, text: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor,
              count: int) -> torch.Tensor:
        """The vectors of frames 0 .. count - 1 (B, count, D), block by block (:meth:`block`)."""
        blocks = [self.block(text, text_lengths, durations, i) for i in range(-(-count // BLOCK))]
        return torch.cat(blocks, dim=1)[:, :count]
