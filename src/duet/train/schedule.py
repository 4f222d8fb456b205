"""Learning-rate schedules as pure functions of the step (so a resumed run needs no scheduler state).

Linear warm-up then cosine decay (Loshchilov & Hutter, SGDR, arXiv:1608.03983, without restarts), as in
nanoGPT / nanochat and most TTS recipes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WarmupCosine:
    peak_lr: float
    warmup_steps: int
    total_steps: int
    final_ratio: float = 0.1  # the LR at and after ``total_steps`` is ``final_ratio * peak_lr``

    def __call__(self, step: int) -> float:
        return warmup_cosine(step, self.peak_lr, self.warmup_steps, self.total_steps, self.final_ratio)


def warmup_cosine(step: int, peak_lr: float, warmup_steps: int, total_steps: int, final_ratio: float = 0.1) -> float:
    """LR of optimizer step ``step`` (0-based): (step+1)/warmup * peak during warm-up, then a half cosine from
    peak down to ``final_ratio * peak`` at ``total_steps``, flat afterwards."""
    if step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if step >= total_steps:
        return peak_lr * final_ratio
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    return peak_lr * (final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
