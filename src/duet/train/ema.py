"""Polyak averaging of a model's weights (an exponential moving average), for export and evaluation."""

from __future__ import annotations

import copy

import torch
from torch import nn


def ema_decay(step: int, decay: float) -> float:
    """The decay used after ``step`` updates: ramps up as (1 + step) / (10 + step) so early averages are not
    dominated by the random initialisation (as in TensorFlow's ExponentialMovingAverage with num_updates)."""
    return min(decay, (1 + step) / (10 + step))


class ModelEMA:
    """A shadow copy of a model whose parameters track an exponential moving average of the live ones.

    Buffers (e.g. RVQ codebooks, which move by their own EMA, and their usage counts) are copied, not averaged.
    """

    def __init__(self, model: nn.Module):
        self.shadow = copy.deepcopy(model).eval()
        for p in self.shadow.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update(self, model: nn.Module, decay: float) -> None:
        for p_s, p in zip(self.shadow.parameters(), model.parameters()):
            p_s.lerp_(p.detach(), 1.0 - decay)
        for b_s, b in zip(self.shadow.buffers(), model.buffers()):
            b_s.copy_(b)
