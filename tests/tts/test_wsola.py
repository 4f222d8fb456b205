"""WSOLA time stretch (``duet.tts.wsola``): exact length, the same output in any chunking, pitch kept, and a time t
of the input found at t * factor of the output (a tone burst's edges, measured by its envelope)."""

from __future__ import annotations

import numpy as np
import pytest

from duet.tts.wsola import Wsola, stretch

RATE = 22050


def _tone(seconds: float, hz: float = 220.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.5 * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _peak_hz(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio * np.hanning(len(audio))))
    return float(np.fft.rfftfreq(len(audio), 1 / RATE)[np.argmax(spectrum)])


@pytest.mark.parametrize("factor", [0.5, 0.8, 1.0, 1.5, 2.0])
def test_the_output_is_factor_times_as_long_at_the_same_pitch(factor):
    x = _tone(1.0)
    y = stretch(x, factor, RATE)
    assert len(y) == round(len(x) * factor)
    middle = y[len(y) // 4: 3 * len(y) // 4]
    assert _peak_hz(middle) == pytest.approx(220.0, abs=2.0)
    assert np.sqrt(np.mean(middle ** 2)) == pytest.approx(0.5 / np.sqrt(2), rel=0.02)  # no dips at the seams


@pytest.mark.parametrize("chunk", [1, 333, 1024, 5000])
def test_a_stream_in_any_chunks_is_the_one_go_output(chunk):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(RATE) * 0.1).astype(np.float32)
    whole = stretch(x, 1.7, RATE)
    w = Wsola(1.7, RATE)
    parts = [w.push(x[i:i + chunk]) for i in range(0, len(x), chunk)] + [w.flush()]
    assert np.array_equal(np.concatenate(parts), whole)


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_a_moment_of_the_input_lies_at_factor_times_it_in_the_output(factor):
    x = np.zeros(RATE * 2, np.float32)
    x[int(0.6 * RATE):int(1.1 * RATE)] = _tone(0.5)  # a burst from 0.6 s to 1.1 s
    y = stretch(x, factor, RATE)
    loud = np.flatnonzero(np.abs(y) > 0.05) / RATE
    assert loud[0] == pytest.approx(0.6 * factor, abs=0.03)
    assert loud[-1] == pytest.approx(1.1 * factor, abs=0.03)


def test_empty_input_and_a_bad_factor():
    assert len(stretch(np.zeros(0, np.float32), 0.5, RATE)) == 0
    with pytest.raises(ValueError):
        Wsola(0.0, RATE)
