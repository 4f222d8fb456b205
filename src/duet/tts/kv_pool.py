"""Per-request KV caches as rows of one tensor, so a batched decode step reads and writes them without a Python loop
over requests or layers (``duet.tts.gepard``).

Shape legend: H_kv key/value heads, hd head_dim; the pool is (layers, 2, slots, H_kv, capacity, hd), 2 = keys and
values; a request owns a slot (a row) and its positions [0, L) in it.
"""

from __future__ import annotations

import torch


class KVPool:
    """Rows of one cache tensor, handed out and taken back; grown by doubling (slots and capacity)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device):
        self.kv = torch.zeros((layers, 2, 0, kv_heads, 0, head_dim), dtype=dtype, device=device)
        self._free: list[int] = []

    def alloc(self, positions: int) -> int:
        """A free slot with room for ``positions``; grows the pool (one copy) when needed."""
        slots, capacity = self.kv.shape[2], self.kv.shape[4]
        if not self._free or positions > capacity:
            new_slots = slots if self._free else max(1, 2 * slots)
            new_capacity = capacity if positions <= capacity else max(positions, 2 * capacity)
            grown = self.kv.new_zeros((*self.kv.shape[:2], new_slots, self.kv.shape[3], new_capacity, self.kv.shape[5]))
            grown[:, :, :slots, :, :capacity] = self.kv
            self.kv = grown
            self._free += list(range(slots, new_slots))
        return self._free.pop(0)

    def free(self, slot: int) -> None:
        self._free.append(slot)
