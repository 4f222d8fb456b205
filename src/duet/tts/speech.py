"""What a speaker returns: the waveform, its rate, and how each piece of the text ended."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Speech:
    audio: np.ndarray  # (S,) float32 mono in [-1, 1]
    sample_rate: int
    pieces: tuple[str, ...]  # the text as spoken, one entry per generation (long text is split at sentences)
    # per piece: "stop" (the model ended it: a stop or end head, or Luna's predicted length) or "bound" (it hit the
    # length bound); ``duet.finish``
    ended: tuple[str, ...]

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate

    def write(self, path: str | Path) -> Path:
        """Write a 16-bit PCM WAV (or any format soundfile infers from the suffix)."""
        import soundfile as sf

        path = Path(path)
        sf.write(path, self.audio, self.sample_rate)
        return path
