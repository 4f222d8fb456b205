"""How long a pause in speech lasts, by an energy threshold: the quiet stretch of audio around a moment.

Audio is cut into ``window``-second frames; a frame is quiet when its RMS is more than ``below_db`` under the
loudest frame of the clip. A pause is a run of quiet frames; :func:`pause_at` finds the run that holds a moment
(the middle of where a break was asked for, ``duet.tts.pace``), or the longest run that overlaps a stretch of time.
A word's soft end or start sits under the threshold, so a measured pause is a little longer than the silence a
listener hears between the words.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PauseConfig:
    window: float = 0.01  # seconds per energy frame
    below_db: float = -40.0  # quiet: this far under the clip's loudest frame


def quiet_runs(audio: np.ndarray, sample_rate: int, config: PauseConfig = PauseConfig()) -> list[tuple[float, float]]:
    """Every run of quiet frames, as (start, end) in seconds."""
    n = max(1, int(round(sample_rate * config.window)))
    frames = len(audio) // n
    if frames == 0:
        return []
    rms = np.sqrt(np.mean(audio[: frames * n].astype(np.float64).reshape(frames, n) ** 2, axis=1) + 1e-12)
    quiet = 20 * np.log10(rms / rms.max()) < config.below_db
    runs, start = [], None
    for i, q in enumerate(quiet):
        if q and start is None:
            start = i
        elif not q and start is not None:
            runs.append((start * n / sample_rate, i * n / sample_rate))
            start = None
    if start is not None:
        runs.append((start * n / sample_rate, frames * n / sample_rate))
    return runs


def pause_at(audio: np.ndarray, sample_rate: int, start: float, end: float,
             config: PauseConfig = PauseConfig()) -> float:
    """Seconds of the longest quiet run that overlaps [start, end] (0 when none does)."""
    overlapping = [b - a for a, b in quiet_runs(audio, sample_rate, config) if a <= end and b >= start]
    return max(overlapping, default=0.0)
