"""Block-diffusion masks (duet.nn.masks) against naive loops, and the inference mask as a piece of the training mask."""

from __future__ import annotations

import pytest
import torch

from duet.nn.masks import (
    CLEAN,
    COND,
    NOISY,
    block_diffusion_mask,
    streaming_block_mask,
    two_stream_block_mask,
    two_stream_labels,
)


def _where(i: int, C: int, F: int, bk: int) -> tuple[str, int]:
    """Position i of [conditions (C) | noisy (F) | clean (F)] -> (segment, block)."""
    if i < C:
        return "cond", -1
    if i < C + F:
        return "noisy", (i - C) // bk
    return "clean", (i - C - F) // bk


def _naive_two_stream(cond_valid, noisy_valid, clean_valid, bk):
    B, C = cond_valid.shape
    F = noisy_valid.shape[1]
    L = C + 2 * F
    valid = torch.cat([cond_valid, noisy_valid, clean_valid], dim=1)
    out = torch.zeros(B, 1, L, L, dtype=torch.bool)
    for b in range(B):
        for i in range(L):
            qs, qb = _where(i, C, F, bk)
            for j in range(L):
                ks, kb = _where(j, C, F, bk)
                if not valid[b, j]:
                    ok = False
                elif ks == "cond":
                    ok = True  # conditions are visible to everyone
                elif qs == "cond":
                    ok = False  # conditions never look at audio
                elif qs == "noisy":
                    # the block being denoised: itself (bidirectional) and the clean past, never later blocks
                    ok = (ks == "noisy" and kb == qb) or (ks == "clean" and kb < qb)
                else:
                    ok = ks == "clean" and kb <= qb  # clean stream: block-causal
                out[b, 0, i, j] = ok
    return out


@pytest.mark.parametrize("C,F,bk", [(3, 8, 4), (0, 6, 2), (4, 9, 3), (2, 5, 8)])
def test_two_stream_mask_matches_naive_loop(C, F, bk):
    g = torch.Generator().manual_seed(C * 100 + F * 10 + bk)
    B = 3
    cond_valid = torch.rand(B, C, generator=g) > 0.3
    noisy_valid = torch.rand(B, F, generator=g) > 0.2
    clean_valid = torch.rand(B, F, generator=g) > 0.2
    got = two_stream_block_mask(cond_valid, noisy_valid, clean_valid, bk)
    assert got.shape == (B, 1, C + 2 * F, C + 2 * F)
    assert torch.equal(got, _naive_two_stream(cond_valid, noisy_valid, clean_valid, bk))


def test_no_position_ever_sees_a_later_block():
    C, F, bk = 2, 12, 4
    ones = torch.ones(1, C), torch.ones(1, F), torch.ones(1, F)
    got = two_stream_block_mask(*(v.bool() for v in ones), bk)[0, 0]
    stream, block = two_stream_labels(C, F, bk)
    for i in range(C + 2 * F):
        for j in range(C + 2 * F):
            if got[i, j] and stream[j] != COND:
                assert block[j] <= block[i]  # block-causal across blocks
                assert not (stream[i] == CLEAN and stream[j] == NOISY)  # clean never sees noisy
                if stream[i] == NOISY and stream[j] == CLEAN:
                    assert block[j] < block[i]  # a noisy block never sees its own clean copy


def test_labels_share_blocks_between_streams():
    stream, block = two_stream_labels(2, 5, 2)
    assert stream.tolist() == [COND] * 2 + [NOISY] * 5 + [CLEAN] * 5
    assert block.tolist() == [-1, -1, 0, 0, 1, 1, 2, 0, 0, 1, 1, 2]


@pytest.mark.parametrize("num_clean,num_queries", [(0, 4), (2, 4), (2, 8), (1, 8), (3, 5)])
def test_streaming_mask_is_the_training_mask_on_its_positions(num_clean, num_queries):
    """Queries [.. | active block n] over keys [conditions | clean 0..n-1 | active n] read the training mask."""
    C, bk = 3, 4
    n = num_clean
    F = (n + 1) * bk
    g = torch.Generator().manual_seed(n * 10 + num_queries)
    cond_valid = torch.rand(2, C, generator=g) > 0.3
    got = streaming_block_mask(cond_valid, n, bk, num_queries)
    full = two_stream_block_mask(cond_valid, torch.ones(2, F, dtype=torch.bool), torch.ones(2, F, dtype=torch.bool), bk)
    # inference position -> training position: conditions; clean frames 0..n B_k - 1; the active block = noisy n
    seq = list(range(C)) + [C + F + f for f in range(n * bk)] + [C + n * bk + f for f in range(bk)]
    rows = seq[len(seq) - num_queries :]
    expect = full[:, :, rows][:, :, :, seq]
    assert got.shape == (2, 1, num_queries, len(seq))
    assert torch.equal(got, expect)


def test_block_diffusion_mask_on_arbitrary_labels_matches_rule():
    q_stream = torch.tensor([COND, NOISY, NOISY, CLEAN])
    q_block = torch.tensor([-1, 1, 0, 1])
    kv_stream = torch.tensor([COND, CLEAN, CLEAN, NOISY, NOISY])
    kv_block = torch.tensor([-1, 0, 1, 1, 0])
    kv_valid = torch.tensor([[True, True, True, True, False]])
    got = block_diffusion_mask(q_stream, q_block, kv_stream, kv_block, kv_valid)[0, 0]
    expect = torch.tensor(
        [
            [1, 0, 0, 0, 0],  # condition: conditions only
            [1, 1, 0, 1, 0],  # noisy block 1: clean 0, itself; not clean 1 (own copy)
            [1, 0, 0, 0, 0],  # noisy block 0: its own frame is padding here
            [1, 1, 1, 0, 0],  # clean block 1: clean 0 and 1
        ],
        dtype=torch.bool,
    )
    assert torch.equal(got, expect)
