"""MaskGIT decoding on fake models: schedule, Gumbel annealing, CFG, top-k, temperature, immutability."""

from __future__ import annotations

import math

import pytest
import torch

from duet.errors import DuetError
from duet.luna.decode import (
    DecodeConfig,
    cfg_combine,
    gumbel_scale,
    masked_after_step,
    maskgit_decode,
    sample_tokens,
    top_k_filter,
)

K = 16
MASK = K


class FakeModel:
    """logits_fn with fixed logits per (row, frame, codebook); records every call's inputs."""

    def __init__(self, logits_c: torch.Tensor, logits_u: torch.Tensor | None = None):
        self.logits_c, self.logits_u = logits_c, logits_u
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, tokens: torch.Tensor, conditional: torch.Tensor) -> torch.Tensor:
        self.calls.append((tokens.clone(), conditional.clone()))
        B = self.logits_c.shape[0]
        rows = torch.arange(tokens.shape[0]) % B
        cond = self.logits_c[rows]
        uncond = (self.logits_u if self.logits_u is not None else self.logits_c)[rows]
        return torch.where(conditional[:, None, None, None], cond, uncond)


def _random_logits(B, T, Q, seed=0):
    return torch.randn(B, T, Q, K, generator=torch.Generator().manual_seed(seed)) * 3


def test_cosine_schedule_matches_formula():
    for N in (0, 1, 7, 100, 2000):
        for S in (1, 8, 16, 32):
            got = [int(masked_after_step(torch.tensor([N]), s, S)) for s in range(S + 1)]
            naive = [math.floor(N * math.cos(math.pi / 2 * s / S)) for s in range(S)] + [0]
            assert got == naive
            assert got[0] == N and got[-1] == 0
            assert all(a >= b for a, b in zip(got, got[1:]))  # never re-masks


@pytest.mark.parametrize("steps", [8, 16, 32])
def test_masked_count_per_step_follows_schedule(steps):
    B, T, Q = 3, 12, 4
    fake = FakeModel(_random_logits(B, T, Q))
    tokens = torch.full((B, T, Q), MASK)
    tokens[1, :3] = 5  # row 1: three visible frames (a prompt inside the grid)
    lengths = torch.tensor([12, 12, 7])  # row 2: padding frames beyond 7
    tokens[2, 7:] = MASK  # padding holds mask ids yet must not be generated
    n0 = torch.tensor([48, 36, 28])
    out = maskgit_decode(fake, tokens, MASK, DecodeConfig(steps=steps, cfg_scale=1.0), frame_lengths=lengths)
    assert len(fake.calls) == steps
    for s, (seen, _) in enumerate(fake.calls):  # call s (0-based) sees the grid after step s
        masked_now = torch.stack([(seen[b, : lengths[b]] == MASK).sum() for b in range(B)])
        assert torch.equal(masked_now, masked_after_step(n0, s, steps))
    final = torch.stack([(out.tokens[b, : lengths[b]] == MASK).sum() for b in range(B)])
    assert int(final.sum()) == 0
    assert (out.tokens[2, 7:] == MASK).all()  # padding untouched
    # commit_step records the same counts
    for s in range(1, steps + 1):
        per_row = torch.stack([(out.commit_step[b] == s).sum() for b in range(B)])
        assert torch.equal(per_row, masked_after_step(n0, s - 1, steps) - masked_after_step(n0, s, steps))


def test_committed_and_visible_cells_never_change():
    B, T, Q = 2, 10, 3
    g = torch.Generator().manual_seed(0)
    # a model whose favourite token changes at every call: any re-written cell would show
    calls = []

    def fickle(tokens, conditional):
        calls.append(tokens.clone())
        return torch.randn(tokens.shape + (K,), generator=g)

    tokens = torch.randint(0, K, (B, T, Q), generator=g)
    hidden = torch.rand(B, T, Q, generator=g) < 0.7
    tokens[hidden] = MASK
    out = maskgit_decode(fickle, tokens, MASK, DecodeConfig(steps=8), generator=torch.Generator().manual_seed(1))
    assert torch.equal(out.tokens[~hidden], tokens[~hidden])  # visible cells: bit-identical
    assert not (out.tokens == MASK).any()
    seq = [c[:B] for c in calls] + [out.tokens]  # conditional half of each CFG call
    for earlier, later in zip(seq, seq[1:]):
        decided = earlier != MASK
        assert torch.equal(later[decided], earlier[decided])  # committed cells stay committed


def test_gumbel_noise_anneals_to_zero():
    S, tau = 16, 4.5
    scales = [gumbel_scale(s, S, tau) for s in range(1, S + 1)]
    assert scales == pytest.approx([tau * (1 - s / S) for s in range(1, S + 1)])
    assert scales[-1] == 0.0 and all(a > b for a, b in zip(scales, scales[1:]))


def _confidence_ranked_model(T):
    """Cell (t, 0) is certain of code 0 with confidence growing in t; temperature 0 picks code 0."""
    logits = torch.zeros(1, T, 1, K)
    logits[0, :, 0, 0] = torch.linspace(0.0, 6.0, T)
    return FakeModel(logits)


def test_without_noise_commit_order_follows_confidence_and_with_noise_it_does_not():
    T = 32
    fake = _confidence_ranked_model(T)
    tokens = torch.full((1, T, 1), MASK)
    cfg = DecodeConfig(steps=8, temperature=0.0, cfg_scale=1.0, gumbel_temperature=0.0)
    steps = maskgit_decode(fake, tokens, MASK, cfg).commit_step[0, :, 0]
    assert all(a >= b for a, b in zip(steps.tolist(), steps[1:].tolist()))  # most confident first
    noisy = DecodeConfig(steps=8, temperature=0.0, cfg_scale=1.0, gumbel_temperature=50.0)
    g = torch.Generator().manual_seed(0)
    shuffled = maskgit_decode(fake, tokens, MASK, noisy, generator=g).commit_step[0, :, 0]
    assert any(a < b for a, b in zip(shuffled.tolist(), shuffled[1:].tolist()))


def test_cfg_combination_formula_and_one_forward_per_step():
    B, T, Q = 2, 5, 2
    lc, lu = _random_logits(B, T, Q, seed=1), _random_logits(B, T, Q, seed=2)
    w = 2.5
    torch.testing.assert_close(cfg_combine(lc, lu, w), lu + w * (lc - lu))
    fake = FakeModel(lc, lu)
    out = maskgit_decode(fake, torch.full((B, T, Q), MASK), MASK, DecodeConfig(steps=4, temperature=0.0, cfg_scale=w))
    assert len(fake.calls) == 4  # conditional and unconditional rows in ONE call per step
    for tokens, conditional in fake.calls:
        assert tokens.shape[0] == 2 * B
        assert conditional.tolist() == [True] * B + [False] * B
        assert torch.equal(tokens[:B], tokens[B:])
    assert torch.equal(out.tokens, (lu + w * (lc - lu)).argmax(-1))  # greedy under the guided logits
    assert not torch.equal(out.tokens, lc.argmax(-1))  # and guidance changed something
    plain = FakeModel(lc, lu)
    maskgit_decode(plain, torch.full((B, T, Q), MASK), MASK, DecodeConfig(steps=4, cfg_scale=1.0))
    assert all(t.shape[0] == B and c.all() for t, c in plain.calls)  # w = 1: conditional rows only


def test_top_k_and_temperature():
    logits = _random_logits(1, 50, 4, seed=3)
    g = torch.Generator().manual_seed(0)
    allowed = logits.topk(3, dim=-1).indices  # (1, T, Q, 3)
    for _ in range(20):
        x = sample_tokens(logits, 1.0, 3, g)
        assert (allowed == x[..., None]).any(-1).all()
    assert torch.equal(sample_tokens(logits, 5.0, 1, g), logits.argmax(-1))
    assert torch.equal(sample_tokens(logits, 0.0, 0, g), logits.argmax(-1))
    filtered = top_k_filter(logits, 3)
    assert torch.equal(torch.isfinite(filtered).sum(-1), torch.full((1, 50, 4), 3))
    # temperature really samples: many draws of one flat cell cover several codes
    flat = torch.zeros(1000, K)
    assert len(set(sample_tokens(flat, 1.0, 0, g).tolist())) > 8
    # through the decoder: top_k = 1 is greedy whatever the temperature
    fake = FakeModel(_random_logits(2, 6, 2, seed=4))
    hot = DecodeConfig(steps=8, top_k=1, temperature=3.0, cfg_scale=1.0)
    out = maskgit_decode(fake, torch.full((2, 6, 2), MASK), MASK, hot)
    assert torch.equal(out.tokens, fake.logits_c.argmax(-1))


def test_steps_and_settings_are_validated():
    for bad in (0, -3):
        with pytest.raises(DuetError, match="steps must be a positive integer"):
            DecodeConfig(steps=bad)
    with pytest.raises(DuetError):
        DecodeConfig(steps=2.5)  # type: ignore[arg-type]
    with pytest.raises(DuetError):
        DecodeConfig(temperature=-1.0)
    with pytest.raises(DuetError):
        DecodeConfig(top_k=-1)


def test_seeded_decoding_is_reproducible_and_nothing_to_do_calls_nothing():
    fake = FakeModel(_random_logits(1, 8, 2))
    tokens = torch.full((1, 8, 2), MASK)
    a = maskgit_decode(fake, tokens, MASK, DecodeConfig(steps=8), generator=torch.Generator().manual_seed(5))
    b = maskgit_decode(fake, tokens, MASK, DecodeConfig(steps=8), generator=torch.Generator().manual_seed(5))
    assert torch.equal(a.tokens, b.tokens)
    idle = FakeModel(_random_logits(1, 8, 2))
    full = torch.zeros(1, 8, 2, dtype=torch.long)
    assert torch.equal(maskgit_decode(idle, full, MASK).tokens, full) and not idle.calls


def test_gumbel_noise_is_standard_gumbel():
    from duet.luna.decode import _gumbel

    g = _gumbel(torch.Size([200_000]), torch.Generator().manual_seed(0), torch.device("cpu"))
    assert torch.isfinite(g).all()
    assert abs(float(g.mean()) - 0.5772) < 0.01  # Euler-Mascheroni constant
    assert abs(float(g.var()) - math.pi**2 / 6) < 0.03


def test_sampling_frequencies_follow_tempered_top_k_softmax():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 3.0])
    g = torch.Generator().manual_seed(0)
    draws = sample_tokens(logits.expand(100_000, 5), 2.0, 4, g)
    freq = torch.bincount(draws, minlength=5).float() / draws.numel()
    kept = torch.tensor([2.0, 1.0, 0.0, float("-inf"), 3.0])  # top-4 drops the smallest
    torch.testing.assert_close(freq, (kept / 2.0).softmax(0), atol=0.01, rtol=0)
