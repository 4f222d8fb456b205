"""What every speech source shares: the item a worker renders, the `Renderer` protocol, and safe audio writing.

A renderer is one speaker (a Festival voice with a rate and pitch, an espeak-ng voice variant, a recorded
speaker). It is a small frozen dataclass, so it pickles cheaply into worker processes, and it renders a batch of
items at a time (Festival pays ~0.3 s to start and load a voice; one process per batch amortises that).

Audio is stored as mono 16-bit WAV at the source's native rate (Festival slt 32 kHz, kal/ked 16 kHz,
espeak-ng 22.05 kHz, Asterisk and pocketsphinx 16 kHz). Codecs resample on load (`duet.audio.load_audio`), so a
22.05 or 24 kHz consumer reads any of them; keeping the native rate means no resampling is baked into the corpus.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import soundfile as sf

from duet.data.timing import Timing, timing_path, write_timing
from duet.errors import MissingDependency

# Below this peak the output is treated as silence (a synthesiser that read nothing), not as speech.
SILENCE_PEAK = 1e-3


@dataclass(frozen=True)
class RenderItem:
    id: str
    text: str
    out: str  # absolute path of the final audio file
    origin: str = ""  # recorded sources: the file to decode; empty for synthesisers


class Renderer(Protocol):
    """One speaker of one source. `render` never raises for a bad item: it returns that item's error message."""

    name: str  # the speaker id in the manifest
    source: str  # festival | espeak | asterisk | pocketsphinx
    language: str

    def check(self) -> None:
        """Raise `MissingDependency` (one line, naming the Debian package) if a binary or voice is absent."""
        ...

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        """Write each item's audio to `item.out`; per item, None on success or a one-line error of the form
        `"<reason>: <details>"` (the summary counts failures by reason)."""
        ...


def require_binary(binary: str, package: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise MissingDependency(f"`{binary}`", f"apt-get install {package}")
    return path


def run_tool(cmd: list[str], timeout: float, stdin: str | None = None) -> str | None:
    """Run an external tool; None on success, else a one-line error (exit status and the last stderr line)."""
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"{Path(cmd[0]).name} timed out after {timeout:.0f} s"
    except OSError as err:
        return f"{Path(cmd[0]).name} failed to start: {err}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return f"{Path(cmd[0]).name} exited with {proc.returncode}: {last[:200]}"
    return None


def write_audio(out: str | Path, audio: np.ndarray, sample_rate: int) -> str | None:
    """Validate and write mono audio as 16-bit WAV, atomically (temp file + rename).

    Returns an error instead of writing when the audio is empty, not finite or silent, so a later run does not
    mistake a bad file for a finished one. A file at `out` is therefore always complete and usable.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    if audio.size == 0:
        return "empty audio"
    if not np.all(np.isfinite(audio)):
        return "audio contains NaN or infinite samples"
    if float(np.max(np.abs(audio))) < SILENCE_PEAK:
        return "silent audio"
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.stem + ".part.wav")
    sf.write(str(tmp), np.clip(audio, -1.0, 1.0), sample_rate, subtype="PCM_16", format="WAV")
    os.replace(tmp, out)
    return None


def write_timed_audio(out: str | Path, audio: np.ndarray, sample_rate: int, timing: Timing | None) -> str | None:
    """:func:`write_audio` with its timing sidecar (``duet.data.timing``) written first, so a finished audio file
    of a source that writes timing always has its sidecar; the sidecar is removed again if the audio is refused."""
    if timing is not None:
        write_timing(out, timing)
    err = write_audio(out, audio, sample_rate)
    if err is not None and timing is not None:
        timing_path(out).unlink(missing_ok=True)
    return err


def finished_duration(path: str | Path) -> float | None:
    """Duration in seconds of a finished audio file, or None if it is missing, unreadable or empty."""
    try:
        info = sf.info(str(path))
    except Exception:  # soundfile raises several types for unreadable files
        return None
    if info.frames <= 0 or info.samplerate <= 0:
        return None
    return info.frames / info.samplerate
