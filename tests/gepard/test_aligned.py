"""Aligned text input: the frame -> token lookup against a naive loop, token timing, and the model's training and
inference paths agreeing position by position."""

from __future__ import annotations

import math

import pytest
import torch
from gepard_testing import micro_config, random_codes, wrapped

from duet.data.token_timing import token_spans, wrapped_durations
from duet.gepard.aligned import EOT_BACK
from duet.gepard.config import GepardConfig, with_aligned_input
from duet.gepard.generate import generate
from duet.gepard.model import GepardModel, GepardPrompt, collate
from duet.nn.aligned import frame_tokens, window_indices
from duet.sampling import SamplingParams


def naive_frame_token(durations: list[float], length: int, j: int, eot_back: int) -> tuple[int, float, float]:
    """Walk the spans one by one: the token whose [start, end) holds frame j's centre, else EOT (p = 1)."""
    centre, start = j + 0.5, 0.0
    for k in range(length - eot_back + 1):  # what follows EOT (Gepard's SOS) never holds a frame
        end = start + durations[k]
        if start <= centre < end:
            return k, (centre - start) / durations[k], durations[k]
        start = end
    return length - eot_back, 1.0, durations[length - eot_back]


@pytest.mark.parametrize("eot_back", [EOT_BACK, 1])  # Gepard's [.., EOT, SOS] and Luna's [.., EOT]
def test_frame_tokens_match_a_naive_walk(eot_back):
    g = torch.Generator().manual_seed(0)
    durations = torch.rand((3, 9), generator=g) * 4
    durations[:, 3] = 0.0  # a token with no frames is skipped
    lengths = torch.tensor([9, 7, 5])
    for row, n in enumerate(lengths.tolist()):
        durations[row, n - eot_back + 1:] = 0.0  # SOS (Gepard) and padding
    positions = torch.arange(30).expand(3, -1)
    k, p, d = frame_tokens(durations, lengths, positions, eot_back)
    for row, n in enumerate(lengths.tolist()):
        for j in range(30):
            kk, pp, dd = naive_frame_token(durations[row].tolist(), n, j, eot_back)
            assert k[row, j].item() == kk
            assert p[row, j].item() == pytest.approx(pp, abs=1e-5)
            assert d[row, j].item() == pytest.approx(dd, abs=1e-5)


def test_window_indices_clamp_inside_each_row():
    k = torch.tensor([[0, 3, 5]])
    idx = window_indices(k, torch.tensor([6]), 2)
    assert idx.tolist() == [[[0, 0, 0, 1, 2], [1, 2, 3, 4, 5], [3, 4, 5, 5, 5]]]


def test_token_spans_share_split_characters_and_durations_add_up():
    chars = [(0.10, 0.20), (0.20, 0.35), (0.35, 0.40), (0.50, 0.70)]  # a pause before the last character
    offsets = [(0, 2), (2, 3), (2, 3), (3, 4)]  # the third character cut into two tokens
    spans = token_spans(offsets, chars)
    flat = [t for span in spans for t in span]
    assert flat == pytest.approx([0.10, 0.35, 0.35, 0.375, 0.375, 0.40, 0.50, 0.70])
    d = wrapped_durations(spans, frame_rate=10.0, frames=9)
    # SOT = 1 frame of leading silence; the pause 0.40-0.50 belongs to the token before it; EOT 2 frames
    assert d == pytest.approx([1.0, 2.5, 0.25, 1.25, 2.0, 2.0])
    assert math.fsum(d) == pytest.approx(9.0)


def aligned_micro() -> GepardConfig:
    return with_aligned_input(micro_config(), window=1, duration_layers=1)


def test_aligned_config_round_trips_and_counts_its_parameters():
    from duet.gepard.config import parameter_breakdown

    cfg = aligned_micro()
    assert GepardConfig.from_dict(cfg.to_dict()) == cfg
    model = GepardModel(cfg)
    assert sum(p.numel() for p in model.parameters()) == parameter_breakdown(cfg)["total"]
    with pytest.raises(ValueError):
        GepardConfig.from_dict({**cfg.to_dict(), "text_dropout_prob": 0.1})


def test_training_loss_includes_the_duration_term():
    torch.manual_seed(0)
    cfg = aligned_micro()
    model = GepardModel(cfg)
    g = torch.Generator().manual_seed(1)
    items = [(wrapped([5, 6, 7]), random_codes(cfg, 8, g)), (wrapped([9, 10]), random_codes(cfg, 5, g))]
    durations = [[1.0, 2.5, 2.0, 1.5, 1.0, 0.0], [0.5, 2.0, 2.0, 0.5, 0.0]]
    out = model(collate(items, pad_id=0, durations=durations))
    assert out["duration"] > 0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    assert model.aligned.tokens.weight.grad.abs().sum() > 0
    assert model.duration.head.weight.grad.abs().sum() > 0
    with pytest.raises(Exception, match="durations"):
        model(collate(items, pad_id=0))


def test_teacher_forced_logits_equal_prefill_and_steps():
    """The training path (whole sequence) and the inference path (prefill + one step per frame, the state keeping
    the position) see the same inputs, so they give the same logits at every audio position."""
    torch.manual_seed(0)
    cfg = aligned_micro()
    model = GepardModel(cfg).eval()
    g = torch.Generator().manual_seed(2)
    text = wrapped([5, 6, 7, 8])
    codes = random_codes(cfg, 7, g)
    durations = torch.tensor([[1.2, 1.5, 0.7, 2.0, 0.9, 0.7, 0.0]])
    batch = collate([(text, codes)], pad_id=0, durations=durations.tolist())
    with torch.no_grad():
        full = model.audio_logits(batch)  # (1, T+1, ...)
        logits, state = model.prefill(GepardPrompt(torch.tensor([text]), durations=durations))
        steps = [logits]
        for t in range(codes.shape[1]):
            out, state = model.step(codes[:, t][None], state)
            steps.append(out)
    got = torch.cat([s.codes for s in steps], dim=1)
    torch.testing.assert_close(got, full.codes, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(torch.cat([s.stop for s in steps], dim=1), full.stop, rtol=1e-4, atol=1e-4)


def test_generation_uses_predicted_durations_and_is_seeded():
    torch.manual_seed(0)
    model = GepardModel(aligned_micro()).eval()
    prompt = GepardPrompt(torch.tensor([wrapped([5, 6, 7])]))
    params = SamplingParams(temperature=0.8, top_k=5, seed=3, max_frames=12)
    a, b = generate(model, prompt, params=params), generate(model, prompt, params=params)
    assert torch.equal(a.codes, b.codes) and a.lengths.tolist() == b.lengths.tolist()
    predicted = model.duration.predict(prompt.text_ids, torch.tensor([6]))
    assert predicted.shape == (1, 6) and predicted[0, -1] == 0 and bool((predicted >= 0).all())
    slower = model.duration.predict(prompt.text_ids, torch.tensor([6]), speed=0.5)
    torch.testing.assert_close(slower, predicted * 2)


def test_duration_loss_and_aligned_input_against_naive_loops():
    """The duration loss is the mean over real tokens of (predicted - log(1 + d))^2; the aligned input of one
    position is the window of its token's embeddings through one linear layer plus the position features."""
    torch.manual_seed(0)
    model = GepardModel(aligned_micro())
    ids = torch.tensor([wrapped([5, 6, 7]), wrapped([9]) + [0, 0]])
    lengths = torch.tensor([6, 4])
    durations = torch.tensor([[1.0, 2.0, 0.5, 3.0, 1.5, 0.0], [2.0, 4.0, 1.0, 0.0, 0.0, 0.0]])
    predicted = model.duration(ids, lengths)
    squares = [(predicted[b, s] - math.log1p(durations[b, s].item())) ** 2
               for b in range(2) for s in range(int(lengths[b]))]
    torch.testing.assert_close(model.duration.loss(ids, lengths, durations), torch.stack(squares).mean())

    text = model.embed_tokens(ids)
    positions = torch.tensor([[0, 3, 7], [0, 2, 9]])
    added = model.aligned(text, lengths, durations, positions)
    w = model.aligned.window
    for b in range(2):
        for n, j in enumerate(positions[b].tolist()):
            k, p, d = naive_frame_token(durations[b].tolist(), int(lengths[b]), j, EOT_BACK)
            window = [text[b, min(max(k + o, 0), int(lengths[b]) - 1)] for o in range(-w, w + 1)]
            feats = torch.tensor([p, 1 - p, math.log1p(d), 4 * p * (1 - p)])
            expected = model.aligned.tokens(torch.cat(window)) + model.aligned.features(feats)
            torch.testing.assert_close(added[b, n], expected, rtol=1e-5, atol=1e-5)
