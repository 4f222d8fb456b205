"""Length-bucketed batches under a padded-positions budget: one pure function shared by every family's data module.

A batch of B rows pads to ``B x max(length)`` positions; ``plan_batches`` keeps that at most ``budget`` (and B at
most ``max_batch_size``). Training order (``rng`` given): shuffle the items, stable-sort them by length bucket
(``bucket_width`` positions, so rows within a bucket stay shuffled), cut greedily into batches under the budget,
shuffle the batches. Without ``rng`` the items keep their order within a bucket and the batches run in length
order (validation). Every draw comes from ``rng``, so a plan seeded by (seed, epoch) is the same on every rank and
after every resume (``duet.train.loop``'s data position is just (epoch, batch)).
"""

from __future__ import annotations

import random
from typing import Any, Callable, Sequence


def plan_batches(lengths: Sequence[int], budget: int, max_batch_size: int, bucket_width: int,
                 rng: random.Random | None = None) -> list[list[int]]:
    """Item lengths (padded positions each item costs) -> item indices of every batch, in training order."""
    order = list(range(len(lengths)))
    if rng is not None:
        rng.shuffle(order)
    order.sort(key=lambda i: lengths[i] // bucket_width)  # stable: random within a bucket
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        length = lengths[i]
        grown = max(longest, length)
        if current and (grown * (len(current) + 1) > budget or len(current) >= max_batch_size):
            batches.append(current)
            current, grown = [], length
        current.append(i)
        longest = grown
    if current:
        batches.append(current)
    if rng is not None:
        rng.shuffle(batches)
    return batches


class LazyBatches(Sequence):
    """One epoch's batches, collated on access: batch ``i`` is ``make(i, plan[i])`` (slices give lists)."""

    def __init__(self, plan: list[list[int]], make: Callable[[int, list[int]], Any]):
        self.plan, self.make = plan, make

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return self.make(i, self.plan[i])
