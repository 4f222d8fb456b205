"""One recording as training audio: read at its own rate, down-mixed, trimmed to its speech, loudness-normalised,
resampled to the codec's rate.

- trim: the silence before the first speech frame and after the last one (``duet.voice.checks.analyse``) is cut
  down to ``lead_seconds`` / ``trail_seconds``, about what the shipped model's training audio holds (Piper's
  ``joe`` voice: a median 0.05 s before and 0.18 s after its speech), so the base model's sense of where speech
  starts and stops carries over;
- loudness: one gain per clip brings its speech frames' RMS level to ``speech_dbfs`` (-24 dBFS: joe's median, which
  the codec and gepard-tiny learned), lowered where the loudest sample would pass ``peak``;
- rate: polyphase resampling to the codec's rate (``duet.audio.resample``).

The user's file is only read; the prepared clip is written into the build directory.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.audio import resample, to_mono
from duet.voice.checks import AudioFacts


@dataclass(frozen=True)
class PrepConfig:
    lead_seconds: float = 0.1  # silence kept before the first speech frame
    trail_seconds: float = 0.15  # ... and after the last one
    speech_dbfs: float = -24.0  # RMS level of the speech frames after normalisation
    peak: float = 0.95  # the loudest sample at most this (the gain is lowered to keep it)


def read_recording(path: Path) -> tuple[np.ndarray, int] | str:
    """(mono float32 audio (S,), its sample rate) as recorded, or a one-line reason it cannot be read."""
    import soundfile as sf

    try:
        data, rate = sf.read(str(path), dtype="float32", always_2d=False)
    except Exception as err:  # libsndfile raises several types for broken or foreign files
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        return f"libsndfile cannot read it ({message})"
    audio = to_mono(data)
    if audio.size == 0:
        return "it holds no samples"
    if not np.all(np.isfinite(audio)):
        return "it holds non-finite samples"
    return audio, int(rate)


def prepare_audio(audio: np.ndarray, sample_rate: int, facts: AudioFacts, target_rate: int,
                  cfg: PrepConfig = PrepConfig()) -> np.ndarray:
    """Mono ``audio`` (S,) at ``sample_rate`` with its :class:`AudioFacts` -> the trimmed, normalised clip (S',) at
    ``target_rate`` (module doc)."""
    start = max(0, int((facts.speech_start - cfg.lead_seconds) * sample_rate))
    end = min(len(audio), int(np.ceil((facts.speech_end + cfg.trail_seconds) * sample_rate)))
    clip = audio[start:end].astype(np.float32)
    gain = 10 ** ((cfg.speech_dbfs - facts.speech_dbfs) / 20) if np.isfinite(facts.speech_dbfs) else 1.0
    loudest = float(np.abs(clip).max()) if clip.size else 0.0
    if loudest * gain > cfg.peak:
        gain = cfg.peak / loudest
    return resample(clip * np.float32(gain), sample_rate, target_rate)
