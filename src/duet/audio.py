"""Audio file I/O and the explicit, documented conversions duet applies to user audio.

Conversions (each one deliberate, none silent about failure):
- multi-channel input is down-mixed to mono by averaging channels;
- a sample rate other than the requested one is resampled with a polyphase filter (scipy ``resample_poly``);
- integer PCM is scaled to float32 in [-1, 1].
Rejected with a :class:`DuetError`: empty audio, non-finite samples, unreadable files.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import soundfile as sf

from duet.errors import DuetError


def to_mono(audio: np.ndarray) -> np.ndarray:
    """(S,) or (S, channels) -> (S,) float32, averaging channels."""
    audio = np.asarray(audio)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    elif audio.ndim != 1:
        raise DuetError(f"audio must be 1-D (samples) or 2-D (samples, channels), got shape {audio.shape}")
    return audio.astype(np.float32, copy=False)


def resample(audio: np.ndarray, sr_in: int, sr_out: int) -> np.ndarray:
    """Polyphase resampling of a mono signal; a no-op when the rates match."""
    if sr_in == sr_out:
        return audio.astype(np.float32, copy=False)
    if sr_in <= 0 or sr_out <= 0:
        raise DuetError(f"sample rates must be positive, got {sr_in} -> {sr_out}")
    from scipy.signal import resample_poly  # slow to import, and `duet speak` never resamples

    ratio = Fraction(sr_out, sr_in)
    out = resample_poly(audio.astype(np.float64), ratio.numerator, ratio.denominator)
    return out.astype(np.float32)


def check_audio(audio: np.ndarray, what: str = "audio") -> np.ndarray:
    """Reject audio no model can use: empty or containing NaN/inf. Returns it unchanged."""
    if audio.size == 0:
        raise DuetError(f"{what} is empty (0 samples)")
    if not np.all(np.isfinite(audio)):
        raise DuetError(f"{what} contains NaN or infinite samples")
    return audio


def load_audio(path: str | Path, sample_rate: int | None = None) -> tuple[np.ndarray, int]:
    """Read any file libsndfile can read -> (mono float32 samples (S,), sample rate).

    With ``sample_rate`` given, the audio is resampled to it. Unreadable files raise DuetError.
    """
    path = Path(path)
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=False)
    except Exception as err:  # soundfile raises several types (LibsndfileError, RuntimeError, OSError)
        raise DuetError(f"cannot read audio file {path}: {err}") from err
    audio = check_audio(to_mono(data), what=str(path))
    if sample_rate is not None and sr != sample_rate:
        audio, sr = resample(audio, sr, sample_rate), sample_rate
    return audio, sr


def save_audio(path: str | Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write mono float audio as 16-bit PCM (WAV/FLAC by extension), clipping to [-1, 1]."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), np.clip(to_mono(audio), -1.0, 1.0), sample_rate, subtype="PCM_16")
    return path
