"""espeak-ng voices as corpus speakers: a language voice, a variant (`+f3`, `+m3`, `+klatt`, ...), a pitch
(`-p`, 0-99) and a rate (`-s`, words per minute) make one speaker, with each phoneme's and word's timing.

Rendered through the espeak-ng library (`duet.data.sources.espeak_library`: the same engine and voices as the
`espeak-ng` program, 22.05 kHz mono), whose events give each phoneme's start sample and each word's position in the
text. The sidecar's `phonemes` are the IPA phonemes the voice read, space-separated (`alphabet` "espeak", pauses
`_`); a written word spans the phonemes of the words espeak-ng read it as ("3.50" is several). Whisper understands
these voices much less well than Festival's (17-60% WER, DESIGN §C), which is why the presets give them many
speakers but a small share of the hours.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from duet.data.sources.base import RenderItem, write_timed_audio
from duet.data.sources.espeak_library import Synthesis, library
from duet.data.timing import Timing, check_timing
from duet.errors import MissingDependency

ALPHABET = "espeak"


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
        if not library().has_voice(self.voice):  # an unknown variant silently falls back to the voice's default
            raise MissingDependency(f"espeak-ng voice {self.voice}", "apt-get install espeak-ng espeak-ng-data")

    def render(self, items: Sequence[RenderItem]) -> list[str | None]:
        errors: list[str | None] = []
        for item in items:
            try:
                synthesis = library().synthesize(item.text, self.voice_spec, self.pitch, self.rate)
            except (RuntimeError, MissingDependency) as err:
                errors.append(f"espeak-ng failed: {item.id}: {err}")
                continue
            timing = espeak_timing(item.text, synthesis)
            errors.append(write_timed_audio(item.out, synthesis.audio, synthesis.sample_rate, timing))
        return errors


def _written_words(text: str) -> list[tuple[str, int, int]]:
    """The text's words as ``duet.data.timing.text_words`` counts them, each with the character span of the
    whitespace-separated token it was cut from."""
    out = []
    for m in re.finditer(r"\S+", text):
        token, start, end = m.group(), 0, len(m.group())
        while start < end and unicodedata.category(token[start])[0] == "P":
            start += 1
        while end > start and unicodedata.category(token[end - 1])[0] == "P":
            end -= 1
        if start < end:
            out.append((token[start:end], m.start(), m.end()))
    return out


def espeak_timing(text: str, synthesis: Synthesis) -> Timing | None:
    """The sidecar of one synthesis, or None where a written word got no phoneme or the timing is not usable."""
    sr = synthesis.sample_rate
    phones = tuple((name, a / sr, b / sr) for name, a, b in synthesis.phonemes)
    read = [(pos, a, b) for pos, a, b in synthesis.words if a >= 0]  # the words espeak-ng read, with phonemes
    words = []
    for word, start, end in _written_words(text):
        spoken = [(a, b) for pos, a, b in read if start <= pos < end]
        if not spoken:  # read together with the words before it ("I am" is one word to espeak-ng): their span
            spoken = [(a, b) for pos, a, b in read if pos < start][-1:]
        if not spoken:
            return None
        words.append((word, phones[spoken[0][0]][1], phones[spoken[-1][1] - 1][2]))
    if not words or not phones:
        return None
    timing = Timing(" ".join(name for name, _, _ in phones), phones, tuple(words), ALPHABET)
    return None if check_timing(timing, len(synthesis.audio) / sr) else timing
