"""What a request will cost the engine, estimated when it is submitted, so that the server takes what it can finish
within the request's time budget and refuses the rest at once (``Overloaded``: HTTP 503 with Retry-After) instead of
timing it out later.

A request's cost is its runtime's ``step_cost`` for its frame bound (``duet.tts.runtime.StepCost``): the most steps
it takes (one per frame for Gepard, the refinement steps for Luna, steps per block x blocks for Luna Realtime), the
worst case its time budget is made of too, and the positions the model runs for it in each step (Gepard: a position
per cached row; Luna: its rows' whole text and grid; Luna Realtime: its rows' block). What a step costs depends on
the positions of every request in it, so the engine times every step and every prefill and keeps running averages by
a step's positions, in buckets a quarter of an octave wide (:class:`StepClock`). A size not measured yet is priced
from its measured neighbours: interpolated between them, linearly in the positions above the largest (a compute-bound
step's price, Luna's; a step that batches well, Gepard's, costs less), at the smallest one's price below it.

:func:`finish_in` replays the scheduler's policy over what is ahead of a new request (first in, first out, at most
``max_running`` in a step: the steps left of every running request, then the queued ones, then the new one) with
those prices, and returns when the new request would end. The cache budget, which may hold a queued request back
longer, is not replayed: ``CostConfig.headroom`` leaves room for it and for the estimate's own error. Before the
first step is timed nothing is known and every request is taken (its time budget still bounds it).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass
from typing import Sequence

from duet.errors import DuetError
from duet.tts.runtime import StepCost


@dataclass(frozen=True)
class CostConfig:
    # Take a request estimated to end within this share of its time budget; None: take every request (admission by
    # queue length and cache only).
    headroom: float | None = 0.8
    smoothing: float = 0.25  # weight of a new timing in its bucket's running average

    def __post_init__(self) -> None:
        if self.headroom is not None and not 0 < self.headroom <= 1:
            raise DuetError(f"headroom must lie in (0, 1] or be None, got {self.headroom}")
        if not 0 < self.smoothing <= 1:
            raise DuetError(f"smoothing must lie in (0, 1], got {self.smoothing}")


class StepClock:
    """Measured seconds per engine step by the positions it runs (running averages per bucket), and per prefilled
    request. Not thread-safe: the engine reads and writes it under its lock."""

    BUCKETS_PER_OCTAVE = 4

    def __init__(self, smoothing: float = CostConfig.smoothing):
        self.smoothing = smoothing
        self._keys: list[int] = []  # measured buckets, sorted
        self._steps: dict[int, list[float]] = {}  # bucket -> [mean positions, mean seconds]
        self._prefill_s: float | None = None

    @property
    def measured(self) -> bool:
        return bool(self._keys)

    def record_step(self, positions: int, seconds: float) -> None:
        key = round(self.BUCKETS_PER_OCTAVE * math.log2(max(positions, 1)))
        entry = self._steps.get(key)
        if entry is None:
            bisect.insort(self._keys, key)
            self._steps[key] = [float(positions), seconds]
        else:
            entry[0] += self.smoothing * (positions - entry[0])
            entry[1] += self.smoothing * (seconds - entry[1])

    def record_prefill(self, requests: int, seconds: float) -> None:
        per = seconds / max(requests, 1)
        self._prefill_s = per if self._prefill_s is None else self._prefill_s + self.smoothing * (per - self._prefill_s)

    @property
    def prefill_seconds(self) -> float:
        return self._prefill_s or 0.0

    def step_seconds(self, positions: int) -> float:
        """Seconds one step running ``positions`` positions takes (module doc); measured must be True."""
        points = [self._steps[key] for key in self._keys]  # (mean positions, mean seconds), by positions
        i = bisect.bisect_left([p for p, _ in points], positions)
        if i < len(points) and points[i][0] == positions:
            return points[i][1]
        if i == 0:  # fewer than anything measured: no cheaper than the smallest
            return points[0][1]
        lo_p, lo_s = points[i - 1]
        if i == len(points):  # more than anything measured: linear in the positions
            return lo_s * positions / lo_p
        hi_p, hi_s = points[i]
        w = (positions - lo_p) / (hi_p - lo_p)
        return (1 - w) * lo_s + w * hi_s


def finish_in(running: Sequence[StepCost], waiting: Sequence[StepCost], new: StepCost, max_running: int,
              clock: StepClock) -> float | None:
    """Seconds until a ``new`` request would end behind ``running`` (each request of the batch: the steps it has
    left, its positions) and ``waiting`` (each queued request, first in first), with at most ``max_running`` in a
    step; None when the clock has measured nothing yet."""
    if not clock.measured:
        return None
    batch = [(max(c.steps, 1), c.positions, False) for c in running]  # (steps left, positions, is the new one)
    queue = deque([(max(c.steps, 1), c.positions, False) for c in waiting] + [(max(new.steps, 1), new.positions, True)])
    elapsed = 0.0
    while True:
        while queue and len(batch) < max_running:
            batch.append(queue.popleft())
            elapsed += clock.prefill_seconds
        k = min(left for left, _, _ in batch)  # steps until the next request of the batch ends
        elapsed += k * clock.step_seconds(sum(p for _, p, _ in batch))
        if any(is_new and left == k for left, _, is_new in batch):
            return elapsed
        batch = [(left - k, p, is_new) for left, p, is_new in batch if left > k]
