"""Duration predictor: bin targets, frame conversion, T from expected durations, model, presets."""

from __future__ import annotations

import math

import pytest
import torch

from duet.errors import DuetError
from duet.luna.duration import (
    DurationConfig,
    DurationPredictor,
    duration_preset,
    durations_to_bins,
    expected_durations,
    frame_durations,
    total_frames,
)


def test_durations_to_bins_matches_loop():
    d = torch.tensor([[0, 1, 5, 62, 63, 64, 500], [3, 0, 0, 7, 99, 1, 2]])
    got = durations_to_bins(d, 64)
    for b in range(2):
        for s in range(7):
            v = int(d[b, s])
            assert int(got[b, s]) == (v if v < 63 else 63)  # last bin: 63 frames or more
    with pytest.raises(DuetError, match=">= 0"):
        durations_to_bins(torch.tensor([2, -1]), 64)
    with pytest.raises(DuetError, match="integer"):
        durations_to_bins(torch.tensor([1.5]), 64)


def test_frame_durations_round_boundaries_not_lengths():
    ends = [0.013, 0.071, 0.099, 0.15, 0.151, 0.62]
    got = frame_durations(ends, 25.0)
    naive, prev = [], 0
    for e in ends:
        boundary = round(e * 25.0)
        naive.append(boundary - prev)
        prev = boundary
    assert got == naive and sum(got) == round(0.62 * 25)
    assert frame_durations([1.0, 2.0], 25.0, start=0.5) == [13, 25]  # start round(12.5) = 12 (half to even): 25 - 12
    with pytest.raises(DuetError, match="must not decrease"):
        frame_durations([0.2, 0.1], 25.0)
    with pytest.raises(DuetError):
        frame_durations([0.1], 0.0)


def test_expected_durations_matches_loop():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    got = expected_durations(logits)
    for b in range(2):
        for s in range(3):
            p = logits[b, s].softmax(0)
            assert math.isclose(float(got[b, s]), sum(k * float(p[k]) for k in range(5)), rel_tol=1e-5)


def test_total_frames_speed_override_and_errors():
    d = torch.tensor([[2.4, 3.3, 9.9], [4.0, 1.2, 0.0]])
    lengths = torch.tensor([3, 2])
    assert total_frames(d, lengths).tolist() == [16, 5]  # 15.6 -> 16; 5.2 -> 5 (the padded 0.0 is not counted)
    assert total_frames(d, lengths, speed=2.0).tolist() == [8, 3]  # 7.8 -> 8; 2.6 -> 3
    assert total_frames(d, lengths, speed=0.5).tolist() == [31, 10]
    assert total_frames(d, lengths, speed=3.0, frames=40).tolist() == [40, 40]  # explicit T wins
    assert total_frames(d, lengths, frames=[7, 9]).tolist() == [7, 9]
    with pytest.raises(DuetError, match="at least 1"):
        total_frames(d, lengths, frames=0)
    with pytest.raises(DuetError, match="at least 1"):
        total_frames(d, lengths, frames=[5, -2])
    with pytest.raises(DuetError, match="speed must be positive"):
        total_frames(d, lengths, speed=0.0)
    with pytest.raises(DuetError, match="0 frames"):
        total_frames(torch.tensor([[0.1, 0.2]]), torch.tensor([2]))
    with pytest.raises(DuetError, match="batch of 2"):
        total_frames(d, lengths, frames=[1, 2, 3])


@pytest.fixture
def tiny(make_backbone):
    torch.manual_seed(0)
    return DurationPredictor(DurationConfig(backbone=make_backbone(), num_bins=8)).eval()


def test_predictor_shapes_batching_and_loss_against_loop(tiny):
    model = tiny
    ids = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(1))
    lengths = torch.tensor([6, 3])
    with torch.no_grad():
        logits = model(ids, lengths)
        assert logits.shape == (2, 6, 8)
        alone = model(ids[1:, :3], lengths[1:])
    torch.testing.assert_close(logits[1, :3], alone[0], rtol=1e-5, atol=1e-5)
    durations = torch.tensor([[0, 3, 12, 7, 1, 2], [4, 9, 0, -5, -5, -5]])  # padding may hold anything
    loss = model.loss(ids, lengths, durations)
    terms = []
    for b in range(2):
        for s in range(int(lengths[b])):
            target = min(int(durations[b, s]), 7)
            terms.append(-float(logits[b, s].log_softmax(0)[target]))
    assert math.isclose(float(loss.detach()), sum(terms) / len(terms), rel_tol=1e-5)
    frames = model.predict_frames(ids, lengths)
    assert frames.dtype == torch.long and (frames >= 1).all()
    expected = model.token_durations(ids, lengths)
    assert torch.equal(frames, torch.round(expected.sum(1)).long())
    assert model.predict_frames(ids, lengths, frames=11).tolist() == [11, 11]
    with pytest.raises(DuetError, match="at least one text token"):
        model(ids, torch.tensor([6, 0]))


def test_predictor_learns_per_token_durations(tiny):
    model = tiny.train()
    ids = torch.tensor([[1, 2, 3, 4], [3, 1, 2, 0]])
    lengths = torch.tensor([4, 3])
    table = {1: 2, 2: 5, 3: 0, 4: 7}
    durations = ids.clone().apply_(lambda i: table.get(i, 0))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(60):
        opt.zero_grad()
        loss = model.loss(ids, lengths, durations)
        loss.backward()
        opt.step()
    model.eval()
    assert float(loss.detach()) < 0.1
    assert model.predict_frames(ids, lengths).tolist() == [14, 7]


def test_presets_build_and_round_trip(tmp_path, tiny):
    with torch.device("meta"):
        big = DurationPredictor(duration_preset("luna-0.6b"))
    assert big.model.config.num_hidden_layers == 28 and big.model.config.hidden_size == 1024
    tiny = DurationPredictor(duration_preset("luna-tiny"))
    assert tiny.config.num_bins == 64
    with pytest.raises(DuetError):
        duration_preset("nope")
    model = tiny
    model.save(tmp_path / "dur")
    again = DurationPredictor.load(tmp_path / "dur").eval()
    ids, lengths = torch.tensor([[1, 2, 3]]), torch.tensor([3])
    with torch.no_grad():
        assert torch.equal(model(ids, lengths), again(ids, lengths))


def test_predictor_init_from_qwen3_checkpoint(tmp_path, tiny):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    qc = Qwen3Config(
        vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, max_position_embeddings=256, tie_word_embeddings=True,
    )
    qwen = Qwen3ForCausalLM(qc)
    qwen.save_pretrained(tmp_path)
    head_before = tiny.head.weight.clone()
    tiny.init_from(tmp_path)
    for name, tensor in tiny.model.state_dict().items():
        assert torch.equal(tensor, qwen.model.state_dict()[name])
    assert torch.equal(tiny.head.weight, head_before)  # the bin head stays new


def test_spread_frames_matches_loop_and_adds_up():
    import random
    from fractions import Fraction

    from duet.data.token_rows import spread_frames

    rng = random.Random(0)
    for _ in range(200):
        weights = [rng.choice([0, 0, 1, 2, 3, 5, 9]) for _ in range(rng.randint(1, 12))]
        if not sum(weights):
            weights[0] = 1
        frames = rng.randint(0, 300)
        got = spread_frames(weights, frames)
        total, running, prev, naive = sum(weights), 0, 0, []
        for w in weights:  # boundaries at round-half-up(frames * running / total), in exact fractions
            running += w
            boundary = math.floor(Fraction(frames * running, total) + Fraction(1, 2))
            naive.append(boundary - prev)
            prev = boundary
        assert got == naive and sum(got) == frames
        assert all(d == 0 for d, w in zip(got, weights) if w == 0)
        assert all(abs(d - frames * w / total) <= 1 for d, w in zip(got, weights))
    assert spread_frames([3, 1], 8) == [6, 2] and spread_frames([1, 1, 1], 2) == [1, 0, 1]
    with pytest.raises(DuetError, match="all 0"):
        spread_frames([0, 0], 5)
    with pytest.raises(DuetError, match=">= 0"):
        spread_frames([1, -1], 5)
