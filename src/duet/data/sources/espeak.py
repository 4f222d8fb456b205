"""espeak-ng voices as corpus speakers: a language voice, a variant (`+f3`, `+m3`, `+klatt`, ...), a pitch
(`-p`, 0-99) and a rate (`-s`, words per minute) make one speaker.

espeak-ng (Debian package `espeak-ng`) writes 22.05 kHz 16-bit mono WAV with `-w`. It starts in ~15 ms, so
items are rendered one process each; the text goes in on stdin, so no text is ever parsed as an option.
Whisper understands these voices much less well than Festival's (17-60% WER, DESIGN §C), which is why the presets
give them many speakers but a small share of the hours.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, run_tool, write_audio
from duet.errors import MissingDependency


@dataclass(frozen=True)
class EspeakSpeaker:
    name: str
    voice: str  # espeak-ng language voice: en-us, en-gb, es, pt-br, nl, ky
    variant: str = ""  # e.g. f3, m3, klatt; empty for the voice's default
    pitch: int = 50  # -p, 0-99
    rate: int = 175  # -s, words per minute
    language: str = "en"
    source: str = "espeak"

    @property
    def voice_spec(self) -> str:
        return f"{self.voice}+{self.variant}" if self.variant else self.voice

    def check(self) -> None:
        require_binary("espeak-ng", "espeak-ng")
        # espeak-ng exits non-zero for an unknown language voice (an unknown variant silently falls back).
        probe = subprocess.run(["espeak-ng", "-v", self.voice, "-q", "a"], capture_output=True, text=True)
        if probe.returncode != 0:
            raise MissingDependency(f"espeak-ng voice {self.voice}", "apt-get install espeak-ng espeak-ng-data")

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        errors: list[str | None] = []
        with tempfile.TemporaryDirectory(prefix="duet-espeak-") as tmpdir:
            for i, item in enumerate(items):
                raw = Path(tmpdir) / f"{i}.wav"
                cmd = ["espeak-ng", "-v", self.voice_spec, "-p", str(self.pitch), "-s", str(self.rate)]
                err = run_tool([*cmd, "-w", str(raw), "--stdin"], timeout=60, stdin=item.text)
                if err is None:
                    try:
                        audio, sr = sf.read(str(raw), dtype="float32")
                        err = write_audio(item.out, audio, sr)
                    except Exception as read_err:  # soundfile raises several types
                        err = f"unreadable espeak-ng output: {item.id}: {read_err}"
                errors.append(err)
        return errors
