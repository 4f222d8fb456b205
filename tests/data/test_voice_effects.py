"""The timbre shift that makes another speaker of a voice: length kept, pitch and spectral envelope where asked."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from scipy.signal import lfilter

from duet.data.voice_effects import timbre_shift

pytestmark = pytest.mark.skipif(shutil.which("sox") is None, reason="needs sox")
SR = 16000


def _f0_hz(x: np.ndarray, lo: float = 60.0, hi: float = 500.0) -> float:
    """Pitch by autocorrelation: the shortest lag between 1 / hi and 1 / lo seconds whose peak is within 10% of
    the strongest (multiples of the period peak as high)."""
    x = x - x.mean()
    ac = np.correlate(x, x, mode="full")[len(x) - 1:]
    lags = np.arange(int(SR / hi), int(SR / lo))
    strong = ac[lags] >= 0.9 * ac[lags].max()
    first = int(np.argmax(strong))
    while first + 1 < len(lags) and strong[first + 1] and ac[lags[first + 1]] > ac[lags[first]]:
        first += 1  # climb to the top of that peak
    return SR / float(lags[first])


def _centroid_hz(x: np.ndarray, lo: float = 300.0, hi: float = 3000.0) -> float:
    """Power-weighted mean frequency over [lo, hi]: where a one-resonance spectrum's energy sits."""
    power = np.abs(np.fft.rfft(x * np.hanning(len(x)))) ** 2
    freqs = np.fft.rfftfreq(len(x), 1 / SR)
    band = (freqs >= lo) & (freqs <= hi)
    return float(np.sum(freqs[band] * power[band]) / np.sum(power[band]))


def _resonant_pulses(f0: float, resonance: float, seconds: float = 1.0) -> np.ndarray:
    """A pulse train at ``f0`` through one two-pole resonator at ``resonance`` Hz (a one-formant vowel)."""
    n = int(SR * seconds)
    pulses = np.zeros(n)
    pulses[:: int(SR / f0)] = 1.0
    r, theta = 0.97, 2 * np.pi * resonance / SR
    y = lfilter([1.0], [1.0, -2 * r * np.cos(theta), r * r], pulses)
    return (0.3 * y / np.max(np.abs(y))).astype(np.float32)


def test_identity_returns_the_audio_itself():
    x = np.random.default_rng(0).standard_normal(SR).astype(np.float32)
    assert timbre_shift(x, SR, 1.0, 0.0) is x


@pytest.mark.parametrize("formant, semitones", [(1.15, 0.0), (0.87, 0.0), (1.0, 12.0), (1.2, 5.0)])
def test_length_is_kept(formant, semitones):
    x = _resonant_pulses(120, 900, 1.37)
    assert timbre_shift(x, SR, formant, semitones).shape == x.shape


@pytest.mark.parametrize("formant", [0.85, 1.2])
def test_the_formant_scale_moves_the_envelope_and_keeps_the_pitch(formant):
    x = _resonant_pulses(100, 1000)
    y = timbre_shift(x, SR, formant, 0.0)
    mid = slice(SR // 4, 3 * SR // 4)  # away from the edges the trim touches
    # the same vowel made directly with the resonance moved: its energy sits where the shifted one's does
    assert _centroid_hz(y[mid]) == pytest.approx(_centroid_hz(_resonant_pulses(100, 1000 * formant)[mid]), rel=0.05)
    assert _centroid_hz(y[mid]) != pytest.approx(_centroid_hz(x[mid]), rel=0.05)
    assert _f0_hz(y[mid]) == pytest.approx(100, rel=0.03)


@pytest.mark.parametrize("formant, semitones", [(1.0, 5.0), (1.0, -5.0), (1.15, 4.0), (0.9, -3.0)])
def test_semitones_move_the_pitch_and_the_envelope_follows_the_formant_scale_alone(formant, semitones):
    x = _resonant_pulses(110, 900)
    y = timbre_shift(x, SR, formant, semitones)
    mid = slice(SR // 4, 3 * SR // 4)
    f0 = 110 * 2 ** (semitones / 12)
    assert _f0_hz(y[mid]) == pytest.approx(f0, rel=0.03)
    assert _centroid_hz(y[mid]) == pytest.approx(_centroid_hz(_resonant_pulses(f0, 900 * formant)[mid]), rel=0.08)
