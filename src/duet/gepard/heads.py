"""Gepard's output heads: 32 channel classifiers d -> L_k and a stop head d -> 1 (Gepard §2.5).

The 32 heads are stored as one ``nn.Linear(D, sum L_k)`` (``heads.codes``, 216 outputs for [8, 7, 6, 6] x 8) whose
output is split per channel: head k is rows [offset_k, offset_k + L_k) of the weight and bias, so it is exactly the
report's 32 independent linear layers, computed in one matmul (one GEMM per decode step matters for serving).
``heads.stop`` is the stop head. The model applies both to the audio region only (prefix and text dropped,
§2.5); see ``duet.gepard.model``.

Logits come back in one :class:`FrameLogits`: flat (…, 216) channel logits, with views per channel (for the loss)
and padded to (…, C, max L) with -inf (for vectorised sampling over all 32 channels).

Shape legend: B batch, N audio positions, C channels (32), D model width, Lmax = max L_k.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from duet.gepard.config import GepardConfig


@dataclass(frozen=True)
class FrameLogits:
    """Per-position output of the heads: ``codes`` (B, N, sum L_k) and ``stop`` (B, N) logits."""

    codes: torch.Tensor
    stop: torch.Tensor
    levels: tuple[int, ...]

    def per_channel(self) -> list[torch.Tensor]:
        """32 tensors (B, N, L_k)."""
        return list(self.codes.split(list(self.levels), dim=-1))

    def padded(self) -> torch.Tensor:
        """(B, N, C, Lmax), entries past L_k set to -inf (probability 0 after softmax)."""
        return pad_channels(self.codes, self.levels)

    def last(self) -> "FrameLogits":
        """Only the last position: codes (B, 1, 216), stop (B, 1)."""
        return FrameLogits(self.codes[:, -1:], self.stop[:, -1:], self.levels)


def pad_channels(flat: torch.Tensor, levels: tuple[int, ...]) -> torch.Tensor:
    """flat (..., sum L_k) -> (..., C, Lmax), -inf where a channel has fewer than Lmax levels."""
    lmax = max(levels)
    out = flat.new_full((*flat.shape[:-1], len(levels) * lmax), float("-inf"))
    out[..., _grid_columns(tuple(levels), flat.device)] = flat
    return out.unflatten(-1, (len(levels), lmax))  # (..., C, Lmax)


@functools.lru_cache(maxsize=16)
def _grid_columns(levels: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The flat column of (channel k, level j) in a row-major (C, Lmax) grid, for each of the sum L_k logits (built
    once: every decode step pads its logits)."""
    lmax = max(levels)
    with torch.inference_mode(False):  # a normal tensor, which training's backward may keep, wherever it is built
        return torch.tensor([k * lmax + j for k, level in enumerate(levels) for j in range(level)], device=device)


class GepardHeads(nn.Module):
    """hidden (B, N, D) -> FrameLogits(codes (B, N, 216), stop (B, N))."""

    def __init__(self, config: GepardConfig):
        super().__init__()
        self.levels = tuple(config.channel_levels)
        self.codes = nn.Linear(config.width, config.num_logits)
        self.stop = nn.Linear(config.width, 1)
        # The report gives no head initialisation; we use the backbone's own (normal, std 0.02; zero bias).
        std = config.backbone.initializer_range
        for linear in (self.codes, self.stop):
            nn.init.normal_(linear.weight, mean=0.0, std=std)
            nn.init.zeros_(linear.bias)

    def forward(self, hidden: torch.Tensor) -> FrameLogits:
        return FrameLogits(self.codes(hidden), self.stop(hidden).squeeze(-1), self.levels)
