"""Aligned text input for Gepard: each frame's input also carries the text token it belongs to.

A documented divergence from the report, for small compute (DESIGN §D, "Alignment is the bottleneck": a model of
gepard-tiny's size given each frame's phone was intelligible within 45 minutes on one core; left to find the
alignment by attention it was not after two hours). In the spirit of VALL-E R and ELLA-V: the backbone, the text
prefix, the audio interface and the heads are unchanged; one vector is added to the input of every audio position.

The layout and the added vector are shared with Luna (``duet.nn.aligned``). Gepard's wrapped text and its
durations, in frames, continuous::

    wrapped text     SOT    t_1   t_2  ...  t_n    EOT    SOS
    durations (B, S) lead   d_1   d_2  ...  d_n    tail   0        (lead / tail: the silence at either end)

Audio position j (j = 0 is SOS, j >= 1 is frame j-1) predicts frame j and is laid out as frame j; a position at
or past the last span (the phantom frame that carries the stop, or frames a sampler emits past the predicted
length) belongs to EOT, two tokens from the end (``eot_back = 2``).

Durations come from the corpus timing in training (``duet.gepard.data``) and, at inference, from the token-level
duration predictor that the model carries (:class:`DurationHead`: a small bidirectional Qwen3 over the wrapped
text, log(1 + frames) regression, run once before decoding). The sampler needs no pointer of its own: the model's
decode state counts the frames it was fed (:class:`AlignedState`), so ``duet speak``, the serving engine and any
caller of ``prefill`` / ``step`` share one bookkeeping.

Shape legend: B batch, S wrapped text tokens, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError
from duet.nn.aligned import BLOCK, AlignedInput
from duet.nn.backbone import BackboneConfig, build_qwen3, run_backbone
from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask
from duet.nn.qwen3 import Qwen3Weights

EOT_BACK = 2  # Gepard's wrapped text ends EOT, SOS


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


class DurationHead(nn.Module):
    """Token-level duration predictor: a bidirectional Qwen3 over the wrapped text -> log(1 + frames) per token."""

    def __init__(self, config: BackboneConfig, stock: bool = True):
        super().__init__()
        self.model = build_qwen3(config) if stock else Qwen3Weights(config)  # stock=False: inference only
        if stock:
            self.model.config.is_causal = False  # bidirectional; the explicit additive mask below says so as well
        self.head = nn.Linear(config.width, 1)

    def forward(self, text_ids: torch.Tensor, text_lengths: torch.Tensor) -> torch.Tensor:
        """text_ids (B, S), text_lengths (B,) -> log(1 + frames) (B, S); padding holds garbage."""
        b, s = text_ids.shape
        valid = lengths_to_mask(text_lengths, s)  # (B, S)
        x = self.model.embed_tokens(text_ids.masked_fill(~valid, 0))  # (B, S, D)
        mask = additive(bidirectional_mask(valid), x.dtype)  # (B, 1, S, S)
        position_ids = torch.arange(s, device=text_ids.device).expand(b, s)
        h = run_backbone(self.model, x, attention_mask=mask, position_ids=position_ids)  # (B, S, D)
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

    Every row of a batch advances together (one frame per step), so one counter serves all rows. The aligned
    inputs are computed a block of positions at a time as the rows reach them (``duet.nn.aligned.BLOCK``), the same
    bits whoever decodes: the offline sampler, the runtime, the vLLM client's table.
    """

    cache: object
    text: torch.Tensor  # (B, S, D) embedded wrapped text
    text_lengths: torch.Tensor  # (B,)
    durations: torch.Tensor  # (B, S)
    position: int  # the audio position the next fed frame occupies
    vectors: torch.Tensor | None = None  # (B, P, D) the aligned inputs of positions 0 .. P - 1, P a multiple of BLOCK

    def next_input(self, aligned: AlignedInput) -> torch.Tensor:
        """The aligned input (B, 1, D) of audio position ``position`` (SOS is position 0); advances it."""
        p = self.position
        while self.vectors is None or self.vectors.shape[1] <= p:
            done = 0 if self.vectors is None else self.vectors.shape[1]
            block = aligned.block(self.text, self.text_lengths, self.durations, done // BLOCK)  # (B, BLOCK, D)
            self.vectors = block if self.vectors is None else torch.cat([self.vectors, block], dim=1)
        self.position += 1
        return self.vectors[:, p : p + 1]
