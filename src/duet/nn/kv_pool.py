"""Per-row KV caches as rows of one preallocated tensor, read and written in place by a batched decode step.

The pool is (layers, 2, slots, H_kv, capacity, hd), 2 = keys and values; a cached sequence (a *row*) owns a slot and
its positions [0, L) in it. A decode step (:class:`PoolRows`) writes each row's new key and value at its own
length, then attends over the pool itself: rows whose slots form a run [lo, hi) are one strided view of it, with no
copy; a batch with holes in its run attends over the whole run, the rows not in the batch given a dummy query whose
output is dropped (a copy of the queries, never of the cache). Slots are handed out lowest first, so the running rows
of a serving engine stay close to one run. Rows of different lengths are right-padded within the view and masked.

Shape legend: R rows in a step, L new positions, P cached positions, H query heads, H_kv key/value heads, hd head_dim.
"""

from __future__ import annotations

import heapq

import torch
from torch.nn import functional as F


class KVPool:
    """Rows of one cache tensor, handed out (lowest free slot first) and taken back; grown by doubling (slots and
    capacity)."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device | str):
        self.kv = torch.zeros((layers, 2, 0, kv_heads, 0, head_dim), dtype=dtype, device=device)
        self._free: list[int] = []  # a heap

    @property
    def capacity(self) -> int:
        return self.kv.shape[4]

    def alloc(self, positions: int) -> int:
        """A free slot with room for ``positions``; grows the pool (one copy) when needed."""
        slots, capacity = self.kv.shape[2], self.kv.shape[4]
        if not self._free or positions > capacity:
            new_slots = slots if self._free else max(1, 2 * slots)
            new_capacity = capacity if positions <= capacity else max(positions, 2 * capacity)
            grown = self.kv.new_zeros((*self.kv.shape[:2], new_slots, self.kv.shape[3], new_capacity, self.kv.shape[5]))
            grown[:, :, :slots, :, :capacity] = self.kv
            self.kv = grown
            for slot in range(slots, new_slots):
                heapq.heappush(self._free, slot)
        return heapq.heappop(self._free)

    def free(self, slot: int) -> None:
        heapq.heappush(self._free, slot)


class PoolRows:
    """The ``duet.nn.qwen3.KV`` of pool rows: row b is slot ``slots[b]`` holding ``lengths[b]`` positions; a call
    brings ``n`` new positions per row, written at [lengths[b], lengths[b] + n). Several new positions per row are
    a prompt (every length 0: causal attention over the prompt alone); one is a decode step."""

    def __init__(self, pool: KVPool, slots: list[int], lengths: list[int], n: int = 1):
        if n > 1 and any(lengths):
            raise ValueError("several new positions are a prompt, into empty rows")
        if max(lengths) + n > pool.capacity:
            raise RuntimeError("a row outgrew its KV reservation")  # the caller's frame bound prevents this
        self.kv = pool.kv
        self.n = n
        self.prompt = not any(lengths)  # empty rows: they attend over their new positions alone
        device = pool.kv.device
        self.lo, self.hi = min(slots), max(slots) + 1
        self.lmax = max(lengths) + n
        self.single = len(slots) == 1
        if self.single:
            self.slot, self.length = slots[0], lengths[0]
            self.mask = None
            return
        self.slots = torch.tensor(slots, device=device)  # (R,)
        self.lengths = torch.tensor(lengths, device=device)  # (R,)
        run = list(range(self.lo, self.hi))
        self.rows = None if slots == run else self.slots - self.lo  # where each row's query goes in the run
        span_lengths = torch.zeros(self.hi - self.lo, dtype=torch.long, device=device)  # rows not in the batch: 0
        span_lengths[self.slots - self.lo] = self.lengths
        if self.rows is None and len(set(lengths)) == 1:
            self.mask = None  # every row sees every column
        else:
            column = torch.arange(self.lmax, device=device)
            self.mask = (column[None] <= span_lengths[:, None])[:, None, None, :]  # (span, 1, 1, L + 1)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """q (R, H, n, hd), k and v (R, H_kv, n, hd) -> (R, H, n, hd)."""
        keys, values = self.kv[layer, 0], self.kv[layer, 1]  # (slots, H_kv, capacity, hd)
        if self.prompt:
            if self.single:
                keys[self.slot, :, self.length : self.length + self.n] = k[0]
                values[self.slot, :, self.length : self.length + self.n] = v[0]
            else:
                keys[self.slots, :, : self.n] = k
                values[self.slots, :, : self.n] = v
            return F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=self.n > 1, enable_gqa=True)
        if self.single:
            keys[self.slot, :, self.length] = k[0, :, 0]
            values[self.slot, :, self.length] = v[0, :, 0]
            span = slice(self.slot, self.slot + 1)
        else:
            keys[self.slots, :, self.lengths] = k[:, :, 0]  # advanced dims first: (R, H_kv, hd)
            values[self.slots, :, self.lengths] = v[:, :, 0]
            span = slice(self.lo, self.hi)
        kk, vv = keys[span, :, : self.lmax], values[span, :, : self.lmax]  # (span, H_kv, L + 1, hd): views
        if self.single or self.rows is None:
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=self.mask, scale=scale, enable_gqa=True)
        padded = q.new_zeros((self.hi - self.lo, *q.shape[1:]))
        padded[self.rows] = q
        out = F.scaled_dot_product_attention(padded, kk, vv, attn_mask=self.mask, scale=scale, enable_gqa=True)
        return out[self.rows]
