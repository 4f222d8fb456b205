"""Flite voices as corpus speakers: a voice, a speaking rate and a pitch make one speaker, with each segment's and
word's timing where the voice's audio follows its segment times.

Voices (Debian package `flite`, all built into the binary; `flite -lv`): `awb` (Scottish-accented male), `rms` (US
male), `slt` (US female), all three clustergen (statistical parametric) voices at 16 kHz, and the diphone voices
`kal16` (US male, 16 kHz) and `kal` (8 kHz). Flite starts in ~10 ms and synthesises ~30-45x real time (clustergen)
or ~100x (kal16), so items are rendered one process each; the text goes in as a temporary file (`-f`), so no text
is ever parsed as an option.

Rate: `--setf duration_stretch=1/rate`. Pitch: `--setf int_f0_target_mean=<Hz>` (measured with pYIN on awb:
median f0 122 Hz by default, 79 Hz at 90, 130 Hz at 140); the formants stay. Timbre: `formant` scales the
spectral envelope after synthesis (`duet.data.voice_effects.timbre_shift`), a longer or shorter vocal tract.

Timing. `-psdur` prints each segment with its end time, one line per utterance (times restart at 0 on each line;
a text with several sentences is several utterances, their audio concatenated). For the clustergen voices the
audio follows the segments: the utterances' last end times add up to the audio length within ~5 ms each, and the
pauses (`pau`) are silent. For the diphone voices it does not (kal16's audio is ~0.1-0.4 s shorter than its
segment times, and its pauses hold speech), so they get no sidecar. Flite prints no word times (`-pw` gives the
words' names only), so words come from `duet.data.timing.align_words`: every distinct word of a batch is read on
its own in one extra run of `kal16` (blank lines make each word an utterance; checked: it gives the same segments as
awb, rms and slt for 292 words, while `kal` writes `aa` for their `ah`), and the sidecar's `phonemes` are Flite's
own phone names (`alphabet` "flite"), not IPA.
"""

from __future__ import annotations

import functools
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from duet.data.sources.base import RenderItem, require_binary, write_timed_audio
from duet.data.timing import Timing, align_words, check_timing, text_words, word_times
from duet.data.voice_effects import timbre_shift
from duet.errors import MissingDependency

TIMED_VOICES = frozenset({"awb", "rms", "slt"})  # clustergen: the audio follows the segment times
WORD_VOICE = "kal16"  # reads the words one by one: fast, and the same lexicon as the timed voices
PAUSE = "pau"
_TIMEOUT = 60.0


@functools.cache
def installed_voices() -> frozenset[str]:
    """The voice names `flite -lv` lists (built into this flite binary)."""
    out = subprocess.run(["flite", "-lv"], capture_output=True, text=True, check=False).stdout
    return frozenset(out.split(":", 1)[-1].split())


Segments = list[tuple[str, float]]  # (segment name, end time in s from the start of its utterance)


def _flite(args: list[str]) -> tuple[str, str | None]:
    """Run flite; (stdout, None) on success, else ("", one-line error)."""
    try:
        proc = subprocess.run(["flite", *args], capture_output=True, text=True, timeout=_TIMEOUT)
    except subprocess.TimeoutExpired:
        return "", f"flite timed out after {_TIMEOUT:.0f} s"
    except OSError as err:
        return "", f"flite failed to start: {err}"
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        return "", f"flite exited with {proc.returncode}: {last[:200]}"
    return proc.stdout, None


def parse_segments(stdout: str) -> list[Segments]:
    """`-psdur` output -> one list of (name, end) per utterance."""
    utterances = []
    for line in stdout.splitlines():
        segments = []
        for field in line.split():
            name, sep, end = field.rpartition(":")
            try:
                segments.append((name, float(end)))
            except ValueError:
                segments = []
                break
            if not sep:
                segments = []
                break
        if segments:
            utterances.append(segments)
    return utterances


def segment_spans(utterances: Sequence[Segments]) -> list[tuple[str, float, float]]:
    """Per-utterance end times -> (name, start, end) on one clock: each utterance starts where the last ended."""
    spans, offset = [], 0.0
    for segments in utterances:
        prev = 0.0
        for name, end in segments:
            spans.append((name, offset + prev, offset + max(end, prev)))
            prev = max(end, prev)
        offset += prev
    return spans


@dataclass(frozen=True)
class FliteSpeaker:
    name: str
    voice: str  # awb | rms | slt | kal16 | kal
    rate: float = 1.0  # speaking-rate factor, > 1 is faster (duration_stretch = 1 / rate)
    pitch: float | None = None  # target mean f0 in Hz (int_f0_target_mean); None: the voice's own
    formant: float = 1.0  # spectral envelope scale after synthesis (> 1: a shorter vocal tract), length kept
    language: str = "en"
    source: str = "flite"

    @property
    def timed(self) -> bool:
        return self.voice in TIMED_VOICES

    def check(self) -> None:
        require_binary("flite", "flite")
        if self.voice not in installed_voices():
            raise MissingDependency(f"Flite voice {self.voice}", "apt-get install flite (voices: flite -lv)")

    def _options(self) -> list[str]:
        options = ["-voice", self.voice]
        if self.rate != 1.0:
            options += ["--setf", f"duration_stretch={1.0 / self.rate:.4f}"]
        if self.pitch is not None:
            options += ["--setf", f"int_f0_target_mean={self.pitch:g}"]
        return options

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        errors: list[str | None] = []
        with tempfile.TemporaryDirectory(prefix="duet-flite-") as tmpdir:
            tmp = Path(tmpdir)
            pronunciations = self._word_segments(items, tmp) if self.timed else {}
            for i, item in enumerate(items):
                text, raw = tmp / f"{i}.txt", tmp / f"{i}.wav"
                text.write_text(item.text + "\n", encoding="utf-8")
                stdout, err = _flite([*self._options(), "-psdur", "-f", str(text), "-o", str(raw)])
                if err is None:
                    err = self._finish(item, raw, parse_segments(stdout), pronunciations)
                errors.append(err)
        return errors

    def _finish(self, item: RenderItem, raw: Path, utterances: list[Segments],
                pronunciations: dict[str, list[str]]) -> str | None:
        try:
            audio, sr = sf.read(str(raw), dtype="float32")
        except Exception as err:  # soundfile raises several types
            return f"unreadable flite output: {item.id}: {err}"
        audio = timbre_shift(audio, sr, self.formant)  # length kept: the segment times still hold
        timing = self._timing(item.text, utterances, pronunciations, len(audio) / sr) if self.timed else None
        return write_timed_audio(item.out, audio, sr, timing)

    def _timing(self, text: str, utterances: list[Segments], pronunciations: dict[str, list[str]],
                duration: float) -> Timing | None:
        """The sidecar, or None when the segments do not add up to the audio (then no sidecar is written)."""
        phones = segment_spans(utterances)
        if not phones or abs(phones[-1][2] - duration) > 0.01 + 0.006 * len(utterances):
            return None
        phones = [(n, min(a, duration), min(b, duration)) for n, a, b in phones]
        words = text_words(text)
        units = [n for n, _, _ in phones]
        spans = align_words(units, [pronunciations.get(w, []) for w in words], is_boundary=lambda u: u == PAUSE)
        timing = Timing(" ".join(units), tuple(phones), word_times(words, spans, phones) if words else (), "flite")
        return None if check_timing(timing, duration) else timing

    def _word_segments(self, items: Sequence[RenderItem], tmp: Path) -> dict[str, list[str]]:
        """Each distinct word of the batch -> its segments read alone (pauses left out), in one flite run."""
        vocab = sorted({w for item in items for w in text_words(item.text)})
        if not vocab:
            return {}
        voice = WORD_VOICE if WORD_VOICE in installed_voices() else self.voice
        path = tmp / "words.txt"
        path.write_text("\n\n".join(vocab) + "\n", encoding="utf-8")  # a blank line ends an utterance
        stdout, err = _flite(["-voice", voice, "-psdur", "-f", str(path), "-o", "none"])
        utterances = parse_segments(stdout) if err is None else []
        if len(utterances) != len(vocab):  # a word that is no utterance, or one split in two: one run per word
            utterances = []
            for k, word in enumerate(vocab):
                single = tmp / f"word{k}.txt"
                single.write_text(word + "\n", encoding="utf-8")
                out, err = _flite(["-voice", voice, "-psdur", "-f", str(single), "-o", "none"])
                utterances.append([s for u in parse_segments(out) for s in u] if err is None else [])
        return {w: [n for n, _ in segs if n != PAUSE] for w, segs in zip(vocab, utterances, strict=True)}
