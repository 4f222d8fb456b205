"""What a speaking style does to a voice's audio after synthesis: pitch shift, whisper, spectral tilt, gain; and
the timbre shift that makes another speaker of a voice (formants and pitch).

Every effect keeps the number of samples, so a timing sidecar written for the audio stays valid. Pitch goes
through sox ``pitch`` (as the Festival variants already do: WSOLA, then resampling; length kept, formants
move with the pitch). Whisper
is a linear-prediction vocoder: each 25 ms frame's spectral envelope (LPC of order 2 + kHz, on pre-emphasised
audio) filters white noise instead of the voice's own excitation, scaled to the frame's energy and overlap-added
with a Hann window; the words keep their formants and timing and lose their pitch. Tilt is a first-order shelf,
loudness kept. The noise is drawn from a seed, so a style's audio is reproducible. A timbre shift is pitch
through sox and a cepstral envelope warp (`warp_envelope`), which moves the formants without the pitch.

Shape legend: S samples, N samples per frame, P prediction order, F frequency bins.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy.linalg import solve_toeplitz
from scipy.signal import istft, lfilter, stft

from duet.data.sources.base import run_tool
from duet.data.styles import Style
from duet.errors import DuetError

PEAK = 0.99  # louder styles are scaled down to this peak rather than clipped
_PRE_EMPHASIS = 0.9


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def pitch_shift(audio: np.ndarray, sample_rate: int, semitones: float) -> np.ndarray:
    """(S,) -> (S,) shifted by ``semitones`` with sox ``pitch`` (length kept; trimmed or padded to S exactly)."""
    if not semitones:
        return audio
    return _sox(audio, sample_rate, ["pitch", f"{100 * semitones:.0f}"])


def timbre_shift(audio: np.ndarray, sample_rate: int, formant: float, semitones: float = 0.0) -> np.ndarray:
    """(S,) -> (S,) with the spectral envelope scaled by ``formant`` (> 1: a shorter vocal tract) and the pitch
    moved by ``semitones``, length kept: vocal-tract-length perturbation, which makes another speaker's timbre of
    one recording.

    sox ``pitch`` (WSOLA, then resampling) scales pitch and formants together by r = 2^(semitones / 12); the
    envelope is then warped by ``formant`` / r (:func:`warp_envelope`), so formants end at x ``formant``. Time is
    untouched, so a timing sidecar stays valid."""
    if formant == 1.0 and not semitones:
        return audio
    return warp_envelope(pitch_shift(audio, sample_rate, semitones), sample_rate, formant / 2 ** (semitones / 12))


def warp_envelope(audio: np.ndarray, sample_rate: int, factor: float) -> np.ndarray:
    """(S,) -> (S,) with each frame's spectral envelope stretched along frequency by ``factor`` (a resonance at f
    moves to f x ``factor``), the fine structure (harmonics: the pitch) and the phases kept.

    Per STFT frame (~46 ms, hop 1/4): the log-magnitude envelope is the cepstrum liftered below 2 ms (under any
    pitch period up to 500 Hz), E(f); the frame is multiplied by exp(E(f / factor) - E(f)) and resynthesised by
    overlap-add."""
    if factor == 1.0:
        return audio
    n_fft = 1 << int(round(np.log2(0.046 * sample_rate)))
    hop = n_fft // 4
    x = np.asarray(audio, dtype=np.float64)
    _, _, z = stft(x, nperseg=n_fft, noverlap=n_fft - hop, window="hann", boundary="even", padded=True)
    log_mag = np.log(np.abs(z) + 1e-8)  # (F, frames)
    cepstrum = np.fft.irfft(log_mag, n=n_fft, axis=0)  # (n_fft, frames)
    cut = max(2, int(0.002 * sample_rate))
    cepstrum[cut:n_fft - cut + 1] = 0.0
    envelope = np.fft.rfft(cepstrum, axis=0).real  # (F, frames) log envelope
    source = np.clip(np.arange(envelope.shape[0]) / factor, 0, envelope.shape[0] - 1)  # (F,) bin read for each bin
    lower = np.minimum(source.astype(int), envelope.shape[0] - 2)
    weight = (source - lower)[:, None]
    warped = (1 - weight) * envelope[lower] + weight * envelope[lower + 1]  # (F, frames) linear interpolation
    _, y = istft(z * np.exp(warped - envelope), nperseg=n_fft, noverlap=n_fft - hop, window="hann",
                 boundary=True)
    out = np.zeros(len(x), dtype=np.float32)
    n = min(len(out), len(y))
    out[:n] = y[:n]
    peak = float(np.max(np.abs(out))) if out.size else 0.0
    return out * np.float32(PEAK / peak) if peak > PEAK else out


def _sox(audio: np.ndarray, sample_rate: int, effects: list[str]) -> np.ndarray:
    """(S,) through sox ``effects`` -> (S,): trimmed or zero-padded to the input's length."""
    with tempfile.TemporaryDirectory(prefix="duet-sox-") as tmp:
        src, dst = Path(tmp) / "in.wav", Path(tmp) / "out.wav"
        sf.write(str(src), audio, sample_rate, subtype="FLOAT")
        err = run_tool(["sox", str(src), str(dst), *effects], timeout=60)
        if err:
            raise DuetError(err)
        shifted, _ = sf.read(str(dst), dtype="float32")
    out = np.zeros_like(audio)
    n = min(len(out), len(shifted))
    out[:n] = shifted[:n]
    return out


def whisper(audio: np.ndarray, sample_rate: int, seed: int = 0) -> np.ndarray:
    """(S,) -> (S,): the same spectral envelope and energy per 25 ms frame, excited by white noise."""
    x = lfilter([1.0, -_PRE_EMPHASIS], [1.0], audio.astype(np.float64))
    n = int(0.025 * sample_rate) // 2 * 2
    hop = n // 2
    order = 2 + sample_rate // 1000
    window = np.hanning(n + 1)[:n]  # periodic Hann: halves overlap-add to one
    frames = max(1, int(np.ceil(len(x) / hop)) + 1)
    padded = np.zeros((frames + 1) * hop + n)
    padded[hop : hop + len(x)] = x
    out = np.zeros_like(padded)
    rng = np.random.default_rng(seed)
    for k in range(frames):
        frame = padded[k * hop : k * hop + n] * window  # (N,)
        energy = _rms(frame)
        if energy < 1e-6:
            continue
        r = np.correlate(frame, frame, "full")[n - 1 : n + order]  # (P + 1,) autocorrelation at lags 0..P
        r[0] *= 1.0 + 1e-6  # a little white-noise correction keeps the system well conditioned
        try:
            a = solve_toeplitz(r[:-1], r[1:])  # (P,) predictor coefficients
        except np.linalg.LinAlgError:
            continue
        noise = rng.standard_normal(n + 4 * order)
        shaped = lfilter([1.0], np.concatenate(([1.0], -a)), noise)[4 * order :] * window  # (N,)
        scale = energy / max(_rms(shaped), 1e-12)
        out[k * hop : k * hop + n] += shaped * scale
    y = lfilter([1.0], [1.0, -_PRE_EMPHASIS], out[hop : hop + len(x)])
    return y.astype(np.float32)


def tilt(audio: np.ndarray, amount: float) -> np.ndarray:
    """(S,) -> (S,) with a first-order spectral tilt, loudness (RMS) kept: ``amount`` > 0 differentiates a little
    (brighter), < 0 smooths a little (darker)."""
    if not amount:
        return audio
    x = audio.astype(np.float64)
    c = 0.9 * abs(amount)
    y = lfilter([1.0, -c], [1.0], x) if amount > 0 else lfilter([1.0 - c], [1.0, -c], x)
    return (y * (_rms(x) / max(_rms(y), 1e-12))).astype(np.float32)


def gain(audio: np.ndarray, db: float) -> np.ndarray:
    """(S,) -> (S,) louder by ``db``, then scaled down as a whole if its peak would pass :data:`PEAK`."""
    y = audio.astype(np.float32) * np.float32(10 ** (db / 20))
    peak = float(np.max(np.abs(y))) if y.size else 0.0
    return y * np.float32(PEAK / peak) if peak > PEAK else y


def apply_style(audio: np.ndarray, sample_rate: int, style: Style, *, shift_pitch: bool, seed: int = 0,
                ) -> np.ndarray:
    """The post-synthesis part of ``style``: pitch (when the synthesiser could not, ``shift_pitch``), whisper,
    tilt, gain. (S,) -> (S,)."""
    y = np.asarray(audio, dtype=np.float32).reshape(-1)
    if shift_pitch:
        y = pitch_shift(y, sample_rate, style.semitones)
    if style.whisper:
        y = whisper(y, sample_rate, seed)
    return gain(tilt(y, style.tilt), style.gain_db)
