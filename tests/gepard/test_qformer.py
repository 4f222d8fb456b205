"""Voice-cloning Q-Former (Gepard §2.6): shapes, masking, positions, output scale, null prefix, regularisers vs
naive loops, the report's parameter count."""

from __future__ import annotations

import math

import pytest
import torch

from duet.codecs.fsq import GroupFSQ
from duet.gepard.config import report_reconstruction
from duet.gepard.qformer import (
    QFormer,
    QFormerConfig,
    diversity_loss,
    null_prefix_rows,
    qformer_parameters,
    sinusoidal_positions,
    supcon_loss,
)
from duet.nn.masks import lengths_to_mask

LEVELS = torch.tensor(QFormerConfig(width=8).channel_levels)  # (C,)


def small_config(**overrides) -> QFormerConfig:
    return QFormerConfig(**{"width": 32, "num_heads": 4, "num_queries": 4, "max_reference_frames": 64, **overrides})


def random_codes(batch: int, frames: int, generator: torch.Generator) -> torch.Tensor:
    """(B, C, T) channel digits, 0 <= codes[:, k] < L_k."""
    u = torch.rand(batch, len(LEVELS), frames, generator=generator)
    return (u * LEVELS[None, :, None]).long()


def build(seed: int = 0, **overrides) -> QFormer:
    torch.manual_seed(seed)
    return QFormer(small_config(**overrides)).eval()


# ---- config and parameter count ---------------------------------------------------------------------------------


def test_report_parameter_count_at_width_1024():
    config = QFormerConfig(width=1024)
    with torch.device("meta"):  # shapes only
        model = QFormer(config)
    assert sum(p.numel() for p in model.parameters()) == 42_000_385 == qformer_parameters(config)
    assert report_reconstruction()["qformer"] == 42_000_385


@pytest.mark.parametrize("overrides", [{}, {"num_layers": 3, "ffn_multiple": 2, "num_queries": 5}])
def test_parameter_formula_matches_numel(overrides):
    config = small_config(**overrides)
    assert sum(p.numel() for p in QFormer(config).parameters()) == qformer_parameters(config)


@pytest.mark.parametrize("bad", [{"width": 30}, {"width": 33, "num_heads": 3}, {"cfg_dropout_prob": 1.0},
                                 {"num_queries": 0}, {"channel_levels": (8, 1)}])
def test_config_rejects(bad):
    with pytest.raises(ValueError):
        small_config(**bad)


def test_lr_multiplier_covers_the_whole_module():
    model = build()
    assert model.lr_multipliers("qformer.") == {"qformer.": 0.1}
    wrapper = torch.nn.ModuleDict({"qformer": model})
    assert all(name.startswith("qformer.") for name, _ in wrapper.named_parameters())
    assert "qformer.null_prefix" in dict(wrapper.named_parameters())


# ---- pieces vs naive formulas -------------------------------------------------------------------------------------


def test_dequantise_equals_group_fsq():
    g = torch.Generator().manual_seed(0)
    codes = random_codes(3, 7, g)
    torch.testing.assert_close(build().dequantise(codes), GroupFSQ().channels_to_dequantised(codes))
    extremes = build().dequantise((LEVELS - 1)[None, :, None])  # (1, C, 1): highest digit of every channel
    assert extremes.max() <= 1.0 and build().dequantise(torch.zeros(1, 32, 1, dtype=torch.long)).min() == -1.0


def test_sinusoidal_positions_naive():
    got = sinusoidal_positions(11, 6)
    for t in range(11):
        for i in range(3):
            w = 10_000.0 ** (-2 * i / 6)
            assert got[t, 2 * i].item() == pytest.approx(math.sin(t * w), abs=1e-6)
            assert got[t, 2 * i + 1].item() == pytest.approx(math.cos(t * w), abs=1e-6)


# ---- the compressor ------------------------------------------------------------------------------------------------


def test_shapes_on_a_padded_batch():
    model = build()
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([9, 4, 1])
    out = model(random_codes(3, 9, g), lengths_to_mask(lengths, 9))
    for t in (out.prefix, out.prefix_raw, out.q_normed):
        assert t.shape == (3, 4, 32) and torch.isfinite(t).all()
    assert out.is_null.shape == (3,) and not out.is_null.any()


def test_padding_frames_do_not_change_the_output():
    model = build()
    g = torch.Generator().manual_seed(2)
    short = random_codes(1, 5, g)
    alone_raw, alone_q = model.encode(short, torch.ones(1, 5, dtype=torch.bool))
    for pad in (1, 7):
        garbage = random_codes(1, pad, g)
        padded = torch.cat([short, garbage], dim=2)  # (1, C, 5 + pad)
        other = random_codes(1, 5 + pad, g)
        batch = torch.cat([padded, other])  # row 1 full length
        mask = lengths_to_mask(torch.tensor([5, 5 + pad]), 5 + pad)
        raw, q = model.encode(batch, mask)
        torch.testing.assert_close(raw[:1], alone_raw, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(q[:1], alone_q, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(raw[1:], model.encode(other, torch.ones(1, 5 + pad, dtype=torch.bool))[0],
                                   atol=1e-5, rtol=1e-5)


def test_an_empty_reference_stays_finite():
    model = build()
    codes = random_codes(2, 4, torch.Generator().manual_seed(3))
    raw, _ = model.encode(codes, torch.zeros(2, 4, dtype=torch.bool))
    assert torch.isfinite(raw).all()


def test_positions_on_the_reference_only():
    model = build()
    g = torch.Generator().manual_seed(4)
    codes, mask = random_codes(2, 6, g), torch.ones(2, 6, dtype=torch.bool)
    reverse = torch.arange(5, -1, -1)
    raw, _ = model.encode(codes, mask)
    # Queries carry no position: permuting them permutes the output and nothing else.
    perm = torch.tensor([2, 0, 3, 1])
    with torch.no_grad():
        model.queries.copy_(model.queries[perm])
    torch.testing.assert_close(model.encode(codes, mask)[0], raw[:, perm], atol=1e-5, rtol=1e-5)
    # The reference carries positions: reversing its frames changes the output ...
    raw, _ = model.encode(codes, mask)
    assert not torch.allclose(model.encode(codes[:, :, reverse], mask)[0], raw, atol=1e-3)
    # ... and they are the only order signal: without them the cross-attention is a set function of the frames.
    model.positions.zero_()
    raw, _ = model.encode(codes, mask)
    torch.testing.assert_close(model.encode(codes[:, :, reverse], mask)[0], raw, atol=1e-5, rtol=1e-5)


def test_q_normed_rms_one_and_prefix_norm_one_at_init():
    model = QFormer(QFormerConfig(width=256, max_reference_frames=32)).eval()
    codes = random_codes(3, 20, torch.Generator().manual_seed(5))
    raw, q = model.encode(codes, lengths_to_mask(torch.tensor([20, 11, 3]), 20))
    torch.testing.assert_close(q.square().mean(dim=-1).sqrt(), torch.ones(3, 8), atol=1e-4, rtol=0)
    assert model.output_scale.item() == pytest.approx(256 ** -0.5)
    torch.testing.assert_close(raw.norm(dim=-1), torch.ones(3, 8), atol=1e-4, rtol=0)  # §2.6.1: L2 norm ~1
    assert model.null_prefix.std().item() == pytest.approx(0.02, rel=0.1)


def test_rejects_bad_inputs():
    model = build()
    with pytest.raises(ValueError):
        model.encode(torch.zeros(1, 31, 4, dtype=torch.long), torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError):
        model.encode(torch.zeros(1, 32, 65, dtype=torch.long), torch.ones(1, 65, dtype=torch.bool))


def test_gradients_reach_queries_input_projection_and_scale():
    model = build().train()
    g = torch.Generator().manual_seed(6)
    codes, mask = random_codes(4, 7, g), lengths_to_mask(torch.tensor([7, 5, 3, 6]), 7)
    no_speaker = torch.tensor([False, False, False, True])
    out = model(codes, mask, no_speaker, generator=torch.Generator().manual_seed(0))
    target = torch.randn(out.prefix.shape, generator=g)
    loss = (out.prefix * target).sum() + diversity_loss(out.q_normed) + supcon_loss(out.q_normed,
                                                                                    torch.tensor([1, 1, 2, 3]))
    loss.backward()
    for name in ("queries", "input_proj.weight", "input_proj.bias", "output_scale", "null_prefix",
                 "blocks.0.cross_attn.k_proj.weight", "blocks.1.ffn.down_proj.weight", "output_norm.weight"):
        grad = model.get_parameter(name).grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name


# ---- null prefix and CFG dropout (§2.6.2) ---------------------------------------------------------------------------


def test_null_prefix_rate_in_training():
    n, p = 20_000, 0.15
    no_speaker = torch.zeros(n, dtype=torch.bool)
    no_speaker[::10] = True
    rows = null_prefix_rows(no_speaker, p, training=True, generator=torch.Generator().manual_seed(0))
    assert rows[no_speaker].all()  # flagged rows always
    free = rows[~no_speaker].float()
    sigma = math.sqrt(p * (1 - p) / free.numel())
    assert abs(free.mean().item() - p) < 4 * sigma
    again = null_prefix_rows(no_speaker, p, training=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(rows, again)  # the seeded generator decides


def test_null_prefix_never_random_at_inference():
    no_speaker = torch.tensor([True, False, False, True, False])
    for _ in range(20):
        assert torch.equal(null_prefix_rows(no_speaker, 0.15, training=False), no_speaker)
    assert torch.equal(null_prefix_rows(no_speaker, 0.0, training=True), no_speaker)


def test_forward_picks_the_prefix_per_row():
    model = build()
    g = torch.Generator().manual_seed(7)
    codes, mask = random_codes(64, 3, g), torch.ones(64, 3, dtype=torch.bool)
    no_speaker = torch.zeros(64, dtype=torch.bool)
    no_speaker[:5] = True
    model.train()
    out = model(codes, mask, no_speaker, generator=torch.Generator().manual_seed(1))
    assert out.is_null[:5].all() and 0 < out.is_null[5:].sum() < 59
    torch.testing.assert_close(out.prefix[out.is_null], model.null_prefix.expand(int(out.is_null.sum()), -1, -1))
    torch.testing.assert_close(out.prefix[~out.is_null], out.prefix_raw[~out.is_null])
    model.eval()
    out = model(codes, mask, no_speaker)
    assert torch.equal(out.is_null, no_speaker)
    torch.testing.assert_close(out.prefix[5:], out.prefix_raw[5:])
    assert model.null(3).shape == (3, 4, 32)


# ---- regularisers vs naive loops ------------------------------------------------------------------------------------


def naive_diversity(q: torch.Tensor) -> float:
    rows = []
    for b in range(q.shape[0]):
        pairs = [torch.cosine_similarity(q[b, i], q[b, j], dim=0).item() ** 2
                 for i in range(q.shape[1]) for j in range(q.shape[1]) if i != j]
        rows.append(sum(pairs) / len(pairs))
    return sum(rows) / len(rows)


def naive_supcon(q: torch.Tensor, ids: list[int], tau: float, valid: list[bool]) -> float:
    z = [torch.nn.functional.normalize(q[b].mean(dim=0), dim=0) for b in range(q.shape[0])]
    n, losses = len(ids), []
    for i in range(n):
        if not valid[i]:
            continue
        candidates = [a for a in range(n) if a != i and valid[a]]
        positives = [p for p in candidates if ids[p] == ids[i]]
        if not positives:
            continue
        denominator = sum(math.exp(torch.dot(z[i], z[a]).item() / tau) for a in candidates)
        terms = [math.log(math.exp(torch.dot(z[i], z[p]).item() / tau) / denominator) for p in positives]
        losses.append(-sum(terms) / len(terms))
    return sum(losses) / len(losses)


def test_diversity_loss_naive():
    q = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(8))
    assert diversity_loss(q).item() == pytest.approx(naive_diversity(q), rel=1e-5)
    same = torch.randn(1, 1, 16).expand(2, 4, 16)
    assert diversity_loss(same).item() == pytest.approx(1.0, rel=1e-5)  # collapsed queries: the maximum
    eye = torch.eye(4)[None]  # orthogonal queries: the minimum
    assert diversity_loss(eye).item() == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("tau", [0.1, 0.5])
def test_supcon_loss_naive(tau):
    g = torch.Generator().manual_seed(9)
    q = torch.randn(8, 3, 16, generator=g)
    ids = [0, 0, 1, 1, 1, 2, 3, 3]  # speaker 2 has no positive
    valid = [True, True, True, True, True, True, False, True]  # row 6 invalid: row 7 loses its positive
    got = supcon_loss(q, torch.tensor(ids), tau, torch.tensor(valid))
    assert got.item() == pytest.approx(naive_supcon(q, ids, tau, valid), rel=1e-5)
    got_all = supcon_loss(q, torch.tensor(ids), tau)
    assert got_all.item() == pytest.approx(naive_supcon(q, ids, tau, [True] * 8), rel=1e-5)


def test_supcon_without_anchors_is_zero_with_a_graph():
    q = torch.randn(4, 3, 16, requires_grad=True)
    for ids, valid in (([0, 1, 2, 3], None), ([0, 0, 1, 1], torch.tensor([True, False, True, False]))):
        loss = supcon_loss(q, torch.tensor(ids), valid=valid)
        assert loss.item() == 0.0 and loss.requires_grad
        loss.backward()
        assert torch.equal(q.grad, torch.zeros_like(q))


def test_supcon_gradient_finite_with_invalid_rows():
    q = torch.randn(6, 3, 16, requires_grad=True)
    valid = torch.tensor([True, True, False, False, True, True])
    supcon_loss(q, torch.tensor([0, 0, 0, 5, 1, 1]), valid=valid).backward()
    assert torch.isfinite(q.grad).all() and q.grad[2:4].abs().sum() == 0  # invalid rows take no part
