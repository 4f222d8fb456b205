"""The masked-diffusion objective against naive per-cell loops, and its pieces."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from duet.errors import DuetError
from duet.luna.diffusion import (
    DiffusionConfig,
    diffusion_training_loss,
    drop_text,
    mask_target,
    masked_diffusion_loss,
    sample_noise_level,
    split_prompt,
)
from duet.luna.model import LunaModel


def test_noise_level_formula_and_range():
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    t = sample_noise_level(20_000, 1e-3, g1)
    u = torch.rand(20_000, generator=g2)
    torch.testing.assert_close(t, 1e-3 + (1 - 1e-3) * (1 - u))
    assert float(t.min()) > 1e-3 and float(t.max()) <= 1.0
    assert abs(float(t.mean()) - 0.5) < 0.01


def test_mask_target_only_masks_real_target_cells_at_rate_t():
    g = torch.Generator().manual_seed(0)
    B, T, Q, K = 3, 400, 8, 16
    target = torch.randint(0, K, (B, T, Q), generator=g)
    lengths = torch.tensor([400, 250, 100])
    t = torch.tensor([0.3, 0.9, 0.05])
    noisy, masked = mask_target(target, lengths, t, K, g)
    assert torch.equal(noisy[masked], torch.full_like(noisy[masked], K))
    assert torch.equal(noisy[~masked], target[~masked])
    for b in range(B):
        n = int(lengths[b])
        assert not masked[b, n:].any()  # padding is never a masked target cell
        assert abs(float(masked[b, :n].float().mean()) - float(t[b])) < 0.02


def _naive_loss(logits, target, masked, t, lengths, weights=None):
    B, T, Q, K = logits.shape
    w = [1.0] * Q if weights is None else [wq * Q / sum(weights) for wq in weights]  # mean 1
    total, cells = 0.0, 0
    for b in range(B):
        for i in range(int(lengths[b])):
            for q in range(Q):
                cells += 1
                if masked[b, i, q]:
                    row = logits[b, i, q].double()
                    ce = -(row[int(target[b, i, q])] - torch.logsumexp(row, 0))
                    total += w[q] * float(ce) / float(t[b])
    return total / cells


def test_loss_matches_naive_per_cell_loop():
    g = torch.Generator().manual_seed(1)
    B, T, Q, K = 3, 6, 3, 5
    logits = torch.randn(B, T, Q, K, generator=g)
    target = torch.randint(0, K, (B, T, Q), generator=g)
    lengths = torch.tensor([6, 4, 1])
    t = torch.tensor([0.7, 0.2, 1.0])
    target[1, 4:] = K  # padding may hold the mask id
    _, masked = mask_target(target, lengths, t, K, g)
    out = masked_diffusion_loss(logits, target, masked, t, lengths)
    assert out.num_cells == 11 * Q and out.num_masked == int(masked.sum())
    assert math.isclose(float(out.loss), _naive_loss(logits, target, masked, t, lengths), rel_tol=1e-5)
    # plain masked CE: the same loop without 1/t, over masked cells
    ce = [
        float(-(logits[b, i, q].log_softmax(0)[int(target[b, i, q])]))
        for b in range(B)
        for i in range(T)
        for q in range(Q)
        if masked[b, i, q]
    ]
    assert math.isclose(float(out.masked_ce), sum(ce) / len(ce), rel_tol=1e-5)
    for q in range(Q):  # per codebook (the first is logged as first_ce)
        ce_q = [float(-(logits[b, i, q].log_softmax(0)[int(target[b, i, q])]))
                for b in range(B) for i in range(T) if masked[b, i, q]]
        assert math.isclose(float(out.codebook_ce[q]), sum(ce_q) / len(ce_q), rel_tol=1e-5)


def test_codebook_weights_match_naive_loop_and_keep_the_bound():
    g = torch.Generator().manual_seed(5)
    B, T, Q, K = 2, 5, 3, 4
    logits = torch.randn(B, T, Q, K, generator=g)
    target = torch.randint(0, K, (B, T, Q), generator=g)
    lengths, t = torch.tensor([5, 3]), torch.tensor([0.6, 0.9])
    _, masked = mask_target(target, lengths, t, K, g)
    weights = (4.0, 2.0, 1.0)
    out = masked_diffusion_loss(logits, target, masked, t, lengths, weights)
    assert math.isclose(float(out.loss), _naive_loss(logits, target, masked, t, lengths, weights), rel_tol=1e-5)
    assert math.isclose(float(out.bound), _naive_loss(logits, target, masked, t, lengths), rel_tol=1e-5)
    plain = masked_diffusion_loss(logits, target, masked, t, lengths)
    assert plain.bound is None
    # equal weights are the plain loss, whatever their scale
    same = masked_diffusion_loss(logits, target, masked, t, lengths, (3.0, 3.0, 3.0))
    assert math.isclose(float(same.loss), float(plain.loss), rel_tol=1e-6)
    with pytest.raises(DuetError, match="2 codebook weights for a grid of 3"):
        masked_diffusion_loss(logits, target, masked, t, lengths, (1.0, 1.0))
    with pytest.raises(DuetError, match="codebook weights"):
        DiffusionConfig(codebook_weights=(1.0, -1.0))


def test_padding_marked_masked_is_ignored():
    g = torch.Generator().manual_seed(1234)
    logits = torch.randn(2, 4, 2, 3, generator=g)
    target = torch.randint(0, 3, (2, 4, 2), generator=g)
    masked = torch.ones(2, 4, 2, dtype=torch.bool)
    t = torch.tensor([0.5, 0.25])
    out = masked_diffusion_loss(logits, target, masked, t, torch.tensor([4, 3]))
    assert out.num_masked == 14 and out.num_cells == 14
    assert math.isclose(float(out.loss), _naive_loss(logits, target, masked, t, [4, 3]), rel_tol=1e-6)


def test_training_loss_golden_value_at_fixed_seed(make_config, random_inputs):
    """Pins init, prompt split, text dropout, noise draw and masking together (torch 2.13 CPU, transformers 5.24)."""
    torch.manual_seed(0)
    cfg = make_config()
    model = LunaModel(cfg)
    inputs = replace(random_inputs(cfg, prompt=(0, 0)), prompt=None, prompt_lengths=None)
    inputs = replace(inputs, target=inputs.target.clamp(max=cfg.codebook_size - 1))
    out = diffusion_training_loss(model, inputs, DiffusionConfig(), torch.Generator().manual_seed(0))
    assert (out.num_masked, out.num_cells) == GOLDEN_COUNTS
    assert math.isclose(float(out.loss.detach()), GOLDEN_LOSS, rel_tol=1e-5)


GOLDEN_COUNTS = (9, 20)
GOLDEN_LOSS = 3.4710533618927


def test_drop_text_rate_and_effect():
    g = torch.Generator().manual_seed(0)
    lengths = torch.full((20_000,), 7)
    new, dropped = drop_text(lengths, 0.1, g)
    assert abs(float(dropped.float().mean()) - 0.1) < 0.01
    assert torch.equal(new[dropped], torch.zeros_like(new[dropped]))
    assert torch.equal(new[~dropped], lengths[~dropped])


def test_split_prompt_keeps_the_utterance_and_respects_bounds():
    g = torch.Generator().manual_seed(0)
    B, T, Q, K = 64, 40, 2, 16
    grid = torch.randint(0, K, (B, T, Q), generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    cfg = DiffusionConfig(prompt_prob=0.5, prompt_min_frac=0.1, prompt_max_frac=0.5)
    prompt, plen, target, tlen = split_prompt(grid, lengths, cfg, K, g)
    assert torch.equal(plen + tlen, lengths)
    split = 0
    for b in range(B):
        n, p = int(lengths[b]), int(plen[b])
        assert torch.equal(torch.cat([prompt[b, :p], target[b, : n - p]]), grid[b, :n])
        assert (prompt[b, p:] == K).all() and (target[b, n - p :] == K).all()
        if p:
            split += 1
            assert n >= 2 and 1 <= p <= n - 1
            assert math.ceil(0.1 * n) <= p or p == 1
            assert p <= max(1, math.floor(0.5 * n))
        if n == 1:
            assert p == 0
    assert 16 < split < 48  # about half
    none = split_prompt(grid, lengths, replace(cfg, prompt_prob=0.0), K, g)
    assert int(none[1].sum()) == 0


def test_training_loss_runs_and_never_masks_conditions(make_config, random_inputs, monkeypatch):
    cfg = make_config()
    model = LunaModel(cfg)
    inputs = replace(random_inputs(cfg, prompt=(0, 0)), prompt=None, prompt_lengths=None)
    inputs = replace(inputs, target=inputs.target.clamp(max=cfg.codebook_size - 1))  # a clean grid
    seen = []
    original = LunaModel.forward

    def spy(self, batch):
        seen.append(batch)
        return original(self, batch)

    monkeypatch.setattr(LunaModel, "forward", spy)
    g = torch.Generator().manual_seed(0)
    out = diffusion_training_loss(model, inputs, DiffusionConfig(prompt_prob=1.0, text_drop_prob=0.0), g)
    out.loss.backward()
    batch = seen[0]
    assert batch.prompt is not None and int(batch.prompt_lengths.min()) >= 1
    for b in range(2):
        p = int(batch.prompt_lengths[b])
        assert not (batch.prompt[b, :p] == cfg.mask_id).any()  # the prompt condition is clean
    assert torch.equal(batch.text_lengths, inputs.text_lengths)
    assert model.audio_embed.weight.grad is not None and model.model.layers[0].mlp.up_proj.weight.grad is not None
    assert torch.isfinite(out.loss)


def test_config_validation():
    with pytest.raises(DuetError):
        DiffusionConfig(t_min=0.0)
    with pytest.raises(DuetError):
        DiffusionConfig(text_drop_prob=1.5)
    with pytest.raises(DuetError):
        DiffusionConfig(prompt_min_frac=0.6, prompt_max_frac=0.5)
