"""Batched per-row sampling: filters against a naive loop, parameters per row, independence from the batch."""

import pytest
import torch

from duet.errors import DuetError
from duet.gepard.sampling import channel_logit_mask, filter_logits, sample_requests
from duet.sampling import SamplingParams

LEVELS = (8, 7, 6, 6) * 8


def naive_keep(row: torch.Tensor, k: int, p: float) -> set[int]:
    """Codes top-k and top-p keep in one channel, by a plain loop (ties: lower code first)."""
    order = sorted(range(len(row)), key=lambda i: (-row[i].item(), i))
    probs = torch.softmax(row, -1)
    kept, mass = [], 0.0
    for rank, i in enumerate(order):
        if row[i] == float("-inf"):
            break
        if (k and rank >= k) or (rank > 0 and mass >= p):
            break
        kept.append(i)
        mass += probs[i].item()
    return set(kept)


@pytest.mark.parametrize("k,p", [(0, 1.0), (3, 1.0), (0, 0.5), (2, 0.3), (1, 0.9), (0, 0.01)])
def test_filter_matches_naive_loop(k, p):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 32, 8, generator=g) + channel_logit_mask(LEVELS)
    out = filter_logits(logits, torch.full((3,), k), torch.full((3,), p))
    for b in range(3):
        for c in range(32):
            kept = {i for i in range(8) if out[b, c, i] > float("-inf")}
            assert kept == naive_keep(logits[b, c], k, p)
            assert torch.equal(out[b, c][list(kept)], logits[b, c][list(kept)])


def test_per_row_parameters_on_uniform_logits():
    logits = channel_logit_mask(LEVELS).expand(4, -1, -1)  # (B, C, V) uniform
    params = [SamplingParams(temperature=0), SamplingParams(top_k=2), SamplingParams(top_p=0.25), SamplingParams()]
    gens = [torch.Generator().manual_seed(i) for i in range(4)]
    frames = torch.stack([sample_requests(logits, params, gens) for _ in range(100)])  # (N, B, C)
    assert frames[:, 0].eq(0).all()  # greedy: the first of equal logits
    assert set(frames[:, 1].unique().tolist()) == {0, 1}  # top-k 2 keeps the two lowest codes
    assert set(frames[:, 2].unique().tolist()) == {0, 1}  # 25% of uniform mass: two codes in every channel
    levels = torch.tensor(LEVELS)
    assert (frames[:, 3] < levels).all() and frames[:, 3].eq(levels - 1).any()  # full alphabet, never past it


def test_a_row_draws_the_same_whatever_the_batch():
    mask = channel_logit_mask(LEVELS)
    alone = sample_requests(mask[None], [SamplingParams()], [torch.Generator().manual_seed(7)])
    others = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    batched = sample_requests(mask.expand(4, -1, -1), [SamplingParams(top_k=3)] * 2 + [SamplingParams()] * 2,
                            [others[0], others[1], torch.Generator().manual_seed(7), others[2]])
    assert torch.equal(batched[2], alone[0])


def test_sampling_follows_the_distribution():
    logits = torch.log(torch.tensor([[[0.7, 0.2, 0.1]]]))  # (1, 1, 3)
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_requests(logits, [SamplingParams()], [g]) for _ in range(2000)]).flatten()
    freq = torch.bincount(draws, minlength=3).float() / len(draws)
    assert torch.allclose(freq, torch.tensor([0.7, 0.2, 0.1]), atol=0.04)


@pytest.mark.parametrize("bad", [dict(temperature=-1), dict(top_k=-1), dict(top_p=0), dict(top_p=1.5),
                                 dict(stop_threshold=1.0), dict(max_frames=0)])
def test_invalid_params_are_refused(bad):
    with pytest.raises(DuetError):
        SamplingParams(**bad)
