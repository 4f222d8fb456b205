"""Non-verbal sounds synthesised here: breath, sigh, cough and laughter, deterministic from a seed.

No recorded sounds are used: the only Debian sound package on these machines, ``alsa-utils``' /usr/share/sounds/alsa,
holds channel tests ("front left") and a white-noise file, nothing vocal. So each event is made from filtered noise
and a glottal pulse train with envelopes, in the way a formant synthesiser would:

- breath (an inhalation): 0.35-0.55 s of noise band-passed to 400-3000 Hz, swelling and fading (raised cosine);
- sigh (an exhalation): 0.7-1.0 s of noise through the formants of a lax /a/, with a faint breathy voice falling
  from ~210 to ~120 Hz, fast onset, long decay;
- cough: one or two bursts of 0.16-0.24 s, each an abrupt (8 ms) onset of low-passed noise through /ə/ formants
  with a short voiced start, decaying exponentially (60 ms);
- laughter: 3-5 "ha" pulses about 0.2 s apart, each a 40 ms aspiration then 90-130 ms of voice through /a/
  formants (F1 800, F2 1200, F3 2500 Hz) at ~200-270 Hz, pitch and loudness falling from pulse to pulse.

Every random choice (durations, pitch, noise) comes from ``numpy.random.default_rng((seed, event))``, so a seed
gives the same samples in any process. Sounds are returned at unit RMS; the splicer sets their level relative to
the utterance's speech (:data:`RELATIVE_DB`).

Shape legend: S samples.
"""

from __future__ import annotations

import zlib

import numpy as np
from scipy.signal import butter, lfilter, sosfilt

from duet.errors import DuetError

SOUNDS: tuple[str, ...] = ("breath", "cough", "laughter", "sigh")
# Level of each event against the speech it is spliced into, in dB of RMS (breaths are quiet, coughs are not).
RELATIVE_DB: dict[str, float] = {"breath": -14.0, "sigh": -10.0, "cough": -3.0, "laughter": -4.0}

_A = ((800.0, 90.0), (1200.0, 110.0), (2500.0, 160.0))  # (formant Hz, bandwidth Hz) of /a/
_SCHWA = ((500.0, 90.0), (1500.0, 120.0), (2500.0, 160.0))


def _band_noise(rng: np.random.Generator, n: int, sr: int, lo: float, hi: float) -> np.ndarray:
    sos = butter(4, [lo, min(hi, 0.45 * sr)], btype="bandpass", fs=sr, output="sos")
    return sosfilt(sos, rng.standard_normal(n))


def _lowpass_noise(rng: np.random.Generator, n: int, sr: int, hi: float) -> np.ndarray:
    sos = butter(4, min(hi, 0.45 * sr), btype="lowpass", fs=sr, output="sos")
    return sosfilt(sos, rng.standard_normal(n))


def _resonate(x: np.ndarray, sr: int, formants: tuple[tuple[float, float], ...]) -> np.ndarray:
    """A cascade of second-order resonators (Klatt): each formant (Hz, bandwidth Hz) with unit gain at 0 Hz."""
    for f, bw in formants:
        r = np.exp(-np.pi * bw / sr)
        b1, b2 = 2 * r * np.cos(2 * np.pi * f / sr), -r * r
        x = lfilter([1.0 - b1 - b2], [1.0, -b1, -b2], x)
    return x


def _voice(f0: np.ndarray, sr: int) -> np.ndarray:
    """(S,) f0 in Hz -> (S,) glottal source: one impulse per period, smoothed by a two-pole glottal low-pass."""
    phase = np.cumsum(f0 / sr)
    pulses = np.diff(np.floor(phase), prepend=0.0)
    return lfilter([1.0], [1.0, -2 * 0.97, 0.97**2], pulses)


def _hann_env(n: int, peak: float = 0.5) -> np.ndarray:
    """(S,) a rise-fall envelope with its maximum at ``peak`` (a fraction of the length)."""
    t = np.linspace(0.0, 1.0, n)
    rise = np.clip(t / peak, 0, 1)
    fall = np.clip((1 - t) / (1 - peak), 0, 1)
    return np.where(t < peak, 0.5 - 0.5 * np.cos(np.pi * rise), 0.5 - 0.5 * np.cos(np.pi * fall))


def _breath(rng: np.random.Generator, sr: int) -> np.ndarray:
    n = int(rng.uniform(0.35, 0.55) * sr)
    return _band_noise(rng, n, sr, 400.0, 3000.0) * _hann_env(n, rng.uniform(0.5, 0.7))


def _sigh(rng: np.random.Generator, sr: int) -> np.ndarray:
    n = int(rng.uniform(0.7, 1.0) * sr)
    t = np.arange(n) / sr
    noise = _resonate(_lowpass_noise(rng, n, sr, 4000.0), sr, _A)
    f0 = np.linspace(rng.uniform(190, 230), rng.uniform(110, 130), n)
    voice = _resonate(_voice(f0, sr), sr, _A)
    mix = noise / max(np.std(noise), 1e-9) + 0.35 * voice / max(np.std(voice), 1e-9)
    env = np.minimum(t / 0.08, 1.0) * np.exp(-2.5 * t / t[-1])
    return mix * env


def _cough(rng: np.random.Generator, sr: int) -> np.ndarray:
    parts = []
    for k in range(int(rng.integers(1, 3))):
        n = int(rng.uniform(0.16, 0.24) * sr)
        t = np.arange(n) / sr
        noise = _resonate(_lowpass_noise(rng, n, sr, 3500.0), sr, _SCHWA)
        voice = _resonate(_voice(np.full(n, rng.uniform(130, 170)), sr), sr, _SCHWA)
        voiced = np.clip(1 - t / 0.06, 0, 1)
        burst = noise / max(np.std(noise), 1e-9) + 0.8 * voiced * voice / max(np.std(voice), 1e-9)
        env = np.minimum(t / 0.008, 1.0) * np.exp(-t / 0.06) * (0.8**k)
        parts += [burst * env, np.zeros(int(rng.uniform(0.12, 0.2) * sr))]
    return np.concatenate(parts[:-1])


def _laughter(rng: np.random.Generator, sr: int) -> np.ndarray:
    pulses = int(rng.integers(3, 6))
    f0_start = rng.uniform(200, 270)
    parts = []
    for k in range(pulses):
        h = int(0.04 * sr)
        v = int(rng.uniform(0.09, 0.13) * sr)
        aspiration = _band_noise(rng, h, sr, 1000.0, 4000.0)
        aspiration *= 0.3 / max(np.std(aspiration), 1e-9) * _hann_env(h, 0.8)
        f0 = np.linspace(1.0, 0.92, v) * f0_start * 0.95**k
        voice = _resonate(_voice(f0, sr), sr, _A)
        voice *= _hann_env(v, 0.3) / max(np.std(voice), 1e-9)
        gap = np.zeros(int(rng.uniform(0.04, 0.08) * sr))
        parts += [(0.85**k) * np.concatenate([aspiration, voice]), gap]
    return np.concatenate(parts[:-1])


_MAKERS = {"breath": _breath, "cough": _cough, "laughter": _laughter, "sigh": _sigh}


def event_sound(name: str, sample_rate: int, seed: int = 0) -> np.ndarray:
    """(S,) float32 samples of one ``name`` event at ``sample_rate``, unit RMS, silent at both ends."""
    if name not in _MAKERS:
        raise DuetError(f"no sound for the event {name!r}; this corpus synthesises {', '.join(SOUNDS)}")
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    x = _MAKERS[name](rng, sample_rate)
    fade = min(len(x) // 4, int(0.005 * sample_rate))
    if fade:
        ramp = np.linspace(0.0, 1.0, fade)
        x[:fade] *= ramp
        x[-fade:] *= ramp[::-1]
    rms = float(np.sqrt(np.mean(x**2)))
    return (x / max(rms, 1e-12)).astype(np.float32)
