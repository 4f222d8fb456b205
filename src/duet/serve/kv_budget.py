"""A byte budget for KV caches: requests reserve their worst case at admission and release it when they leave.

Reserving the worst case, ``(prompt positions + max_frames) x bytes per position``, means a running request never
has to be preempted or swapped out: admission is the only place memory is decided. The price is that a request
asking for a long bound holds its full reservation even if it stops early; ``max_frames`` is the lever.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class CacheBudget:
    total_bytes: int
    used_bytes: int = 0

    def fits(self, nbytes: int) -> bool:
        return self.used_bytes + nbytes <= self.total_bytes

    def reserve(self, nbytes: int) -> None:
        if not self.fits(nbytes):
            raise RuntimeError(f"cache budget exceeded: {self.used_bytes} + {nbytes} > {self.total_bytes}")
        self.used_bytes += nbytes

    def release(self, nbytes: int) -> None:
        if nbytes > self.used_bytes:
            raise RuntimeError(f"releasing {nbytes} bytes but only {self.used_bytes} are reserved")
        self.used_bytes -= nbytes


def reservation_bytes(prompt_positions: int, max_frames: int, bytes_per_position: int) -> int:
    """Worst-case cache of one request: every prompt position and every frame up to its bound."""
    return (prompt_positions + max_frames) * bytes_per_position
