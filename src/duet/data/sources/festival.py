"""Festival voices as corpus speakers: a voice, a speaking rate and a pitch shift make one speaker.

Voices (Debian packages): `cmu_us_slt_arctic_hts` (festvox-us-slt-hts, US female, HTS, 32 kHz; the one Whisper
understands best, DESIGN §C), `kal_diphone` (festvox-kallpc16k, US male, 16 kHz) and `ked_diphone`
(festvox-kdlpc16k, US male, 16 kHz). Those are all the English festvox voices Debian ships.

Rate: diphone voices honour Festival's `Duration_Stretch`; the HTS voice ignores it (measured: identical
output), so for HTS the rate goes to the HTS engine's `-r` speed option instead. Pitch: the HTS engine's `-fm`
and all-pass `-a` options are ignored by Festival's wrapper (identical output), so pitch is shifted afterwards
with sox `pitch`, which moves the formants with the pitch and so makes the variant sound like another speaker;
a `formant` scale sets where the formants end instead (`duet.data.voice_effects.timbre_shift`: the envelope warped
after the pitch shift), so the pitch and the vocal tract move apart.

Timing. In the same Festival process each utterance's Segment relation (name, end time) and its tokens with their
words' start and end times are written to a file next to the raw wave, and become the timing sidecar
(`duet.data.timing`, `alphabet` "festival": Festival's own phone names, pauses `pau`). Festival's tokens are the
text's whitespace-separated words with punctuation split off, and a token holds the words it is read as ("$3.50":
three dollars fifty), so each text word takes its token's span (matched by `align_words` over the token names).
Checked against the audio (the segments' ends vs. the wave's length, and which shift of the segments puts most
energy in speech segments and least in pauses): slt at rates 1 and 1.3 (the HTS engine's `-r` is written back into
the segment times: 4.04 s of audio, last segment end 4.04 s) and kal/ked at their Duration_Stretch all fit within
15 ms; the diphone waves run ~30 ms past the last segment (trailing silence). sox `pitch` and the envelope warp keep the
length, so shifted variants keep their timing. A sidecar whose segments do not fit its audio is not written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, run_tool, write_timed_audio
from duet.data.timing import Timing, align_words, check_timing, text_words, word_times
from duet.data.voice_effects import timbre_shift
from duet.errors import DuetError, MissingDependency

VOICE_ROOT = Path("/usr/share/festival/voices")
VOICE_PACKAGES = {
    "cmu_us_slt_arctic_hts": "festvox-us-slt-hts",
    "kal_diphone": "festvox-kallpc16k",
    "ked_diphone": "festvox-kdlpc16k",
}


def _scheme_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# Writes an utterance's timing to a file: "S name end" per segment, then per top-level token "T name" and
# "W name start end" per word it is read as (a punctuation token's "words" have no syllables: start = end = 0).
_TIMING_SCHEME = """(define (duet_timing u path)
  (let ((fd (fopen path "w")) (tok (utt.relation.first u 'Token)))
    (mapcar (lambda (s) (format fd "S %s %f\\n" (item.name s) (item.feat s "end")))
            (utt.relation.items u 'Segment))
    (while tok
      (format fd "T %s\\n" (item.name tok))
      (mapcar (lambda (w) (format fd "W %s %f %f\\n" (item.name w)
                                  (item.feat w "R:SylStructure.daughter1.daughter1.segment_start")
                                  (item.feat w "R:SylStructure.daughtern.daughtern.end")))
              (item.daughters tok))
      (set! tok (item.next tok)))
    (fclose fd)))"""


def read_festival_timing(path: Path) -> tuple[list[tuple[str, float]], list[tuple[str, float, float]]]:
    """A `duet_timing` file -> (segments as (name, end), tokens that are read as words as (token, start, end))."""
    segments: list[tuple[str, float]] = []
    tokens: list[tuple[str, float | None, float | None]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        kind, _, rest = line.partition(" ")
        fields = rest.rsplit(" ", 2)
        if kind == "S" and " " in rest:
            name, end = rest.rsplit(" ", 1)
            segments.append((name, float(end)))
        elif kind == "T":
            tokens.append((rest, None, None))
        elif kind == "W" and len(fields) == 3 and tokens and float(fields[2]) > float(fields[1]):
            name, start, end = tokens[-1]  # a word with syllables (punctuation has none) extends its token
            tokens[-1] = (name, float(fields[1]) if start is None else start, float(fields[2]))
    return segments, [(n, a, b) for n, a, b in tokens if a is not None and b is not None]


def festival_timing(text: str, segments: list[tuple[str, float]], tokens: list[tuple[str, float, float]],
                    duration: float) -> Timing | None:
    """The sidecar for audio of `duration` s, or None when the segments do not fit it."""
    phones, prev = [], 0.0
    for name, end in segments:
        phones.append((name, prev, max(prev, end)))
        prev = max(prev, end)
    words = text_words(text)
    if not phones or not tokens or not words or not duration - 0.1 <= prev <= duration + 0.02:
        return None
    phones = [(n, min(a, duration), min(b, duration)) for n, a, b in phones]
    # A segment that a post-lexical rule inserted after a word (ked reads "Dr. Smith" with an "r" between "er"
    # and "s") is in no word's syllables: it belongs to the word before, up to the next word or pause.
    tokens = list(tokens)
    for k, (name, start, end) in enumerate(tokens):
        limit = tokens[k + 1][1] if k + 1 < len(tokens) else duration
        for seg, a, b in phones:
            if abs(a - end) < 1e-4 and seg != "pau" and b <= limit + 1e-4:
                end = b
        tokens[k] = (name, min(start, duration), min(end, duration))
    spans = align_words([n.lower() for n, _, _ in tokens], [[w.lower()] for w in words], is_boundary=lambda u: False)
    timing = Timing(" ".join(n for n, _, _ in phones), tuple(phones), word_times(words, spans, tokens), "festival")
    return None if check_timing(timing, duration) else timing


@dataclass(frozen=True)
class FestivalSpeaker:
    name: str
    voice: str  # Festival voice without the `voice_` prefix
    rate: float = 1.0  # speaking-rate factor, > 1 is faster
    semitones: float = 0.0  # pitch shift applied with sox after synthesis
    formant: float | None = None  # final spectral envelope scale (`timbre_shift`); None: with the pitch, as sox moves it
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

    @property
    def formant_scale(self) -> float:
        """Where the formants end, as a factor: sox ``pitch`` alone scales them with the pitch."""
        return 2 ** (self.semitones / 12) if self.formant is None else self.formant

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
        lines = [*self._setup(), _TIMING_SCHEME]
        for item, path in zip(items, raw, strict=True):
            lines.append(f"(set! duet_u (utt.synth (Utterance Text {_scheme_string(item.text)})))")
            lines.append(f'(duet_timing duet_u "{path.with_suffix(".seg")}")')
            lines.append(f'(utt.save.wave duet_u "{path}" \'riff)')
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
                errors.append(self._finish(item, path))
        return errors

    def _finish(self, item: RenderItem, path: Path) -> str | None:
        if not path.is_file():
            return f"festival produced no audio: {item.id}"
        seg = path.with_suffix(".seg")
        try:
            audio, sr = sf.read(str(path), dtype="float32")
        except Exception as err:  # soundfile raises several types
            return f"unreadable festival output: {item.id}: {err}"
        try:
            audio = timbre_shift(audio, sr, self.formant_scale, self.semitones)  # length kept
        except DuetError as err:
            return f"{err}: {item.id}"
        try:
            timing = festival_timing(item.text, *read_festival_timing(seg), len(audio) / sr) if seg.is_file() else None
        except ValueError:  # a line Festival wrote that is not what duet_timing prints: no sidecar, audio kept
            timing = None
        return write_timed_audio(item.out, audio, sr, timing)
