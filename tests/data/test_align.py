"""The forced aligner behind Luna's duration targets (duet.data.align): the monotonic search against brute force,
EM recovering planted durations, the alignment file's tokenizer check, and ``duet data align`` on the tiny corpus."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from duet.data.align import (
    AlignerConfig,
    AlignItem,
    fit_alignments,
    log_likelihoods,
    monotonic_alignment,
    read_alignments,
    write_alignments,
)
from duet.errors import DuetError


def _brute_force(log_lik: np.ndarray) -> tuple[float, np.ndarray]:
    """Every split of T frames into S non-empty runs, scored; the best (score, durations)."""
    S, T = log_lik.shape
    best = (-np.inf, None)
    for cuts in itertools.combinations(range(1, T), S - 1):
        bounds = (0, *cuts, T)
        d = np.diff(bounds)
        score = sum(log_lik[s, bounds[s]:bounds[s + 1]].sum() for s in range(S))
        if score > best[0] + 1e-9:
            best = (score, d)
    return best


@pytest.mark.parametrize("S, T, seed", [(1, 4, 0), (2, 2, 1), (3, 7, 2), (4, 9, 3), (5, 10, 4), (4, 12, 5)])
def test_monotonic_alignment_finds_the_best_path(S, T, seed):
    log_lik = np.random.default_rng(seed).normal(size=(S, T))
    durations = monotonic_alignment(log_lik)
    score, expected = _brute_force(log_lik)
    assert durations.sum() == T and durations.min() >= 1
    bounds = np.concatenate(([0], np.cumsum(durations)))
    assert sum(log_lik[s, bounds[s]:bounds[s + 1]].sum() for s in range(S)) == pytest.approx(score)
    np.testing.assert_array_equal(durations, expected)


def test_monotonic_alignment_needs_a_frame_per_token():
    with pytest.raises(DuetError, match="cannot give each of 3 tokens"):
        monotonic_alignment(np.zeros((3, 2)))


def test_log_likelihoods_match_the_gaussian_formula():
    rng = np.random.default_rng(0)
    feats, means, inv_var = rng.normal(size=(6, 3)), rng.normal(size=(4, 3)), rng.uniform(0.5, 2.0, size=3)
    expected = np.array([[-0.5 * ((feats[t] - means[s]) ** 2 * inv_var).sum() for t in range(6)] for s in range(4)])
    np.testing.assert_allclose(log_likelihoods(feats, means, inv_var), expected, atol=1e-10)


def test_em_recovers_planted_durations_from_a_flat_start():
    """Token types with distinct mean features, random true durations: EM from an even spread finds them (a
    token type next to itself could split its run either way, so neighbours differ here)."""
    rng = np.random.default_rng(0)
    vocab, D = 6, 4
    centres = rng.normal(scale=3.0, size=(vocab, D))
    utts, truth = [], {}
    for i in range(40):
        ids = np.cumsum(rng.integers(1, vocab, size=5)) % vocab  # neighbours differ: no ambiguous runs
        true = rng.integers(1, 8, size=5)
        feats = centres[np.repeat(ids, true)] + rng.normal(scale=0.5, size=(true.sum(), D))
        even = np.diff(np.round(np.linspace(0, true.sum(), 6)).astype(int))
        utts.append(AlignItem(f"u{i}", ids, feats.astype(np.float32), even))
        truth[f"u{i}"] = true
    result = fit_alignments(utts, vocab, AlignerConfig(iterations=5))
    exact = sum(np.array_equal(result.durations[k], truth[k]) for k in truth)
    assert exact >= 38  # of 40
    assert result.log_lik[-1] > result.log_lik[0] and result.fallback == ()
    before = np.mean([np.abs(u.init - truth[u.id]).mean() for u in utts])
    after = np.mean([np.abs(result.durations[k] - truth[k]).mean() for k in truth])
    assert after < before / 5


def test_too_short_utterances_keep_their_starting_durations():
    utts = [AlignItem("long", np.array([0, 1]), np.zeros((4, 2), np.float32), np.array([2, 2])),
            AlignItem("short", np.array([0, 1, 2]), np.zeros((2, 2), np.float32), np.array([0, 2, 0]))]
    result = fit_alignments(utts, 3, AlignerConfig(iterations=2))
    assert result.fallback == ("short",)
    np.testing.assert_array_equal(result.durations["short"], [0, 2, 0])


def test_the_alignment_file_round_trips_and_checks_its_tokenizer(tmp_path):
    tok, other = tmp_path / "tokenizer.json", tmp_path / "other.json"
    tok.write_text('{"a": 1}')
    other.write_text('{"a": 2}')
    path = write_alignments(tmp_path / "a.jsonl", {"x": np.array([1, 3, 1]), "y": np.array([2, 2])}, tok)
    assert read_alignments(path, tok) == {"x": (1, 3, 1), "y": (2, 2)}
    with pytest.raises(DuetError, match="another tokenizer"):
        read_alignments(path, other)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"format": "x"}) + "\n")
    with pytest.raises(DuetError, match="not a duet alignment file"):
        read_alignments(tmp_path / "bad.jsonl", tok)


def test_frame_features_give_one_centred_log_mel_per_code_frame():
    from duet.data.align_corpus import _feature_rate, frame_features

    audio = np.random.default_rng(0).normal(scale=0.1, size=24_000 - 500).astype(np.float32)  # a partial last frame
    feats = frame_features(audio, 24_000, 25.0, 25, AlignerConfig(n_mels=20))
    assert feats.shape == (25, 20) and feats.dtype == np.float32
    np.testing.assert_allclose(feats.mean(0), 0.0, atol=1e-4)  # minus the utterance's mean
    assert _feature_rate(25.0) == 24_000 and _feature_rate(22_050 / 1024) == 22_050  # duet-rvq's, duet-fsq's frames
    with pytest.raises(DuetError, match="not a whole number of samples"):
        frame_features(audio, 24_000, 21.0, 25)
