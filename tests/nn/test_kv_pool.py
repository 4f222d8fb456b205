"""duet.nn.kv_pool: rows decoded in place in one pool, batched with holes and different lengths, give what each row
gives alone; a lone row gives the bits of a growing cache; slots are handed out lowest first."""

from __future__ import annotations

import pytest
import torch

from duet.nn.backbone import BackboneConfig
from duet.nn.kv_pool import KVPool, PoolRows
from duet.nn.qwen3 import GrowingCache, Qwen3Weights

CONFIG = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=96, vocab_size=50,
                        rope_theta=10_000.0, max_positions=256)


@pytest.fixture(scope="module")
def step():
    torch.manual_seed(0)
    weights = Qwen3Weights(CONFIG)  # uninitialised: a loader fills it; here random values
    with torch.no_grad():
        for p in weights.parameters():
            p.normal_(1.0 if p.ndim == 1 else 0.0, 0.1)
    return weights.step()


def new_pool() -> KVPool:
    return KVPool(CONFIG.num_layers, CONFIG.num_kv_heads, CONFIG.head_dim, torch.float32, "cpu")


def test_slots_go_lowest_first_and_the_pool_doubles():
    pool = new_pool()
    slots = [pool.alloc(10) for _ in range(3)]
    assert slots == [0, 1, 2] and pool.kv.shape[2] == 4 and pool.capacity == 10
    pool.free(1)
    pool.free(0)
    assert pool.alloc(30) == 0 and pool.capacity == 30  # capacity grew, the rows kept their slots
    assert pool.alloc(5) == 1


def test_a_lone_row_gives_the_bits_of_a_growing_cache(step):
    pool = new_pool()
    slot = pool.alloc(16)
    prompt, frames = torch.randn(1, 6, 64), torch.randn(5, 1, 1, 64)
    cache = GrowingCache()
    with torch.no_grad():
        assert torch.equal(step(prompt, torch.arange(6)[None], PoolRows(pool, [slot], [0], 6)),
                           step(prompt, torch.arange(6)[None], cache))
        for t in range(5):
            positions = torch.tensor([[6 + t]])
            assert torch.equal(step(frames[t], positions, PoolRows(pool, [slot], [6 + t])),
                               step(frames[t], positions, cache))


def test_batched_rows_with_holes_and_lengths_equal_each_row_alone(step):
    """Rows of lengths 3, 8, 5 in slots 0, 2, 3 (slot 1 runs too, but not in this batch): one batched step per
    position equals each row's own steps (to float rounding: a matmul over several rows may round otherwise)."""
    pool, alone = new_pool(), new_pool()
    lengths = [3, 8, 5]
    slots = [pool.alloc(20) for _ in range(4)]  # 0, 1, 2, 3
    own = [alone.alloc(20) for _ in lengths]
    rows = [slots[0], slots[2], slots[3]]
    with torch.no_grad():
        for n, slot, mine in zip(lengths, rows, own):
            prompt = torch.randn(1, n, 64)
            step(prompt, torch.arange(n)[None], PoolRows(pool, [slot], [0], n))
            step(prompt, torch.arange(n)[None], PoolRows(alone, [mine], [0], n))
        step(torch.randn(1, 4, 64), torch.arange(4)[None], PoolRows(pool, [slots[1]], [0], 4))  # the hole's own row
        for t in range(4):
            x = torch.randn(3, 1, 64)
            now = [n + t for n in lengths]
            positions = torch.tensor(now)[:, None]
            batched = step(x, positions, PoolRows(pool, rows, now))
            for i, mine in enumerate(own):
                single = step(x[i : i + 1], positions[i : i + 1], PoolRows(alone, [mine], [now[i]]))
                torch.testing.assert_close(batched[i : i + 1], single, rtol=1e-5, atol=1e-5)


def test_a_row_past_its_reservation_is_refused():
    pool = new_pool()
    slot = pool.alloc(4)
    with pytest.raises(RuntimeError, match="reservation"):
        PoolRows(pool, [slot], [4])
