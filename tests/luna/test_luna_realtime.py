"""Luna-TTS Realtime model and objective: block geometry, terminal target, per-block masking and loss against naive
per-cell loops, block causality of the two-stream forward, initialisation from Luna, save/load."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from duet.errors import DuetError
from duet.luna.model import LunaInputs, LunaModel
from duet.luna.realtime import PRESETS, LunaRealtime, RealtimeConfig, RealtimeLogits, num_blocks, realtime_preset
from duet.luna.realtime_loss import (
    RealtimeObjective,
    block_diffusion_loss,
    end_targets,
    mask_blocks,
    realtime_training_loss,
)


@pytest.fixture
def make_realtime(make_config):
    def make(block_size: int = 4, seed: int = 0, **kw) -> LunaRealtime:
        torch.manual_seed(seed)
        return LunaRealtime(RealtimeConfig(luna=make_config(**kw), block_size=block_size)).eval()

    return make


def _batch(cfg, text=(5, 3), prompt=(2, 0), target=(9, 8), seed=0) -> LunaInputs:
    g = torch.Generator().manual_seed(seed)
    B, S, P, T = len(text), max(text), max(prompt), max(target)
    Q, K, V = cfg.num_codebooks, cfg.codebook_size, cfg.backbone.vocab_size
    return LunaInputs(
        text_ids=torch.randint(0, V, (B, S), generator=g),
        text_lengths=torch.tensor(text),
        target=torch.randint(0, K, (B, T, Q), generator=g),
        target_lengths=torch.tensor(target),
        prompt=torch.randint(0, K, (B, P, Q), generator=g),
        prompt_lengths=torch.tensor(prompt),
    )


def test_presets_are_luna_presets_with_32_frame_blocks():
    assert set(PRESETS) == {"luna-realtime-0.6b", "luna-realtime-tiny"}
    for name in PRESETS:
        cfg = realtime_preset(name)
        assert cfg.block_size == 32 and RealtimeConfig.from_dict(cfg.to_dict()) == cfg
    with torch.device("meta"):
        model = LunaRealtime(realtime_preset("luna-realtime-tiny"))
    assert model.end_head.weight.shape == (1, realtime_preset("luna-realtime-tiny").luna.backbone.width)
    with pytest.raises(DuetError, match="unknown Luna Realtime preset"):
        realtime_preset("luna-realtime-7b")
    with pytest.raises(DuetError):
        RealtimeConfig(luna=realtime_preset("luna-realtime-tiny").luna, block_size=0)


def test_num_blocks_and_terminal_target_on_a_block_boundary():
    bk = 4
    lengths = torch.tensor([1, 3, 4, 5, 8, 9])
    assert num_blocks(lengths, bk).tolist() == [1, 1, 2, 2, 3, 3]
    for T in range(1, 20):
        n = int(num_blocks(torch.tensor([T]), bk))
        assert n == math.ceil(T / bk) + (T % bk == 0)  # ceil(T / B_k), plus a terminal block on a boundary
    past, sup = end_targets(lengths, bk, 12)
    for b, T in enumerate(lengths.tolist()):
        n = int(num_blocks(lengths[b : b + 1], bk))
        for i in range(12):
            assert bool(past[b, i]) == (i >= T)
            assert bool(sup[b, i]) == (i < n * bk)
        last = range((n - 1) * bk, n * bk)
        assert any(bool(past[b, i]) for i in last)  # the last supervised block always holds a terminal target
    # T = 8 ends exactly on a boundary: block 2 is all past-the-end and is supervised
    assert past[4, 8:12].all() and sup[4, 8:12].all() and not past[4, :8].any()


def test_mask_blocks_matches_naive_per_cell_loop():
    B, T, Q, bk, MASK = 3, 9, 2, 4, 16
    g = torch.Generator().manual_seed(0)
    target = torch.randint(0, 16, (B, T, Q), generator=g)
    lengths = torch.tensor([9, 4, 6])
    t = torch.tensor([[0.1, 0.9, 0.5], [0.3, 0.7, 0.2], [1.0, 0.05, 0.6]])
    noisy, masked = mask_blocks(target, lengths, t, bk, MASK, torch.Generator().manual_seed(7))
    u = torch.rand((B, 12, Q), generator=torch.Generator().manual_seed(7))  # the same draws, in the same order
    assert noisy.shape == masked.shape == (B, 12, Q)
    for b in range(B):
        for i in range(12):
            for q in range(Q):
                real = i < int(lengths[b])
                m = real and float(u[b, i, q]) < float(t[b, i // bk])
                assert bool(masked[b, i, q]) == m
                assert int(noisy[b, i, q]) == (int(target[b, i, q]) if real and not m else MASK)


def test_noise_levels_are_independent_per_block():
    """With t = 1 on one block and tiny t on the others, only that block is masked."""
    target = torch.randint(0, 16, (1, 12, 2), generator=torch.Generator().manual_seed(1))
    t = torch.tensor([[1e-9, 1.0, 1e-9, 1e-9]])
    _, masked = mask_blocks(target, torch.tensor([12]), t, 4, 16)
    assert masked[0, 4:8].all() and not masked[0, :4].any() and not masked[0, 8:].any()


def test_block_loss_matches_naive_per_cell_loop():
    B, Q, K, bk = 2, 2, 5, 3
    lengths = torch.tensor([7, 6])  # row 1 ends on a boundary: 3 blocks, the last all past the end
    Fr = 9
    g = torch.Generator().manual_seed(3)
    codes = torch.randn(B, Fr, Q, K, generator=g)
    end = torch.randn(B, Fr, generator=g)
    target = torch.randint(0, K, (B, 7, Q), generator=g)
    target[1, 6:] = K  # padding holds the mask id
    masked = torch.rand(B, Fr, Q, generator=g) < 0.5
    t = torch.rand(B, 3, generator=g) * 0.9 + 0.1
    out = block_diffusion_loss(RealtimeLogits(codes, end), target, lengths, masked, t, bk, end_weight=0.7)

    diff, n_masked, ce_sum = 0.0, 0, 0.0
    bce, n_sup, end_hits = 0.0, 0, 0
    for b in range(B):
        T = int(lengths[b])
        for i in range(Fr):
            for q in range(Q):
                if i < T and masked[b, i, q]:
                    ce = -torch.log_softmax(codes[b, i, q], -1)[int(target[b, i, q])].item()
                    diff += ce / float(t[b, i // bk])
                    ce_sum += ce
                    n_masked += 1
            if i < (T // bk + 1) * bk:
                y = 1.0 if i >= T else 0.0
                p = torch.sigmoid(end[b, i]).item()
                bce += -(y * math.log(p) + (1 - y) * math.log(1 - p))
                end_hits += int((float(end[b, i]) > 0) == (y == 1.0))
                n_sup += 1
    diff /= int(lengths.sum()) * Q
    assert out.num_masked == n_masked and out.num_cells == 13 * Q
    assert out.diffusion.item() == pytest.approx(diff, rel=1e-5)
    assert out.end.item() == pytest.approx(bce / n_sup, rel=1e-5)
    assert out.loss.item() == pytest.approx(diff + 0.7 * bce / n_sup, rel=1e-5)
    assert out.masked_ce.item() == pytest.approx(ce_sum / n_masked, rel=1e-5)
    assert out.end_accuracy.item() == pytest.approx(end_hits / n_sup)

    # codebook weights (normalised to mean 1) change the loss, not the logged bound
    weighted = block_diffusion_loss(RealtimeLogits(codes, end), target, lengths, masked, t, bk, end_weight=0.7,
                                    codebook_weights=(3.0, 1.0))
    w = (1.5, 0.5)
    wdiff = 0.0
    for b in range(B):
        for i in range(int(lengths[b])):
            for q in range(Q):
                if masked[b, i, q]:
                    ce = -torch.log_softmax(codes[b, i, q], -1)[int(target[b, i, q])].item()
                    wdiff += w[q] * ce / float(t[b, i // bk])
    wdiff /= int(lengths.sum()) * Q
    assert weighted.diffusion.item() == pytest.approx(diff, rel=1e-5)
    assert weighted.loss.item() == pytest.approx(wdiff + 0.7 * bce / n_sup, rel=1e-5)


def test_two_stream_forward_is_block_causal(make_realtime):
    model = make_realtime(block_size=4)
    cfg = model.config.luna
    inputs = _batch(cfg, target=(11, 8))
    Fr = 12
    g = torch.Generator().manual_seed(1)
    noisy = torch.randint(0, cfg.codebook_size + 1, (2, Fr, cfg.num_codebooks), generator=g)
    with torch.no_grad():
        base = model(inputs, noisy)
        assert base.codes.shape == (2, Fr, 2, 16) and base.end.shape == (2, Fr)
        # change noisy block 2 and clean block 2 of row 0: blocks 0 and 1 do not move, block 2 does
        noisy2, target2 = noisy.clone(), inputs.target.clone()
        noisy2[0, 8:] = (noisy2[0, 8:] + 1) % 16
        target2[0, 8:] = (target2[0, 8:] + 1) % 16
        later = model(replace(inputs, target=target2), noisy2)
        torch.testing.assert_close(later.codes[0, :8], base.codes[0, :8])
        torch.testing.assert_close(later.end[0, :8], base.end[0, :8])
        assert not torch.allclose(later.codes[0, 8:], base.codes[0, 8:])
        # clean block 0 feeds the noisy blocks after it, not noisy block 0
        target3 = inputs.target.clone()
        target3[0, :4] = (target3[0, :4] + 3) % 16
        past = model(replace(inputs, target=target3), noisy)
        torch.testing.assert_close(past.codes[0, :4], base.codes[0, :4])
        assert not torch.allclose(past.codes[0, 4:8], base.codes[0, 4:8])
        # row 1 (8 frames, 3 blocks) is unaffected by row 0 and by its padding
        torch.testing.assert_close(later.codes[1], base.codes[1])


def test_row_alone_equals_row_in_batch(make_realtime):
    model = make_realtime(block_size=4)
    cfg = model.config.luna
    inputs = _batch(cfg, text=(5, 3), prompt=(2, 0), target=(11, 5))
    noisy = torch.randint(0, 17, (2, 12, 2), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        both = model(inputs, noisy)
        alone = model(
            LunaInputs(
                inputs.text_ids[1:, :3], inputs.text_lengths[1:], inputs.target[1:, :5], inputs.target_lengths[1:],
                inputs.prompt[1:, :0], inputs.prompt_lengths[1:],
            ),
            noisy[1:, :8],
        )
    torch.testing.assert_close(alone.codes[0], both.codes[1, :8], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(alone.end[0], both.end[1, :8], atol=1e-5, rtol=1e-5)


def test_from_luna_keeps_every_luna_weight_and_save_load_round_trips(tmp_path, make_config):
    torch.manual_seed(0)
    luna = LunaModel(make_config())
    model = LunaRealtime.from_luna(luna, block_size=4)
    own = model.luna.state_dict()
    for name, tensor in luna.state_dict().items():
        assert torch.equal(own[name], tensor), name
    assert set(model.state_dict()) == {f"luna.{k}" for k in luna.state_dict()} | {"end_head.weight", "end_head.bias"}
    model.save(tmp_path / "rt")
    again = LunaRealtime.load(tmp_path / "rt")
    assert again.config == model.config
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    luna.save(tmp_path / "plain")
    with pytest.raises(DuetError, match="luna_realtime"):  # a plain Luna checkpoint goes through from_luna
        LunaRealtime.load(tmp_path / "plain")


def test_training_loss_runs_backward_and_is_seeded(make_realtime):
    model = make_realtime(block_size=4)
    inputs = _batch(model.config.luna, prompt=(0, 0), target=(9, 8))
    inputs = replace(inputs, prompt=None, prompt_lengths=None)
    a = realtime_training_loss(model, inputs, RealtimeObjective(), torch.Generator().manual_seed(5))
    b = realtime_training_loss(model, inputs, RealtimeObjective(), torch.Generator().manual_seed(5))
    assert torch.equal(a.loss, b.loss) and torch.isfinite(a.loss)
    a.loss.backward()
    assert model.end_head.weight.grad is not None and model.luna.audio_heads.weight.grad is not None
    with pytest.raises(DuetError):
        RealtimeObjective(end_weight=-1.0)
