"""Recorded speech (Asterisk prompts, pocketsphinx test data): decode a source file into the corpus as WAV.

Decoding by file type, at the file's own rate:
- `.wav`, `.wav16`, `.flac`: libsndfile (soundfile);
- `.raw`, `.sln16`: headerless 16-bit little-endian mono at 16 kHz (the pocketsphinx test-data and Asterisk
  `sln16` conventions);
- anything else (`.g722`, `.gsm`, ...): ffmpeg to a temporary WAV (G.722 decodes to 16 kHz).

A source file that cannot be decoded, or decodes to nothing or to silence, is that item's error: the builder
skips it and counts it in the summary.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, run_tool, write_audio

RAW_SAMPLE_RATE = 16000
_SOUNDFILE_SUFFIXES = (".wav", ".wav16", ".flac")
_RAW_SUFFIXES = (".raw", ".sln16")


def decode(path: Path) -> tuple[np.ndarray, int] | str:
    """(mono float32 audio, sample rate), or a one-line error."""
    if not path.is_file():
        return f"missing source file: {path}"
    suffix = path.suffix.lower()
    try:
        if suffix in _RAW_SUFFIXES:
            raw = path.read_bytes()
            if len(raw) % 2:
                return f"odd byte count in 16-bit raw file: {path}"
            return np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0, RAW_SAMPLE_RATE
        if suffix in _SOUNDFILE_SUFFIXES:
            audio, sr = sf.read(str(path), dtype="float32")
            return audio, sr
    except Exception as err:  # soundfile raises several types for broken files
        return f"unreadable source file: {path}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    with tempfile.TemporaryDirectory(prefix="duet-decode-") as tmpdir:
        wav = Path(tmpdir) / "decoded.wav"
        cmd = ["ffmpeg", "-nostdin", "-v", "error", "-i", str(path), "-ac", "1", "-c:a", "pcm_s16le", str(wav)]
        err = run_tool(cmd, timeout=120)
        if err:
            return f"cannot decode: {path}: {err}"
        try:
            audio, sr = sf.read(str(wav), dtype="float32")
        except Exception as read_err:  # ffmpeg wrote no usable file
            return f"cannot decode: {path}: {read_err}"
        return audio, sr


@dataclass(frozen=True)
class RecordedSpeaker:
    """A recorded speaker; each item's `origin` is the file holding its recording."""

    name: str
    source: str  # asterisk | pocketsphinx
    language: str
    needs_ffmpeg: bool = False

    def check(self) -> None:
        if self.needs_ffmpeg:
            require_binary("ffmpeg", "ffmpeg")

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        errors: list[str | None] = []
        for item in items:
            decoded = decode(Path(item.origin))
            if isinstance(decoded, str):
                errors.append(decoded)
                continue
            audio, sr = decoded
            err = write_audio(item.out, audio, sr)
            errors.append(f"{err}: {item.origin}" if err else None)
        return errors
