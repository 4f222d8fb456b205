"""Word timings as files (``duet speak --timestamps FILE``): JSON with every word and phone, or SRT / WebVTT captions.

The format follows the file's extension (:data:`FORMATS`). JSON::

    {"model": "gepard-tiny", "sample_rate": 22050, "duration": 5.398,
     "words": [{"word": "Hello", "start": 0.042, "end": 0.287,
                "phones": [{"phone": "h", "start": 0.042, "end": 0.07}, ...]}, ...]}

in seconds of the audio file, rounded to the millisecond; ``phones`` is empty for a model that reads text rather
than phonemes (``duet.tts.timestamps``).

Captions hold one cue per short group of words, not one per word (a cue per word flashes by faster than anyone
reads it): a cue takes the next words in order until it has ``max_words`` words or ``max_chars`` characters, or a
pause longer than ``max_pause`` comes before the next word (a sentence join always is one; a comma's pause usually);
a word of no length (one the model did not reach before it stopped) stays with the cue before it. A cue runs from
its first word's start to its last word's end, so cues never overlap. A WebVTT cue also carries the start of each
of its later words as an inline timestamp (``Hello <00:00:00.339>there``), which players use to highlight word by
word; SRT has no such tag.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from duet.errors import DuetError
from duet.tts.timestamps import WordTiming

FORMATS = {".json": "json", ".srt": "srt", ".vtt": "vtt"}


@dataclass(frozen=True)
class CaptionConfig:
    max_words: int = 7
    max_chars: int = 42  # a common caption line length
    max_pause: float = 0.3  # seconds of silence that end a cue


@dataclass(frozen=True)
class Cue:
    start: float  # seconds
    end: float
    words: tuple[WordTiming, ...]

    @property
    def text(self) -> str:
        return " ".join(w.word for w in self.words)


def timestamps_format(path: str | Path) -> str:
    """"json", "srt" or "vtt" from ``path``'s extension; a DuetError for any other."""
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise DuetError(f"cannot write timestamps to {path}: use a .json, .srt or .vtt file name")
    return fmt


def cues(words: Sequence[WordTiming], config: CaptionConfig = CaptionConfig()) -> list[Cue]:
    """Words in order -> caption cues (module docstring)."""
    groups: list[list[WordTiming]] = []
    for w in words:
        group = groups[-1] if groups else None
        if group is not None and w.end <= w.start:  # a word of no length stays with the cue before it
            group.append(w)
            continue
        full = group is None or len(group) >= config.max_words or \
            len(" ".join(x.word for x in group)) + 1 + len(w.word) > config.max_chars
        if full or w.start - group[-1].end > config.max_pause:
            groups.append([w])
        else:
            group.append(w)
    return [Cue(g[0].start, max(w.end for w in g), tuple(g)) for g in groups]


def _clock(seconds: float, separator: str) -> str:
    ms = max(0, round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{separator}{ms:03d}"


def srt_text(words: Sequence[WordTiming], config: CaptionConfig = CaptionConfig()) -> str:
    blocks = [f"{i}\n{_clock(c.start, ',')} --> {_clock(c.end, ',')}\n{c.text}\n"
              for i, c in enumerate(cues(words, config), 1)]
    return "\n".join(blocks)


def vtt_text(words: Sequence[WordTiming], config: CaptionConfig = CaptionConfig()) -> str:
    blocks = ["WEBVTT\n"]
    for i, c in enumerate(cues(words, config), 1):
        start, end = _clock(c.start, "."), _clock(c.end, ".")
        parts = []
        for w in c.words:
            at = _clock(w.start, ".")
            if parts and start < at < end:  # an inline timestamp lies strictly inside its cue
                parts.append(f"<{at}>{w.word}")
            else:
                parts.append(w.word)
        blocks.append(f"{i}\n{start} --> {end}\n{' '.join(parts)}\n")
    return "\n".join(blocks)


def word_json(w: WordTiming) -> dict:
    """One word as JSON (``--timestamps x.json``, the speech API): seconds rounded to the millisecond."""
    return {"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3),
            "phones": [{"phone": p.phone, "start": round(p.start, 3), "end": round(p.end, 3)} for p in w.phones]}


def timestamps_json(words: Sequence[WordTiming], duration: float, sample_rate: int, model: str) -> dict:
    return {"model": model, "sample_rate": sample_rate, "duration": round(duration, 3),
            "words": [word_json(w) for w in words]}


def write_timestamps(path: str | Path, words: Sequence[WordTiming], *, duration: float, sample_rate: int,
                     model: str) -> Path:
    """Write ``words`` to ``path`` in the format its extension names; a DuetError if it cannot be written."""
    path = Path(path)
    fmt = timestamps_format(path)
    if fmt == "json":
        text = json.dumps(timestamps_json(words, duration, sample_rate, model), ensure_ascii=False, indent=1) + "\n"
    else:
        text = srt_text(words) if fmt == "srt" else vtt_text(words)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise DuetError(f"cannot write {path}: {err.strerror or err}") from err
    return path
