"""Token-level duration predictor: how many frames Luna-TTS should generate (report §2.5, §3.2).

A separate bidirectional Qwen3 text model reads the whole text and predicts, for every text token, a distribution over
quantised durations; the target length is T = round(sum over tokens of the expected duration / speed). Users may
scale T (``speed``, > 1 speaks faster) or set it outright (``frames``).

Bins. Bin k in 0 .. B-2 means exactly k frames (40 ms each at Luna's 25 Hz); the last bin B-1 is open-ended,
"B-1 frames or more". Training targets clip at B-1 (``durations_to_bins``); the expectation values the last bin at
B-1, so a token longer than that is under-counted: B = 64 (2.5 s per token) makes that rare for BPE tokens and
punctuation pauses. Service tokens carry duration 0 under the character spread (under an alignment SOT and EOT carry
the silence at the ends); a non-verbal token carries its event.

Supervision. The report trains on forced-alignment durations. duet aligns its corpus itself (``duet data align``,
``duet.data.align``: a monotonic alignment search under a flat-start Gaussian model of the corpus's log-mels, SOT
and EOT taking the leading and trailing silence) and trains on that with ``duet train luna --alignments``; without
an alignment file the recipe (``duet.luna.data``) falls back to spreading each utterance's true frame count over
its tokens in proportion to their character counts (``duet.data.token_rows.spread_frames``; service tokens count 0
characters). Both add up to the true frame count exactly, so the total length T, the only thing decoding uses, is
supervised exactly.
Where a synthesiser's own timing is at hand (Festival's Segment relation), ``frame_durations`` turns segment end
times into counts that also add up exactly; ``benchmarks/align_bench.py`` uses Festival's timing to score the
alignments.

Shape legend: B batch, S text tokens, D model width, N bins.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from duet.config_io import from_dict, pick_preset, to_dict
from duet.errors import DuetError
from duet.luna.backbone import build_bidirectional, load_qwen3_weights
from duet.luna.checkpoint import read_checkpoint, write_checkpoint
from duet.luna.config import QWEN3_0_6B, TINY
from duet.nn.backbone import BackboneConfig
from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask


@dataclass(frozen=True)
class DurationConfig:
    backbone: BackboneConfig
    num_bins: int = 64  # N: bins 0 .. N-2 exact frame counts, bin N-1 open-ended ("N-1 or more")

    def __post_init__(self) -> None:
        if self.num_bins < 2:
            raise DuetError(f"num_bins must be at least 2, got {self.num_bins}")

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DurationConfig":
        return from_dict(cls, d)


# Shares luna-tiny's BPE vocabulary; a quarter of its depth and two thirds of its width are plenty for a per-token
# regression (duet's choice).
_TINY = DurationConfig(
    backbone=BackboneConfig(
        num_layers=4,
        width=256,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        mlp_width=768,
        vocab_size=TINY.vocab_size,
        rope_theta=TINY.rope_theta,
        max_positions=TINY.max_positions,
    )
)

PRESETS: dict[str, Callable[[], DurationConfig]] = {
    # Report §3.2: the duration predictor is a fine-tuned Qwen3-0.6B with bidirectional attention.
    "luna-0.6b": lambda: DurationConfig(backbone=QWEN3_0_6B),
    "luna-tiny": lambda: _TINY,
    "luna-tiny-fsq": lambda: _TINY,  # the same predictor; its durations count the frames of the run's codec
    "luna-tiny-rvq4": lambda: _TINY,
}


def duration_preset(name: str) -> DurationConfig:
    """The duration predictor that goes with Luna preset ``name``."""
    return pick_preset(PRESETS, name, "duration")


# -- pure functions -----------------------------------------------------------------------------------------------


def durations_to_bins(durations: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Per-token durations in frames (int, >= 0) -> bin targets: d for d < N-1, N-1 (open-ended) otherwise."""
    if durations.dtype.is_floating_point:
        raise DuetError("durations must be integer frame counts (use frame_durations to convert times)")
    if durations.numel() and int(durations.min()) < 0:
        raise DuetError(f"durations must be >= 0 frames, got {int(durations.min())}")
    return durations.clamp(max=num_bins - 1).long()


def frame_durations(end_times: Sequence[float], frame_rate: float, start: float = 0.0) -> list[int]:
    """Segment end times in seconds (increasing) -> frames per segment.

    Boundaries are rounded to the frame grid, not the durations: d_i = round(e_i fps) - round(e_{i-1} fps), so the
    counts add up to round(e_last fps) - round(start fps) with no drift from accumulated rounding.
    """
    if frame_rate <= 0:
        raise DuetError(f"frame_rate must be positive, got {frame_rate}")
    out, prev_t, prev = [], start, round(start * frame_rate)
    for e in end_times:
        if e < prev_t:
            raise DuetError(f"segment end times must not decrease: {e} after {prev_t}")
        b = round(e * frame_rate)
        out.append(b - prev)
        prev_t, prev = e, b
    return out


def two_hot(durations: torch.Tensor, num_bins: int) -> torch.Tensor:
    """Continuous durations (...) in frames -> soft bin targets (..., N) whose expectation is the duration.

    d = n + f (0 <= f < 1) puts 1 - f on bin n and f on bin n + 1, so ``expected_durations`` of a predictor that
    matches the targets gives d back, not d rounded (DESIGN §D: rounding token boundaries costs WER). Durations
    at or past the open last bin put all their weight on it.
    """
    if durations.numel() and float(durations.min()) < 0:
        raise DuetError(f"durations must be >= 0 frames, got {float(durations.min())}")
    d = durations.float().clamp(max=num_bins - 1)
    low = d.floor().long()  # (...)
    frac = d - low
    out = torch.zeros(*d.shape, num_bins, device=d.device)
    out.scatter_(-1, low[..., None], (1.0 - frac)[..., None])
    out.scatter_add_(-1, (low + 1).clamp(max=num_bins - 1)[..., None], frac[..., None])
    return out


def duration_loss(logits: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over real tokens: logits (B, S, N), text_lengths (B,), durations (B, S) frames: int
    counts (one bin each) or float, continuous timing (two neighbouring bins each, :func:`two_hot`)."""
    valid = lengths_to_mask(text_lengths, logits.shape[1])  # (B, S)
    durations = durations.masked_fill(~valid, 0)
    if durations.dtype.is_floating_point:
        return F.cross_entropy(logits[valid].float(), two_hot(durations[valid], logits.shape[-1]))
    targets = durations_to_bins(durations, logits.shape[-1])  # (B, S)
    return F.cross_entropy(logits[valid].float(), targets[valid])


def expected_durations(logits: torch.Tensor) -> torch.Tensor:
    """logits (..., N) -> expected frames (...): sum_k p_k * k (the open last bin counts as N-1)."""
    values = torch.arange(logits.shape[-1], device=logits.device, dtype=torch.float32)  # (N,)
    return logits.float().softmax(dim=-1) @ values


def total_frames(
    durations: torch.Tensor,
    text_lengths: torch.Tensor,
    speed: float = 1.0,
    frames: int | Sequence[int] | torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token expected durations (B, S) -> target length T (B,) int64.

    T = round(sum_{s < S_b} d_s / speed). ``frames`` (one int or one per row) overrides the prediction; ``speed``
    then does not apply. A length of 0 or less is refused with a DuetError.
    """
    if speed <= 0:
        raise DuetError(f"speed must be positive (1 = as predicted, 2 = twice as fast), got {speed}")
    B = durations.shape[0]
    if frames is not None:
        out = torch.as_tensor(frames, dtype=torch.long).reshape(-1)  # (1,) or (B,)
        if out.numel() == 1:
            out = out.expand(B)
        elif out.numel() != B:
            raise DuetError(f"got {out.numel()} frame counts for a batch of {B}")
        if int(out.min()) <= 0:
            raise DuetError(f"the number of frames must be at least 1, got {int(out.min())}")
        return out.clone()
    valid = lengths_to_mask(text_lengths, durations.shape[1])  # (B, S)
    total = (durations * valid).sum(dim=1) / speed  # (B,)
    out = torch.round(total).long()
    if int(out.min()) <= 0:
        raise DuetError(
            "the duration predictor gave 0 frames for this text (empty or all service tokens?); "
            "pass the number of frames explicitly"
        )
    return out


def fit_durations(durations: torch.Tensor, frames: float) -> torch.Tensor:
    """Per-token durations (S,) scaled to add up to ``frames``: how an aligned model lays its text over a grid
    whose length is set (by ``speed``, a user's T, a bound or a prompt). Spread evenly if they add up to 0."""
    total = float(durations.sum())
    if total <= 0:
        return torch.full_like(durations, frames / max(durations.shape[0], 1), dtype=torch.float32)
    return durations.float() * (frames / total)


# -- model --------------------------------------------------------------------------------------------------------


class DurationPredictor(nn.Module):
    def __init__(self, config: DurationConfig):
        super().__init__()
        self.config = config
        self.model = build_bidirectional(config.backbone)  # named as in Qwen3ForCausalLM (model.*)
        self.head = nn.Linear(config.backbone.width, config.num_bins)

    def forward(self, text_ids: torch.Tensor, text_lengths: torch.Tensor) -> torch.Tensor:
        """text_ids (B, S), text_lengths (B,) -> bin logits (B, S, N); padded tokens hold garbage."""
        B, S = text_ids.shape
        if bool((text_lengths <= 0).any()):
            raise DuetError("the duration predictor needs at least one text token per row")
        valid = lengths_to_mask(text_lengths, S)  # (B, S)
        x = self.model.embed_tokens(text_ids.masked_fill(~valid, 0))  # (B, S, D)
        mask = additive(bidirectional_mask(valid), x.dtype)  # (B, 1, S, S)
        position_ids = torch.arange(S, device=text_ids.device).expand(B, S)  # right padding: positions agree
        h = self.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids).last_hidden_state
        return self.head(h)  # (B, S, N)

    def loss(self, text_ids: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
        """Mean cross-entropy over real tokens between predicted bins and ``durations_to_bins(durations)``."""
        return duration_loss(self(text_ids, text_lengths), text_lengths, durations)

    @torch.no_grad()
    def predict_frames(
        self,
        text_ids: torch.Tensor,
        text_lengths: torch.Tensor,
        speed: float = 1.0,
        frames: int | Sequence[int] | torch.Tensor | None = None,
    ) -> torch.Tensor:
        """-> T (B,) int64; see ``total_frames``. With ``frames`` given the model is not run."""
        if frames is not None:
            return total_frames(torch.zeros(text_ids.shape[0], 0), text_lengths, speed, frames)
        return total_frames(expected_durations(self(text_ids, text_lengths)), text_lengths, speed)

    @torch.no_grad()
    def token_durations(self, text_ids: torch.Tensor, text_lengths: torch.Tensor) -> torch.Tensor:
        """Expected frames per token (B, S), 0 at padding (for editing spans and fine-grained rate control)."""
        d = expected_durations(self(text_ids, text_lengths))
        return d * lengths_to_mask(text_lengths, text_ids.shape[1])

    def init_from(self, path: str | Path) -> list[str]:
        """Backbone from a local Qwen3 checkpoint (transformers format); the bin head stays new (§3.2)."""
        return load_qwen3_weights(self.model, path)

    def save(self, directory: str | Path) -> Path:
        return write_checkpoint(directory, "duration", self.config.to_dict(), self.state_dict())

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> "DurationPredictor":
        cfg, state = read_checkpoint(directory, "duration", map_location)
        model = cls(DurationConfig.from_dict(cfg))
        model.load_state_dict(state)
        return model
