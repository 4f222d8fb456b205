"""Guided attention: the diagonal penalty and the loss against naive per-row loops, its ordering, and the model's
loss with it (gradients reach the guided layers)."""

import math

import pytest
import torch
from gepard_testing import micro_config, random_codes, wrapped

from duet.errors import DuetError
from duet.gepard.alignment import GuidedAttentionConfig, diagonal_penalty, guided_attention_loss
from duet.gepard.model import GepardBatch, GepardModel

CFG = GuidedAttentionConfig(weight=1.0, sigma=0.3, layers=(0, 1), heads=2)


def naive_loss(attentions, text_lengths, audio_lengths, cfg, min_text=4):
    total, count = 0.0, 0
    for b in range(len(text_lengths)):
        s, t = int(text_lengths[b]), int(audio_lengths[b])
        if s < min_text or t == 0:
            continue
        for att in attentions:
            for h in range(cfg.heads):
                for j in range(t):
                    row = att[b, h, s - 1 + j, :s].double()
                    row = row / row.sum()
                    penalty = sum(float(row[k]) * (1 - math.exp(-((j / t - k / s) ** 2) / (2 * cfg.sigma ** 2)))
                                  for k in range(s))
                    total, count = total + penalty, count + 1
    return total / count


def causal_softmax(b, h, length, generator):
    logits = torch.randn(b, h, length, length, generator=generator)
    logits = logits.masked_fill(torch.ones(length, length).triu(1).bool(), float("-inf"))
    return logits.softmax(-1)


def test_the_penalty_matches_its_formula_and_is_zero_outside_each_row():
    w = diagonal_penalty(torch.tensor([4.0, 2.0]), torch.tensor([5.0, 3.0]), 4, 5, 0.3)  # (B, T, S)
    for b, (t, s) in enumerate(((4, 5), (2, 3))):
        for j in range(4):
            for k in range(5):
                want = 1 - math.exp(-((j / t - k / s) ** 2) / (2 * 0.09)) if j < t and k < s else 0.0
                assert abs(float(w[b, j, k]) - want) < 1e-6


def test_loss_matches_a_naive_loop():
    g = torch.Generator().manual_seed(0)
    text_lengths = torch.tensor([6, 3, 9])  # the middle row's text is empty (3 service tokens): left out
    audio_lengths = torch.tensor([7, 5, 4])
    length = int((text_lengths + audio_lengths).max())
    attentions = [causal_softmax(3, 4, length, g) for _ in range(2)]
    got = guided_attention_loss(attentions, text_lengths, audio_lengths, CFG)
    assert abs(float(got) - naive_loss(attentions, text_lengths, audio_lengths, CFG)) < 1e-5


def test_diagonal_attention_costs_less_than_uniform_or_reversed():
    s, t = 8, 16
    length = s + t

    def pattern(kind):
        a = torch.zeros(1, 2, length, length)
        for j in range(t):
            q = s - 1 + j
            if kind == "diagonal":
                a[0, :, q, min(s - 1, int(j / t * s))] = 1.0
            elif kind == "reversed":
                a[0, :, q, s - 1 - min(s - 1, int(j / t * s))] = 1.0
            else:
                a[0, :, q, :s] = 1.0 / s
        return a

    lengths = (torch.tensor([s]), torch.tensor([t]))
    cost = {k: float(guided_attention_loss([pattern(k)], *lengths, CFG)) for k in ("diagonal", "uniform", "reversed")}
    assert cost["diagonal"] < 0.05 < cost["uniform"] < cost["reversed"]


def test_model_loss_adds_the_weighted_penalty_and_trains_the_guided_layers():
    torch.manual_seed(0)
    config = micro_config()
    model = GepardModel(config)
    g = torch.Generator().manual_seed(1)
    rows = [(wrapped([5, 6, 7, 8, 9]), random_codes(config, 6, g)), (wrapped([10, 11, 12]), random_codes(config, 4, g))]
    from duet.gepard.model import collate

    batch: GepardBatch = collate(rows, pad_id=0)
    with pytest.raises(DuetError, match="eager"):
        model(batch, guided=CFG)
    model.model.set_attn_implementation("eager")
    plain = model(batch)
    guided = model(batch, guided=GuidedAttentionConfig(weight=0.5, layers=(1,), heads=2))
    torch.testing.assert_close(guided["ce"], plain["ce"])  # eager computes the same function as sdpa
    torch.testing.assert_close(guided["loss"], plain["loss"] + 0.5 * guided["guided"])
    assert 0 < float(guided["guided"].detach()) < 1
    model.zero_grad()
    guided["guided"].backward()
    q = model.model.layers[1].self_attn.q_proj.weight.grad
    assert q is not None and q.abs().sum() > 0
    with pytest.raises(DuetError):
        GuidedAttentionConfig(weight=1.0, layers=())


# ---- attention supervision: the target laid out by the corpus timing ----------------------------------------------

ALIGNED = GuidedAttentionConfig(weight=1.0, layers=(0, 1), heads=2, target="aligned", token_sigma=0.8)


def naive_frame_token(durations, s, j):
    """The wrapped token whose span holds frame j's centre; EOT (two from the end) past the last span."""
    end = 0.0
    for k in range(s - 1):  # SOS (the last token) lasts 0 frames
        end += durations[k]
        if j + 0.5 < end:
            return k
    return s - 2


def naive_aligned_loss(attentions, text_lengths, audio_lengths, durations, cfg, min_text=4):
    total, count = 0.0, 0
    for b in range(len(text_lengths)):
        s, t = int(text_lengths[b]), int(audio_lengths[b])
        if s < min_text or t == 0:
            continue
        d = [float(x) for x in durations[b, :s]]
        for att in attentions:
            for h in range(cfg.heads):
                for j in range(t):
                    row = att[b, h, s - 1 + j, :s].double()
                    row = row / row.sum()
                    k_j = naive_frame_token(d, s, j)
                    penalty = sum(float(row[k]) * (1 - math.exp(-((k - k_j) ** 2) / (2 * cfg.token_sigma ** 2)))
                                  for k in range(s))
                    total, count = total + penalty, count + 1
    return total / count


def test_aligned_target_loss_matches_a_naive_loop():
    g = torch.Generator().manual_seed(3)
    text_lengths = torch.tensor([7, 3, 6])  # the middle row is the dropped text: left out
    audio_lengths = torch.tensor([9, 4, 5])
    durations = torch.zeros(3, 7)
    durations[0, :7] = torch.tensor([1.25, 2.0, 0.75, 1.5, 2.25, 1.25, 0.0])  # sums to 9; SOS 0 (binary fractions:
    # a centre on a boundary is decided the same way by both)
    durations[1, :3] = torch.tensor([1.5, 2.5, 0.0])
    durations[2, :6] = torch.tensor([0.375, 1.125, 1.0, 1.625, 0.875, 0.0])  # sums to 5
    length = int((text_lengths + audio_lengths).max())
    attentions = [causal_softmax(3, 4, length, g) for _ in range(2)]
    got = guided_attention_loss(attentions, text_lengths, audio_lengths, ALIGNED, durations=durations)
    want = naive_aligned_loss(attentions, text_lengths, audio_lengths, durations, ALIGNED)
    assert abs(float(got) - want) < 1e-5
    with pytest.raises(DuetError, match="durations"):
        guided_attention_loss(attentions, text_lengths, audio_lengths, ALIGNED)


def test_aligned_target_prefers_the_spoken_token_over_the_diagonal_guess():
    # a row that lingers on its first token: the diagonal guess is wrong, the timing is right
    s, t = 6, 12
    durations = torch.tensor([[1.0, 7.0, 1.0, 1.0, 2.0, 0.0]])
    lengths = (torch.tensor([s]), torch.tensor([t]))

    def attend(token_of):
        a = torch.zeros(1, 2, s + t, s + t)
        for j in range(t):
            a[0, :, s - 1 + j, token_of(j)] = 1.0
        return a

    timed = attend(lambda j: naive_frame_token(durations[0].tolist(), s, j))
    diagonal = attend(lambda j: min(s - 1, int(j / t * s)))
    cost = {name: float(guided_attention_loss([a], *lengths, ALIGNED, durations=durations))
            for name, a in (("timed", timed), ("diagonal", diagonal))}
    assert cost["timed"] < 1e-6 < cost["diagonal"]
    with pytest.raises(DuetError, match="target"):
        GuidedAttentionConfig(weight=1.0, target="nearest")
