"""What a speaker returns: the waveform, its rate, how each piece of the text ended and where each word lies
(``duet.tts.timestamps``); the silence between pieces."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.tts.timestamps import WordTiming


@dataclass(frozen=True)
class Speech:
    audio: np.ndarray  # (S,) float32 mono in [-1, 1]
    sample_rate: int
    pieces: tuple[str, ...]  # the text as spoken, one entry per generation (long text is split at sentences)
    # per piece: "stop" (the model ended it: a stop or end head, or Luna's predicted length) or "bound" (it hit the
    # length bound); ``duet.finish``
    ended: tuple[str, ...]
    # every word of the text in order, in seconds of ``audio`` (speed and the gaps between pieces included); None
    # for a model whose frames follow no layout of its text (no aligned text input)
    words: tuple[WordTiming, ...] | None = None

    @property
    def seconds(self) -> float:
        return len(self.audio) / self.sample_rate

    def write(self, path: str | Path) -> Path:
        """Write a 16-bit PCM WAV (or any format soundfile infers from the suffix)."""
        import soundfile as sf

        path = Path(path)
        sf.write(path, self.audio, self.sample_rate)
        return path


def silence(seconds: float, sample_rate: int) -> np.ndarray:
    """(round(seconds * sample_rate),) float32 zeros: the gap between two spoken pieces, wherever pieces are joined
    (``Speaker``, the live player, the text-streaming socket)."""
    return np.zeros(round(seconds * sample_rate), dtype=np.float32)
