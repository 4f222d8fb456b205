"""Fitting a pause to its length (``duet.tts.pause_fit``) on synthetic speech whose pause length is known: two
tone bursts ("words") around a quiet stretch of a chosen length, with the layout's gap put off the real one by the
kind of error a model makes. The pause is measured here by its own rule (the run of samples under 1% of the peak
around the middle), and the words must move with the audio."""

from __future__ import annotations

import numpy as np
import pytest

from duet.tts.pause_fit import Edit, fit_pauses, retimed
from duet.tts.timestamps import PhoneTiming, WordTiming

RATE = 22050


def _burst(seconds: float, hz: float) -> np.ndarray:
    t = np.arange(int(round(seconds * RATE))) / RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _speech(pause: float, noise: float = 1e-4) -> np.ndarray:
    """0.5 s word, ``pause`` s of faint noise (-74 dB), 0.5 s word."""
    rng = np.random.default_rng(0)
    quiet = (rng.standard_normal(int(round(pause * RATE))) * noise).astype(np.float32)
    return np.concatenate([_burst(0.5, 200.0), quiet, _burst(0.5, 300.0)])


def _pause_around(audio: np.ndarray, t: float) -> float:
    """Seconds of the run of samples under 1% of the peak that holds time ``t`` (an onset's zero crossings of a
    sine are single samples, so runs of a few samples inside a word do not reach it)."""
    quiet = np.abs(audio) < 0.01 * np.abs(audio).max()
    i = int(t * RATE)
    assert quiet[i]
    a = i
    while a > 0 and quiet[a - 1]:
        a -= 1
    b = i
    while b < len(audio) and quiet[b]:
        b += 1
    return (b - a) / RATE


def _words(pause: float) -> tuple[WordTiming, ...]:
    first = WordTiming("one", 0.0, 0.5, (PhoneTiming("w", 0.0, 0.2), PhoneTiming("n", 0.2, 0.5)))
    second = WordTiming("two", 0.5 + pause, 1.0 + pause, (PhoneTiming("t", 0.5 + pause, 1.0 + pause),))
    return first, second


@pytest.mark.parametrize("made, wanted", [(0.42, 0.3), (0.2, 1.0), (1.3, 1.0), (0.3, 0.3)])
@pytest.mark.parametrize("layout_error", [-0.08, 0.0, 0.1])
def test_the_quiet_stretch_becomes_the_break_and_later_words_move_with_it(made, wanted, layout_error):
    audio = _speech(made)
    gap = (0.5 + layout_error, 0.5 + layout_error + wanted)  # where the layout put the pause: off by its error
    fitted, fits = fit_pauses(audio, RATE, [(*gap, wanted)])
    # the quiet run is found in 10 ms energy frames: its edges up to a frame inside the real ones
    assert len(fitted) - len(audio) == pytest.approx((wanted - made) * RATE, abs=0.021 * RATE)
    assert _pause_around(fitted, 0.5 + wanted / 2) == pytest.approx(wanted, abs=0.021)
    assert fits[0].found == pytest.approx(made, abs=0.021)
    words = retimed(_words(made), fits, len(fitted) / RATE)
    assert words[0] == _words(made)[0]  # before the pause: untouched
    # the second word moved with its samples: by exactly what the audio grew or shrank
    assert words[1].start - (0.5 + made) == pytest.approx((len(fitted) - len(audio)) / RATE, abs=1e-9)
    assert words[1].end == pytest.approx(len(fitted) / RATE, abs=1.0 / RATE)
    assert fitted[int(words[1].start * RATE) + 50: int(words[1].start * RATE) + 200].std() > 0.1  # still on it


def test_no_quiet_stretch_splices_the_break_at_the_layouts_boundary():
    audio = np.concatenate([_burst(0.5, 200.0), _burst(0.5, 300.0)])  # the words run together
    fitted, fits = fit_pauses(audio, RATE, [(0.49, 0.51, 0.3)])
    assert fits[0].found == 0.0
    assert len(fitted) == len(audio) + round(0.3 * RATE)
    assert _pause_around(fitted, 0.65) == pytest.approx(0.3, abs=0.005)  # spliced: only the fades blur it
    assert 0.48 <= fits[0].edit.at <= 0.52


def test_two_breaks_in_one_piece_are_fitted_each():
    rng = np.random.default_rng(1)
    audio = np.concatenate([_burst(0.4, 200.0), (rng.standard_normal(int(0.5 * RATE)) * 1e-4).astype(np.float32),
                            _burst(0.4, 250.0), np.zeros(int(0.2 * RATE), np.float32), _burst(0.4, 300.0)])
    gaps = [(0.4, 0.9, 0.3), (1.3, 1.5, 1.0)]
    fitted, fits = fit_pauses(audio, RATE, gaps)
    assert _pause_around(fitted, 0.55) == pytest.approx(0.3, abs=0.021)
    assert _pause_around(fitted, 0.4 + 0.3 + 0.4 + 0.5) == pytest.approx(1.0, abs=0.021)
    words = (WordTiming("a", 0.0, 0.4), WordTiming("b", 0.9, 1.3), WordTiming("c", 1.5, 1.9))
    moved = retimed(words, fits, len(fitted) / RATE)
    assert [w.start for w in moved] == pytest.approx([0.0, 0.7, 2.1], abs=0.042)  # two fits before the last
    assert moved[2].end == pytest.approx(len(fitted) / RATE, abs=1e-9)
    times = [t for w in moved for t in (w.start, w.end)]
    assert times == sorted(times) and times[-1] <= len(fitted) / RATE


def test_an_edit_moves_times_monotonically():
    for edit in (Edit(1.0, 0.5), Edit(1.0, -0.3)):
        times = np.linspace(0.0, 3.0, 301)
        moved = [edit.moved(float(t)) for t in times]
        assert moved == sorted(moved)
        assert edit.moved(0.5) == 0.5 and edit.moved(2.0) == pytest.approx(2.0 + edit.seconds)
