"""Aligned text input for Luna: the layout over [prompt | target] against a naive loop, the CFG null condition,
exact batching, continuous duration targets and the inference layout."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from duet.errors import DuetError
from duet.luna.duration import duration_loss, expected_durations, fit_durations, two_hot
from duet.luna.model import LunaInputs, LunaModel
from duet.nn.aligned import position_features


def _aligned(make_config, window: int = 1):
    torch.manual_seed(0)
    return LunaModel(replace(make_config(), aligned_window=window)).eval()


def _durations(text_lengths: tuple[int, ...], frames: tuple[int, ...], seed: int = 1) -> torch.Tensor:
    """Random positive durations (B, S) per row adding up to that row's frames, 0 past its text."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros(len(text_lengths), max(text_lengths))
    for b, (s, n) in enumerate(zip(text_lengths, frames)):
        d = torch.rand(s, generator=g) + 0.2
        out[b, :s] = d * n / d.sum()
    return out


def naive_vector(model: LunaModel, text: torch.Tensor, durations: list[float], f: int) -> torch.Tensor:
    """a_f for one row by walking its spans: the token holding frame f's centre (else EOT, p = 1)."""
    w, n = model.aligned.window, len(durations)
    centre, start, k, p = f + 0.5, 0.0, n - 1, 1.0
    for j, d in enumerate(durations):
        if start <= centre < start + d:
            k, p = j, (centre - start) / d
            break
        start += d
    window = [text[min(max(k + o, 0), n - 1)] for o in range(-w, w + 1)]
    feats = position_features(torch.tensor([p]), torch.tensor([durations[k]]))[0]
    return model.aligned.tokens(torch.cat(window)) + model.aligned.features(feats)


def test_prompt_and_target_frames_share_one_timeline(make_config):
    model = _aligned(make_config)
    text_lengths, prompt, target = (5, 3), (3, 0), (6, 4)
    durations = _durations(text_lengths, tuple(p + t for p, t in zip(prompt, target)))
    text = model.model.embed_tokens(torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(2)))
    with torch.no_grad():
        a = model.aligned_input(text, torch.tensor(text_lengths), durations, torch.tensor(prompt), 3, 6)  # (2, 9, D)
        for b in range(2):
            s, p, t = text_lengths[b], prompt[b], target[b]
            frames = [*range(p), *range(p, p + t)]  # prompt frames, then the target's after them
            slots = [*range(p), *range(3, 3 + t)]  # where they sit: the prompt region is 3 wide, then the target
            for f, slot in zip(frames, slots):
                expect = naive_vector(model, text[b, :s], durations[b, :s].tolist(), f)
                torch.testing.assert_close(a[b, slot], expect, atol=1e-5, rtol=1e-5)


def test_rows_without_text_get_no_layout_and_batching_is_exact(make_config, random_inputs):
    model = _aligned(make_config)
    inputs = random_inputs(model.config)
    durations = _durations((5, 3), (10, 4))
    x = replace(inputs, target=inputs.target.clamp(max=model.config.mask_id), durations=durations)
    with torch.no_grad():
        full = model(x)
        other = model(replace(x, durations=_durations((5, 3), (10, 4), seed=7)))
        assert not torch.allclose(full, other)  # the layout is read
        null = replace(x, text_lengths=torch.tensor([0, 0]))
        torch.testing.assert_close(model(null), model(replace(null, durations=durations * 3)))  # ... and dropped
        for b in range(2):  # a row alone, cut to its own lengths, gives the same logits
            s, p, t = int(x.text_lengths[b]), int(x.prompt_lengths[b]), int(x.target_lengths[b])
            alone = LunaInputs(x.text_ids[b : b + 1, :s], x.text_lengths[b : b + 1], x.target[b : b + 1, :t],
                               x.target_lengths[b : b + 1], x.prompt[b : b + 1, :p], x.prompt_lengths[b : b + 1],
                               durations[b : b + 1, :s])
            torch.testing.assert_close(model(alone)[0], full[b, :t], atol=1e-5, rtol=1e-4)
        with pytest.raises(DuetError, match="durations"):
            model(replace(x, durations=None))


def test_two_hot_targets_expect_the_continuous_duration():
    d = torch.tensor([0.0, 0.25, 3.5, 7.0, 9.9, 40.0])
    t = two_hot(d, 10)  # (6, 10); the open last bin takes everything at or past 9
    assert torch.allclose(t.sum(-1), torch.ones(6))
    assert torch.allclose(t @ torch.arange(10.0), d.clamp(max=9))
    assert t[1, 0] == pytest.approx(0.75) and t[1, 1] == pytest.approx(0.25)
    with pytest.raises(DuetError):
        two_hot(torch.tensor([-0.5]), 10)


def test_duration_loss_takes_continuous_targets_against_a_loop():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 8, generator=g)
    lengths = torch.tensor([4, 2])
    d = torch.tensor([[1.5, 0.0, 2.25, 7.5], [3.0, 0.5, 99.0, 99.0]])
    terms = []
    for b in range(2):
        for s in range(int(lengths[b])):
            x = min(float(d[b, s]), 7.0)
            lo, frac = int(x), x - int(x)
            logp = logits[b, s].log_softmax(-1)
            terms.append(-((1 - frac) * logp[lo] + frac * logp[min(lo + 1, 7)]))
    torch.testing.assert_close(duration_loss(logits, lengths, d), torch.stack(terms).mean())
    # a predictor that puts out the targets themselves has expectation d (within the bins)
    target_logits = two_hot(d.clamp(max=7), 8).clamp(min=1e-9).log()
    torch.testing.assert_close(expected_durations(target_logits)[0], d[0].clamp(max=7), atol=1e-5, rtol=0)


def test_fit_durations_keeps_proportions_and_adds_up():
    d = torch.tensor([1.0, 3.0, 0.0, 4.0])
    out = fit_durations(d, 20)
    assert float(out.sum()) == pytest.approx(20.0) and out.tolist() == pytest.approx([2.5, 7.5, 0.0, 10.0])
    assert fit_durations(torch.zeros(4), 8).tolist() == [2.0] * 4
