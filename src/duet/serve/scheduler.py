"""Admission and membership of the running batch: a bounded FIFO queue, a slot limit and a cache budget.

Pure bookkeeping with no threads and no model: the engine calls it under its lock. An entry is anything with an
integer ``cache_bytes`` (its worst-case reservation, see ``kv_budget.py``).

Policy: first in, first out. The head of the queue is admitted as soon as a slot is free and its reservation fits
the budget; a head that does not fit yet blocks those behind it, so a long request cannot be starved by a
stream of short ones.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from duet.serve.errors import QueueFull
from duet.serve.kv_budget import CacheBudget


class _Entry(Protocol):
    cache_bytes: int


E = TypeVar("E", bound=_Entry)


@dataclass(frozen=True)
class SchedulerConfig:
    max_running: int = 16  # requests decoded together in one step (the batch)
    max_waiting: int = 64  # requests queued beyond the running ones; more are refused (HTTP 429)
    cache_budget_bytes: int = 2 * 1024**3  # KV-cache bytes all running requests may reserve together
    retry_after_s: float = 1.0  # what a refused client is told to wait

    def __post_init__(self) -> None:
        if self.max_running < 1 or self.max_waiting < 0 or self.cache_budget_bytes < 1:
            raise ValueError(f"invalid scheduler limits: {self}")


class Scheduler(Generic[E]):
    def __init__(self, config: SchedulerConfig):
        self.config = config
        self.budget = CacheBudget(config.cache_budget_bytes)
        self.waiting: deque[E] = deque()
        self.running: list[E] = []

    def enqueue(self, entry: E) -> None:
        """Queue a request, or raise QueueFull when running + waiting is at its bound."""
        if entry.cache_bytes > self.budget.total_bytes:
            raise ValueError("entry can never fit the budget; the engine checks this before enqueueing")
        if len(self.running) + len(self.waiting) >= self.config.max_running + self.config.max_waiting:
            raise QueueFull(
                f"server busy: {len(self.running)} running and {len(self.waiting)} queued requests",
                retry_after_s=self.config.retry_after_s,
            )
        self.waiting.append(entry)

    def admit(self) -> list[E]:
        """Move queued requests into the batch while slots and budget allow; returns the newly admitted."""
        admitted: list[E] = []
        while self.waiting and len(self.running) < self.config.max_running:
            head = self.waiting[0]
            if not self.budget.fits(head.cache_bytes):
                break
            self.waiting.popleft()
            self.budget.reserve(head.cache_bytes)
            self.running.append(head)
            admitted.append(head)
        return admitted

    def remove(self, entry: E) -> None:
        """Take a request out wherever it is (finished, cancelled, failed), releasing its reservation."""
        if entry in self.running:
            self.running.remove(entry)
            self.budget.release(entry.cache_bytes)
        elif entry in self.waiting:
            self.waiting.remove(entry)
