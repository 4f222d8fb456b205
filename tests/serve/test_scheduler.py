"""Admission bookkeeping: bounded queue, FIFO under a slot limit and a cache budget."""

from dataclasses import dataclass

import pytest

from duet.serve.errors import QueueFull
from duet.serve.kv_budget import CacheBudget, reservation_bytes
from duet.serve.scheduler import Scheduler, SchedulerConfig


@dataclass(eq=False)
class Entry:
    cache_bytes: int


def test_queue_bound_counts_running_and_waiting():
    s = Scheduler(SchedulerConfig(max_running=2, max_waiting=1, cache_budget_bytes=100))
    entries = [Entry(10) for _ in range(3)]
    for e in entries:
        s.enqueue(e)
    with pytest.raises(QueueFull) as err:
        s.enqueue(Entry(10))
    assert err.value.retry_after_s == 1.0
    assert s.admit() == entries[:2] and list(s.waiting) == entries[2:]
    with pytest.raises(QueueFull):
        s.enqueue(Entry(10))
    s.remove(entries[0])
    s.enqueue(Entry(10))  # room again


def test_fifo_admission_within_budget_and_release():
    s = Scheduler(SchedulerConfig(max_running=8, max_waiting=8, cache_budget_bytes=100))
    a, b, c, d = Entry(60), Entry(50), Entry(10), Entry(30)
    for e in (a, b, c, d):
        s.enqueue(e)
    assert s.admit() == [a]  # b does not fit yet, and c may not jump ahead of it
    assert s.budget.used_bytes == 60
    s.remove(a)
    assert s.admit() == [b, c, d] and s.budget.used_bytes == 90
    for e in (b, c, d):
        s.remove(e)
    assert s.budget.used_bytes == 0 and not s.running


def test_budget_arithmetic():
    assert reservation_bytes(prompt_positions=10, max_frames=90, bytes_per_position=4) == 400
    budget = CacheBudget(100)
    budget.reserve(100)
    assert not budget.fits(1)
    with pytest.raises(RuntimeError):
        budget.reserve(1)
    with pytest.raises(RuntimeError):
        budget.release(101)
