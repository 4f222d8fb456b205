"""Warm-up + cosine against a naive re-derivation."""

import math

import pytest

from duet.train.schedule import WarmupCosine, warmup_cosine


def _naive(step, peak, warmup, total, final):
    if step < warmup:
        return peak * (step + 1) / warmup
    if step >= total:
        return peak * final
    angle = math.pi * (step - warmup) / (total - warmup)
    return peak * final + (peak - peak * final) * (math.cos(angle) + 1) / 2


@pytest.mark.parametrize("step", [0, 1, 9, 10, 11, 55, 99, 100, 150])
def test_matches_naive(step):
    assert warmup_cosine(step, 1e-3, 10, 100, 0.1) == pytest.approx(_naive(step, 1e-3, 10, 100, 0.1), rel=1e-12)


def test_shape():
    sched = WarmupCosine(peak_lr=2.0, warmup_steps=5, total_steps=50, final_ratio=0.0)
    lrs = [sched(s) for s in range(60)]
    assert lrs[4] == pytest.approx(2.0)  # warm-up reaches the peak on its last step
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))  # then never increases
    assert lrs[50] == 0.0 and lrs[59] == 0.0
