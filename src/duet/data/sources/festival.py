"""Festival voices as corpus speakers: a voice, a speaking rate and a pitch shift make one speaker.

Voices (Debian packages): `cmu_us_slt_arctic_hts` (festvox-us-slt-hts, US female, HTS, 32 kHz; the one Whisper
understands best, DESIGN §C), `kal_diphone` (festvox-kallpc16k, US male, 16 kHz) and `ked_diphone`
(festvox-kdlpc16k, US male, 16 kHz). Those are all the English festvox voices Debian ships.

Rate: diphone voices honour Festival's `Duration_Stretch`; the HTS voice ignores it (measured: identical
output), so for HTS the rate goes to the HTS engine's `-r` speed option instead. Pitch: the HTS engine's `-fm`
and all-pass `-a` options are ignored by Festival's wrapper (identical output), so pitch is shifted afterwards
with sox `pitch`, which also moves the formants a little and so makes the variant sound like another speaker.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, run_tool, write_audio
from duet.errors import MissingDependency

VOICE_ROOT = Path("/usr/share/festival/voices")
VOICE_PACKAGES = {
    "cmu_us_slt_arctic_hts": "festvox-us-slt-hts",
    "kal_diphone": "festvox-kallpc16k",
    "ked_diphone": "festvox-kdlpc16k",
}


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class FestivalSpeaker:
    name: str
    voice: str  # Festival voice without the `voice_` prefix
    rate: float = 1.0  # speaking-rate factor, > 1 is faster
    semitones: float = 0.0  # pitch shift applied with sox after synthesis
    language: str = "en"
    source: str = "festival"

    def check(self) -> None:
        require_binary("festival", "festival")
        if not any((lang / self.voice).is_dir() for lang in VOICE_ROOT.glob("*")):
            package = VOICE_PACKAGES.get(self.voice)
            hint = f"apt-get install {package}" if package else "find its package with `apt-cache search festvox`"
            raise MissingDependency(f"Festival voice {self.voice}", hint)
        if self.semitones:
            require_binary("sox", "sox")

    def _setup(self) -> list[str]:
        lines = [f"(voice_{self.voice})"]
        if self.rate != 1.0:
            if self.voice.endswith("_hts"):
                lines.append(f'(set! hts_engine_params (append hts_engine_params (list \'("-r" {self.rate:.4f}))))')
            else:
                lines.append(f"(Parameter.set 'Duration_Stretch {1.0 / self.rate:.4f})")
        return lines

    def _synthesise(self, items: Sequence[RenderItem], tmp: Path) -> list[Path]:
        """One Festival process for the whole batch; returns the raw wav path of each item (may be missing)."""
        raw = [tmp / f"{i}.wav" for i in range(len(items))]
        lines = self._setup()
        for item, path in zip(items, raw, strict=True):
            lines.append(f'(utt.save.wave (utt.synth (Utterance Text {_scheme_string(item.text)})) "{path}" \'riff)')
        script = tmp / "batch.scm"
        script.write_text("\n".join(lines) + "\n", encoding="utf-8")
        run_tool(["festival", "-b", str(script)], timeout=60 + 20 * len(items))
        return raw

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        errors: list[str | None] = []
        with tempfile.TemporaryDirectory(prefix="duet-festival-") as tmpdir:
            tmp = Path(tmpdir)
            raw = self._synthesise(items, tmp)
            for i, (item, path) in enumerate(zip(items, raw, strict=True)):
                if not path.is_file() and len(items) > 1:
                    # A Festival error aborts the rest of a batch script: retry this item on its own.
                    single = tmp / f"single{i}"
                    single.mkdir()
                    path = self._synthesise([item], single)[0]
                errors.append(self._finish(item, path, tmp))
        return errors

    def _finish(self, item: RenderItem, path: Path, tmp: Path) -> str | None:
        if not path.is_file():
            return f"festival produced no audio: {item.id}"
        if self.semitones:
            shifted = tmp / f"{path.stem}.pitch.wav"
            err = run_tool(["sox", str(path), str(shifted), "pitch", f"{100 * self.semitones:.0f}"], timeout=60)
            if err:
                return err
            path = shifted
        try:
            audio, sr = sf.read(str(path), dtype="float32")
        except Exception as err:  # soundfile raises several types
            return f"unreadable festival output: {item.id}: {err}"
        return write_audio(item.out, audio, sr)
