"""The trained reference aligner (``duet.eval.trained_aligner``) on a synthetic voice whose timing is exact: each
letter a tone of its own, a space a faint hiss, a pause silence. Trained at one set of rates, it finds the
boundaries of held-out utterances spoken slower than any it heard."""

from __future__ import annotations

import numpy as np
import pytest

from duet.data.align import AlignerConfig
from duet.eval import trained_aligner as ta
from duet.eval.timestamps import phone_units

SAMPLE_RATE = 16000
FRAME_RATE = 62.5  # 256 samples
TONES = {"a": 300.0, "i": 2500.0, "m": 700.0, "s": 5000.0, "t": 1200.0, "u": 1800.0}
CONFIG = ta.TrainedAlignerConfig(subdivide=2, context=0.04, hidden=64, epochs=6,
                                 features=AlignerConfig(n_mels=24, n_fft=512))


def _voice(surface: str, rate: float, rng: np.random.Generator) -> ta.TimedAudio:
    """``surface`` spoken by the synthetic voice, each character lasting 50-110 ms times ``rate`` (spaces 30 ms, a
    pause 150 ms), after 100 ms of silence and before 100 ms more."""
    parts, times, now = [np.zeros(int(0.1 * SAMPLE_RATE), np.float32)], [], 0.1
    for ch in surface:
        seconds = rate * (0.03 if ch == " " else 0.15 if ch in ",." else rng.uniform(0.05, 0.11))
        n = int(round(seconds * SAMPLE_RATE))
        t = np.arange(n) / SAMPLE_RATE
        if ch in TONES:
            x = 0.5 * np.sin(2 * np.pi * TONES[ch] * t)
        elif ch == " ":
            x = 0.01 * rng.standard_normal(n)
        else:
            x = np.zeros(n)
        parts.append(x.astype(np.float32))
        times.append((now, now + n / SAMPLE_RATE))
        now += n / SAMPLE_RATE
    parts.append(np.zeros(int(0.1 * SAMPLE_RATE), np.float32))
    return ta.TimedAudio(surface, np.concatenate(parts), SAMPLE_RATE, tuple(times))


def _surface(rng: np.random.Generator) -> str:
    """Three to five words of two to four letters (no letter twice in a row: one tone), a comma after the second."""
    letters = sorted(TONES)
    words = []
    for _ in range(rng.integers(3, 6)):
        word = [rng.choice(letters)]
        while len(word) < rng.integers(2, 5):
            word.append(rng.choice([x for x in letters if x != word[-1]]))
        words.append("".join(word))
    return " ".join(words[:2]) + ", " + " ".join(words[2:]) + "."


@pytest.fixture(scope="module")
def aligner():
    rng = np.random.default_rng(0)
    return ta.train_aligner([_voice(_surface(rng), rng.uniform(0.7, 1.5), rng) for _ in range(40)], FRAME_RATE,
                            CONFIG)


def test_unit_frames_are_the_timing_in_frames():
    surface = "ab, c"  # units a, b, ", ", c
    times = [(0.10, 0.20), (0.20, 0.34), (0.34, 0.40), (0.40, 0.52), (0.52, 0.60)]
    assert phone_units(surface) == [(0, 1), (1, 2), (2, 4), (4, 5)]
    frames = ta.unit_frames(surface, times, 70, 100.0)  # [silence, a, b, ", ", c, silence]
    np.testing.assert_array_equal(frames, [10, 10, 14, 18, 8, 10])
    assert frames.sum() == 70


def test_stacked_frames_carry_their_neighbours():
    feats = np.arange(12, dtype=np.float32).reshape(4, 3)  # (T, D)
    out = ta.stacked(feats, 1)  # (T, 3 D)
    np.testing.assert_array_equal(out[0], np.concatenate([feats[0], feats[0], feats[1]]))  # the edge repeated
    np.testing.assert_array_equal(out[2], np.concatenate([feats[1], feats[2], feats[3]]))


def test_it_finds_the_boundaries_of_slower_speech_than_it_learnt(aligner):
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(6):
        ex = _voice(_surface(rng), 2.0, rng)  # slower than any training utterance
        found = aligner.unit_durations(ex.surface, ex.audio, ex.sample_rate)
        true = ta.unit_frames(ex.surface, ex.times, int(found.sum()), aligner.rate)
        assert len(found) == len(phone_units(ex.surface)) + 2
        errors += list(np.abs(np.cumsum(found) - np.cumsum(true))[:-2])  # the final pause and silence: one sound
    assert np.median(errors) <= 1 and np.percentile(errors, 95) <= 2  # aligner frames of 8 ms


def test_a_saved_aligner_aligns_as_before(aligner, tmp_path):
    ex = _voice(_surface(np.random.default_rng(2)), 1.0, np.random.default_rng(3))
    loaded = ta.TrainedAligner.load(aligner.save(tmp_path / "a.pt"))
    assert loaded.types == aligner.types and loaded.config == aligner.config and loaded.rate == aligner.rate
    np.testing.assert_array_equal(loaded.unit_durations(ex.surface, ex.audio, ex.sample_rate),
                                  aligner.unit_durations(ex.surface, ex.audio, ex.sample_rate))


def test_an_unknown_letter_aligns_with_no_preference(aligner):
    ex = _voice("ama ta.", 1.0, np.random.default_rng(4))
    durations = aligner.unit_durations("ama xa.", ex.audio, ex.sample_rate)  # x: never trained on
    assert durations.sum() >= len(durations) and (durations >= 1).all()


def test_the_voice_aligner_is_trained_once_then_loaded(tmp_path, monkeypatch):
    calls = []

    def examples(tokenizer, config):
        calls.append(config)
        rng = np.random.default_rng(5)
        return [_voice(_surface(rng), 1.0, rng) for _ in range(4)]

    class Backend:
        def to_str(self):
            return "tokenizer"

    class Tokenizer:
        backend_tokenizer = Backend()

    monkeypatch.setattr(ta, "piper_examples", examples)
    config = ta.TrainedAlignerConfig(subdivide=2, hidden=8, epochs=1, features=AlignerConfig(n_mels=24, n_fft=512))
    first = ta.joe_aligner(Tokenizer(), FRAME_RATE, config, cache=tmp_path)
    second = ta.joe_aligner(Tokenizer(), FRAME_RATE, config, cache=tmp_path)
    assert len(calls) == 1 and second.types == first.types and len(list(tmp_path.iterdir())) == 1
