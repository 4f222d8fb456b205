"""The sampler on a scripted fake model (no weights), plus one consistency run on a tiny random GepardModel."""

from __future__ import annotations

import math

import pytest
import torch
from gepard_testing import micro_config, wrapped

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.generate import BOUND, STOP, generate, guide, stream
from duet.gepard.heads import FrameLogits, pad_channels
from duet.gepard.model import GepardBatch, GepardModel, GepardPrompt, collate
from duet.gepard.sampling import sample_frames
from duet.sampling import FrameBound, SamplingParams

LEVELS = FSQConfig().channel_levels


class ScriptedModel:
    """A FrameModel whose stop logit is +20 at the scripted step of each row (-20 before), and whose channel logits
    are ``codes_fn(prompt, step)`` (zeros = uniform by default). Records every frame it is fed."""

    def __init__(self, stop_at: list[int | None], codes_fn=None):
        self.stop_at = stop_at
        self.codes_fn = codes_fn or (lambda prompt, step: torch.zeros(len(stop_at), sum(LEVELS)))
        self.fed: list[torch.Tensor] = []
        self.prefills = 0

    def _logits(self, prompt, step: int) -> FrameLogits:
        stop = torch.tensor([20.0 if s is not None and step >= s else -20.0 for s in self.stop_at])
        return FrameLogits(self.codes_fn(prompt, step)[:, None], stop[:, None], LEVELS)

    def prefill(self, prompt):
        self.prefills += 1
        return self._logits(prompt, 0), (prompt, 0)

    def step(self, frame, state):
        self.fed.append(frame.clone())
        prompt, step = state
        return self._logits(prompt, step + 1), (prompt, step + 1)


def test_stops_at_the_scripted_step():
    model = ScriptedModel([5])
    gen = stream(model, "text", num_text_tokens=10, params=SamplingParams(seed=0))
    frames = list(gen)
    assert len(frames) == 5 and all(f.shape == (1, 32) for f in frames)
    result = gen.result
    assert result.ended == (STOP,) and result.lengths.tolist() == [5] and result.codes.shape == (1, 32, 5)
    assert torch.equal(torch.stack(frames, dim=-1), result.codes)
    # Every emitted frame is fed back: the stop decision after the last frame reads its logits.
    assert len(model.fed) == 5 and torch.equal(torch.cat(model.fed), result.codes[0].T)
    # Probes: one stop decision per frame + the one that ended it; uniform channels have entropy ln L_k.
    assert result.probes.stop_prob.shape == (1, 6) and result.probes.stop_prob[0, -1] > 0.5
    assert (result.probes.stop_prob[0, :-1] < 0.5).all()
    want = torch.log(torch.tensor(LEVELS, dtype=torch.float))
    torch.testing.assert_close(result.probes.entropy[0], want.expand(6, 32))


def test_stop_at_zero_gives_empty_generation():
    result = generate(ScriptedModel([0]), "text", num_text_tokens=3, params=SamplingParams(seed=0))
    assert result.ended == (STOP,) and result.codes.shape == (1, 32, 0)


def test_ends_at_the_bound_when_stop_never_fires():
    bound = FrameBound(frames_per_token=2.0, margin_frames=5, max_frames=100)
    assert bound.frames(3) == 11
    result = generate(ScriptedModel([None]), "text", num_text_tokens=3, params=SamplingParams(seed=0), bound=bound)
    assert result.ended == (BOUND,) and result.lengths.tolist() == [11] and result.bound == 11
    assert result.codes.shape == (1, 32, 11) and (result.codes >= 0).all()
    # The hard cap wins over the text-length bound, and a request's own max_frames over both.
    capped = FrameBound(frames_per_token=2.0, margin_frames=5, max_frames=4)
    assert generate(ScriptedModel([None]), "t", num_text_tokens=3, bound=capped).lengths.tolist() == [4]
    asked = SamplingParams(seed=0, max_frames=7)
    assert generate(ScriptedModel([None]), "t", num_text_tokens=3, params=asked, bound=bound).lengths.tolist() == [7]


def test_frame_bound_formula():
    bound = FrameBound(frames_per_token=12.0, margin_frames=43, max_frames=860)
    assert bound == FrameBound()  # the report's defaults
    assert bound.frames(1) == 55 and bound.frames(0) == 43 and bound.frames(100) == 860
    assert FrameBound(frames_per_token=2.5, margin_frames=0).frames(2) == 5
    with pytest.raises(DuetError):
        FrameBound(max_frames=0)


def test_rows_end_independently():
    result = generate(ScriptedModel([2, 4, None]), "t", num_text_tokens=0,
                      params=SamplingParams(seed=0), bound=FrameBound(margin_frames=6, frames_per_token=0))
    assert result.ended == (STOP, STOP, BOUND) and result.lengths.tolist() == [2, 4, 6]
    assert (result.codes[0, :, 2:] == -1).all() and (result.codes[0, :, :2] >= 0).all()
    assert (result.codes[1, :, 4:] == -1).all() and (result.codes[2] >= 0).all()
    assert torch.isnan(result.probes.stop_prob[0, 3:]).all()


def test_sampled_codes_stay_in_each_channel_alphabet():
    result = generate(ScriptedModel([None] * 4), "t", num_text_tokens=0,
                      params=SamplingParams(seed=3), bound=FrameBound(margin_frames=50, frames_per_token=0))
    levels = torch.tensor(LEVELS)[None, :, None]
    assert (result.codes < levels).all() and (result.codes >= 0).all()
    # and every level is reached (uniform logits, 200 draws per channel)
    for k, level in enumerate(LEVELS):
        assert set(result.codes[:, k].flatten().tolist()) == set(range(level))


def test_same_seed_same_output_different_seed_differs():
    bound = FrameBound(margin_frames=10, frames_per_token=0)
    a = generate(ScriptedModel([None]), "t", num_text_tokens=0, params=SamplingParams(seed=11), bound=bound)
    b = generate(ScriptedModel([None]), "t", num_text_tokens=0, params=SamplingParams(seed=11), bound=bound)
    c = generate(ScriptedModel([None]), "t", num_text_tokens=0, params=SamplingParams(seed=12), bound=bound)
    assert torch.equal(a.codes, b.codes) and not torch.equal(a.codes, c.codes)


def test_top_k_one_and_temperature_zero_are_argmax():
    g = torch.Generator().manual_seed(0)
    table = torch.randn(8, 3, sum(LEVELS), generator=g)  # (step, B, 216): no ties
    codes_fn = lambda prompt, step: table[step]  # noqa: E731
    want = torch.stack([pad_channels(table[t], LEVELS).argmax(-1) for t in range(6)], dim=-1)  # (B, C, 6)
    bound = FrameBound(margin_frames=6, frames_per_token=0)
    for params in (SamplingParams(top_k=1, temperature=1.3, seed=0), SamplingParams(temperature=0.0),
                   SamplingParams(top_p=1e-6, temperature=1.3, seed=0)):
        result = generate(ScriptedModel([None] * 3, codes_fn), "t", num_text_tokens=0, params=params, bound=bound)
        assert torch.equal(result.codes, want)


def test_top_k_keeps_only_the_k_best_levels():
    g = torch.Generator().manual_seed(1)
    logits = pad_channels(torch.randn(500, sum(LEVELS), generator=g), LEVELS)  # (B, C, Lmax)
    codes = sample_frames(logits, [1.0] * 500, [2] * 500, [1.0] * 500, [torch.Generator().manual_seed(i) for i in range(500)])
    top2 = logits.topk(2, dim=-1).indices  # (B, C, 2)
    assert ((codes[..., None] == top2).any(-1)).all()


def test_sampling_frequencies_follow_softmax():
    logits = pad_channels(torch.linspace(-1, 1, sum(LEVELS))[None].expand(20000, -1), LEVELS)
    n = logits.shape[0]
    codes = sample_frames(logits, [0.7] * n, [0] * n, [1.0] * n, [torch.Generator().manual_seed(i) for i in range(n)])
    want = torch.softmax(logits[0] / 0.7, dim=-1)  # (C, Lmax)
    for k, level in enumerate(LEVELS[:4]):
        freq = torch.bincount(codes[:, k], minlength=8).float() / codes.shape[0]
        torch.testing.assert_close(freq, want[k], atol=0.015, rtol=0)


def test_cfg_combines_the_two_passes_by_its_formula():
    # Channel 0: cond prefers level 0 (1.0 vs 0.5), uncond even more (2.0 vs 0.0). With w = 3 the guided logits are
    # 2 + 3 (1 - 2) = -1 for level 0 and 0 + 3 (0.5 - 0) = 1.5 for level 1: guidance flips the choice.
    def codes_fn(prompt, step):
        flat = torch.full((1, sum(LEVELS)), -5.0)
        flat[0, :2] = torch.tensor([1.0, 0.5]) if prompt == "cond" else torch.tensor([2.0, 0.0])
        return flat

    torch.testing.assert_close(guide(torch.tensor([1.0, 0.5]), torch.tensor([2.0, 0.0]), 3.0),
                               torch.tensor([-1.0, 1.5]))
    bound = FrameBound(margin_frames=3, frames_per_token=0)
    plain = generate(ScriptedModel([None], codes_fn), "cond", num_text_tokens=0,
                     params=SamplingParams(temperature=0.0), bound=bound)
    model = ScriptedModel([None], codes_fn)
    guided = generate(model, "cond", num_text_tokens=0, params=SamplingParams(temperature=0.0, cfg_scale=3.0),
                      bound=bound, uncond_prompt="uncond")
    assert (plain.codes[0, 0] == 0).all() and (guided.codes[0, 0] == 1).all()
    assert model.prefills == 2 and len(model.fed) == 2 * 3  # both paths are fed every frame
    # Probes see the guided distribution: channel 0 entropy of softmax([-1, 1.5, -5 x 6]).
    p = torch.softmax(torch.tensor([-1.0, 1.5] + [-5.0 + 3 * (-5.0 + 5.0)] * 6), dim=0)
    torch.testing.assert_close(guided.probes.entropy[0, 0, 0], -(p * p.log()).sum())
    with pytest.raises(DuetError, match="unconditional"):
        generate(ScriptedModel([None]), "cond", num_text_tokens=0, params=SamplingParams(cfg_scale=2.0))


def test_packed_frames_for_the_codec():
    fsq = GroupFSQ(FSQConfig())
    model = ScriptedModel([4])
    gen = stream(model, "t", num_text_tokens=10, params=SamplingParams(seed=5), fsq=fsq)
    packed = list(gen)
    assert all(p.shape == (1, 8) for p in packed) and len(packed) == 4
    assert torch.equal(torch.stack(packed, dim=-1), fsq.fold(gen.result.codes))
    assert torch.equal(gen.result.packed(fsq), fsq.fold(gen.result.codes))


def test_generation_is_iterated_once_and_result_needs_the_end():
    gen = stream(ScriptedModel([2]), "t", num_text_tokens=1, params=SamplingParams(seed=0))
    with pytest.raises(DuetError, match="not finished"):
        gen.result
    list(gen)
    with pytest.raises(DuetError, match="once"):
        iter(gen)


def test_gepard_model_generation_matches_teacher_forced_logits():
    """Greedy decoding through the KV cache picks, at every step, the argmax of a full teacher-forced pass."""
    torch.manual_seed(0)
    model = GepardModel(micro_config()).eval()
    prompt = GepardPrompt(torch.tensor([wrapped([4, 9, 16])]))
    result = generate(model, prompt, params=SamplingParams(temperature=0.0, stop_threshold=0.99),
                      bound=FrameBound(frames_per_token=2.0, margin_frames=2))
    assert result.bound == 8 and result.ended == (BOUND,) and result.codes.shape == (1, 32, 8)
    batch = collate([(prompt.text_ids[0].tolist(), result.codes[0])], pad_id=0)
    with torch.no_grad():
        full = model.audio_logits(batch)  # (1, 9, ...)
    assert torch.equal(full.padded()[0, :8].argmax(-1).T, result.codes[0])
    torch.testing.assert_close(torch.sigmoid(full.stop[0]), result.probes.stop_prob[0], atol=1e-4, rtol=0)
    assert isinstance(batch, GepardBatch) and math.isfinite(float(result.probes.entropy.sum()))
