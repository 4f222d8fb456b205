"""duet.data.buckets: batch plans under a padded-positions budget, the same for every family."""

from __future__ import annotations

import random

from duet.data.buckets import LazyBatches, plan_batches


def test_every_item_once_under_the_budget_and_seeded():
    rng = random.Random(0)
    lengths = [rng.randint(3, 60) for _ in range(200)]
    for seed in range(3):
        plan = plan_batches(lengths, budget=240, max_batch_size=8, bucket_width=8, rng=random.Random(seed))
        assert sorted(i for b in plan for i in b) == list(range(len(lengths)))
        assert all(len(b) <= 8 and len(b) * max(lengths[i] for i in b) <= 240 for b in plan)
        again = plan_batches(lengths, budget=240, max_batch_size=8, bucket_width=8, rng=random.Random(seed))
        assert plan == again
    assert plan != plan_batches(lengths, 240, 8, 8, random.Random(7))


def test_without_rng_batches_run_in_length_order_and_items_keep_theirs():
    lengths = [5, 30, 5, 12, 31, 6]
    plan = plan_batches(lengths, budget=64, max_batch_size=3, bucket_width=10)
    # Buckets of 10: 0 (items 0, 2, 5), 1 (item 3), 3 (items 1, 4); cut greedily: 3 rows at most, 2 x 30 <= 64 < 3 x 31.
    assert plan == [[0, 2, 5], [3, 1], [4]]
    assert plan_batches([100], budget=10, max_batch_size=4, bucket_width=1) == [[0]]  # one item always fits alone


def test_lazy_batches_make_on_access():
    made = []
    lazy = LazyBatches([[0, 1], [2]], lambda i, idx: made.append(i) or (i, idx))
    assert len(lazy) == 2 and made == []
    assert lazy[1] == (1, [2]) and lazy[0:2] == [(0, [0, 1]), (1, [2])] and made == [1, 0, 1]
