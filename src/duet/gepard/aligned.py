"""Aligned text input for Gepard: each frame's input also carries the text token it belongs to.

A documented divergence from the report, for small compute (DESIGN §D, "Alignment is the bottleneck": a model of
gepard-tiny's size given each frame's phone was intelligible within 45 minutes on one core; left to find the
alignment by attention it was not after two hours). In the spirit of VALL-E R and ELLA-V: the backbone, the text
prefix, the audio interface and the heads are unchanged; one vector is added to the input of every audio position.

The alignment is a duration per wrapped text token, in frames, continuous (not rounded: DESIGN §D measured that
rounding token boundaries to whole ~46 ms frames costs about four WER points)::

    wrapped text     SOT    t_1   t_2  ...  t_n    EOT    SOS
    durations (B, S) lead   d_1   d_2  ...  d_n    tail   0        (lead / tail: the silence at either end)

Audio position j (j = 0 is SOS, j >= 1 is frame j-1) predicts frame j, whose centre is at j + 0.5 frames; it
belongs to the token k whose span [start_k, end_k) holds the centre. A position at or past the last span (the
phantom frame that carries the stop, or frames a sampler emits past the predicted length) belongs to EOT at
position 1. The added vector is::

    a_j = W_tok [e(k-w); ...; e(k); ...; e(k+w)] + W_pos [p, 1 - p, log(1 + d_k), 4 p (1 - p)]

with e the backbone's own text embedding (neighbours past either end clamp to SOT / SOS), p in [0, 1] the centre's
place inside token k, and w the window (2: two tokens either side, as in the probe).

Durations come from the corpus timing in training (``duet.gepard.data``) and, at inference, from the token-level
duration predictor that the model carries (:class:`DurationHead`: a small bidirectional Qwen3 over the wrapped
text, log(1 + frames) regression, run once before decoding). The sampler needs no pointer of its own: the model's
decode state counts the frames it was fed (:class:`AlignedState`), so ``duet speak``, the serving engine and any
caller of ``prefill`` / ``step`` share one bookkeeping.

Shape legend: B batch, S wrapped text tokens, N audio positions, D model width, W = 2w + 1 window tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError
from duet.nn.backbone import BackboneConfig, build_qwen3
from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask

NUM_POSITION_FEATURES = 4


@dataclass(frozen=True)
class AlignedConfig:
    """Aligned text input (``window`` tokens either side) and its duration predictor's shape."""

    duration: BackboneConfig
    window: int = 2
    duration_weight: float = 1.0  # the predictor's loss joins the model's with this weight

    def __post_init__(self) -> None:
        if self.window < 0:
            raise ValueError(f"window must be >= 0, got {self.window}")
        if self.duration_weight < 0:
            raise ValueError(f"duration_weight must be >= 0, got {self.duration_weight}")


# ---- pure functions -----------------------------------------------------------------------------------------------


def frame_tokens(durations: torch.Tensor, text_lengths: torch.Tensor, positions: torch.Tensor,
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Which token each audio position's frame belongs to.

    durations (B, S) frames per wrapped token (0 past ``text_lengths``), positions (B, N) audio positions j ->
    token index k (B, N) int64, place p in [0, 1] (B, N) and that token's duration d_k (B, N).
    """
    lengths = text_lengths[:, None]  # (B, 1)
    ends = torch.cumsum(durations.float(), dim=1)  # (B, S)
    centre = positions.float() + 0.5  # (B, N)
    k = torch.searchsorted(ends.contiguous(), centre.contiguous(), right=True)  # first end > centre
    past = k >= lengths - 1  # at or past SOS (duration 0): the phantom region
    eot = (lengths - 2).expand_as(k)
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
    """The vector a_j added to each audio position's input (module docstring)."""

    def __init__(self, width: int, window: int):
        super().__init__()
        self.window = window
        self.tokens = nn.Linear((2 * window + 1) * width, width)
        self.features = nn.Linear(NUM_POSITION_FEATURES, width)
        nn.init.normal_(self.tokens.weight, std=self.tokens.in_features ** -0.5)
        nn.init.zeros_(self.tokens.bias)
        nn.init.normal_(self.features.weight, std=0.02)
        nn.init.zeros_(self.features.bias)

    def forward(self, text: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        """text (B, S, D) embedded wrapped text, durations (B, S), positions (B, N) -> a (B, N, D)."""
        k, p, d = frame_tokens(durations, text_lengths, positions)
        idx = window_indices(k, text_lengths, self.window)  # (B, N, W)
        b, n, w = idx.shape
        gathered = text.gather(1, idx.reshape(b, n * w, 1).expand(-1, -1, text.shape[-1]))  # (B, N*W, D)
        tokens = self.tokens(gathered.reshape(b, n, w * text.shape[-1]))  # (B, N, D)
        return tokens + self.features(position_features(p, d).to(text.dtype))


class DurationHead(nn.Module):
    """Token-level duration predictor: a bidirectional Qwen3 over the wrapped text -> log(1 + frames) per token."""

    def __init__(self, config: BackboneConfig):
        super().__init__()
        self.model = build_qwen3(config)
        self.model.config.is_causal = False  # bidirectional; the explicit additive mask below says so as well
        self.head = nn.Linear(config.width, 1)

    def forward(self, text_ids: torch.Tensor, text_lengths: torch.Tensor) -> torch.Tensor:
        """text_ids (B, S), text_lengths (B,) -> log(1 + frames) (B, S); padding holds garbage."""
        b, s = text_ids.shape
        valid = lengths_to_mask(text_lengths, s)  # (B, S)
        x = self.model.embed_tokens(text_ids.masked_fill(~valid, 0))  # (B, S, D)
        mask = additive(bidirectional_mask(valid), x.dtype)  # (B, 1, S, S)
        position_ids = torch.arange(s, device=text_ids.device).expand(b, s)
        h = self.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids).last_hidden_state
        return self.head(h)[..., 0].float()

    def loss(self, text_ids: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
        """Mean squared error of log(1 + frames) over the real tokens (the last, SOS, is always 0)."""
        valid = lengths_to_mask(text_lengths, text_ids.shape[1])
        target = torch.log1p(durations.float().clamp(min=0.0))
        return F.mse_loss(self(text_ids, text_lengths)[valid], target[valid])

    @torch.no_grad()
    def predict(self, text_ids: torch.Tensor, text_lengths: torch.Tensor, speed: float = 1.0) -> torch.Tensor:
        """Frames per wrapped token (B, S), continuous, 0 at SOS and padding; ``speed`` > 1 speaks faster."""
        if speed <= 0:
            raise DuetError(f"speed must be positive (1 = as predicted), got {speed}")
        d = torch.expm1(self(text_ids, text_lengths)).clamp(min=0.0) / speed
        keep = lengths_to_mask(text_lengths - 1, text_ids.shape[1])  # SOS (the last real token) has no frames
        return d * keep


@dataclass
class AlignedState:
    """A decode state that knows where each row stands: the KV cache, the rows' durations and the next position.

    Every row of a batch advances together (one frame per step), so one counter serves all rows.
    """

    cache: object
    text: torch.Tensor  # (B, S, D) embedded wrapped text
    text_lengths: torch.Tensor  # (B,)
    durations: torch.Tensor  # (B, S)
    position: int  # the audio position the next fed frame occupies
