"""Timing sidecars: where each phone and each word of a synthesised utterance lies in its audio.

A synthesiser that knows its own timing (Piper's durations, Flite's and Festival's segment end times) writes, next to
the audio ``wavs/<speaker>/<id>.wav``, a file ``wavs/<speaker>/<id>.timing.json``::

    {"alphabet": "ipa",                      # what `phonemes` is written in (below)
     "phonemes": "həlˈoʊ ðˈɛɹ.",             # what the voice read
     "phones": [["h", 0.2206, 0.2787], ...],  # one entry per phoneme unit, in order: [unit, start_s, end_s]
     "words": [["Hello", 0.2206, 0.5341], ["there", 0.5573, 0.8011]]}  # the text's words, as spoken

Units of `phonemes`: with ``alphabet == "ipa"`` (espeak-ng IPA, Piper) one unit is one character, so
``phones[i][0] == phonemes[i]`` and a tokenizer's character offsets into `phonemes` index `phones` directly (a
character the voice could not read keeps its place with a zero-length span). Any other alphabet is the
synthesiser's own phone set (``flite``, ``festival``): units are the space-separated phone names of `phonemes`,
pauses included (``pau``). Times are seconds from the start of the audio, rounded to 4 decimals; what lies before
the first phone and after the last one is silence.

Words are the text's whitespace-separated words with surrounding punctuation stripped (``text_words``: the one rule
of ``duet.text.tags.spoken_words``), so "$3.50" or "1984" is one word spanning all it is read as. A synthesiser's
phones are mapped to those words by :func:`align_words` (espeak-ng reads "of the" as one IPA word "ʌvðə", "I am" as "aɪɐm"); words it cannot separate
share one span, so a consumer may see two words with the same start and end (none did among the 119,427 words of
the English text pool). The sidecar is written before the audio (both atomically), so a finished audio file of a
source that writes timing always has its sidecar.

A model that reads IPA (a phoneme tokenizer) trains on IPA timing. :func:`ipa_from_words` turns a sidecar in a
synthesiser's own phone set into one: the text's espeak-ng IPA (what the model will read at inference) is cut into
words by :func:`align_words`, and each word's characters share that word's time span, speech characters in equal
parts. Phone boundaries inside a word are then approximate; word boundaries are the synthesiser's own.
"""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from pathlib import Path

from duet.errors import DuetError
from duet.text.tags import spoken_words

SUFFIX = ".timing.json"
IPA = "ipa"
TOLERANCE = 0.02  # s: rounding to 4 decimals plus a synthesiser's frame (Piper 11.6 ms, Flite 5 ms)

Span = tuple[str, float, float]  # (unit or word, start_s, end_s)


@dataclass(frozen=True)
class Timing:
    phonemes: str
    phones: tuple[Span, ...]
    words: tuple[Span, ...]
    alphabet: str = IPA

    def units(self) -> list[str]:
        """The phoneme units that `phones` times, in order (characters for IPA, phone names otherwise)."""
        return list(self.phonemes) if self.alphabet == IPA else self.phonemes.split()

    def to_json(self) -> dict:
        return {
            "alphabet": self.alphabet,
            "phonemes": self.phonemes,
            "phones": [[u, round(a, 4), round(b, 4)] for u, a, b in self.phones],
            "words": [[w, round(a, 4), round(b, 4)] for w, a, b in self.words],
        }

    @classmethod
    def from_json(cls, d: dict) -> Timing:
        def spans(rows) -> tuple[Span, ...]:
            return tuple((str(u), float(a), float(b)) for u, a, b in rows)

        return cls(str(d["phonemes"]), spans(d["phones"]), spans(d["words"]), str(d.get("alphabet", IPA)))


def timing_path(audio_path: str | Path) -> Path:
    """``dir/<stem>.wav`` -> ``dir/<stem>.timing.json``."""
    audio_path = Path(audio_path)
    return audio_path.with_name(audio_path.stem + SUFFIX)


def write_timing(audio_path: str | Path, timing: Timing) -> Path:
    """Write the sidecar of ``audio_path`` atomically (temp file + rename); returns its path."""
    path = timing_path(audio_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(timing.to_json(), ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_timing(path: str | Path) -> Timing:
    """Read a sidecar, given its own path or the path of the audio it belongs to."""
    path = Path(path)
    if not path.name.endswith(SUFFIX):
        path = timing_path(path)
    try:
        return Timing.from_json(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DuetError(f"unreadable timing file {path}: {err}") from err


def check_timing(timing: Timing, duration: float, tol: float = TOLERANCE) -> list[str]:
    """Problems with ``timing`` for audio of ``duration`` seconds; [] when it is usable.

    Phones: as many as `phonemes` has units, each with start <= end, in order without overlap, inside the audio.
    Words: at least one, each non-empty (start < end), in order, not overlapping (words sharing one span count as
    one), inside the audio, and covering the speech: every phone that is speech (not a space, punctuation, stress
    mark or pause, and not of zero length) lies inside some word.
    """
    problems: list[str] = []
    units = timing.units()
    if len(units) != len(timing.phones):
        problems.append(f"{len(timing.phones)} phones for {len(units)} phoneme units")
    elif any(u != p[0] for u, p in zip(units, timing.phones)):
        problems.append("phone names differ from the phonemes")
    for kind, spans, strict in (("phone", timing.phones, False), ("word", timing.words, True)):
        prev: tuple[float, float] | None = None
        for i, (name, start, end) in enumerate(spans):
            if start < -tol or end > duration + tol:
                problems.append(f"{kind} {i} {name!r} [{start}, {end}] outside the audio [0, {duration:.4f}]")
            if end < start or (strict and end <= start):
                problems.append(f"{kind} {i} {name!r} has start {start} >= end {end}")
            if prev is not None and (start, end) != prev and start < prev[1] - tol:
                problems.append(f"{kind} {i} {name!r} starts at {start}, before the previous one ends ({prev[1]})")
            prev = (start, end)
    if not timing.words:
        problems.append("no words")
    else:
        for name, start, end in timing.phones:
            if end - start > tol and is_speech(name) and not any(a - tol <= start and end <= b + tol
                                                                  for _, a, b in timing.words):
                problems.append(f"speech phone {name!r} [{start}, {end}] is outside every word")
                break
    return problems


_SILENT = frozenset({"pau", "sil", "h#", "#", "_", "ˈ", "ˌ"})


def is_speech(unit: str) -> bool:
    """False for spaces, punctuation, stress marks and pauses: units that carry no word's sound."""
    if unit in _SILENT or not unit.strip():
        return False
    return not all(unicodedata.category(c)[0] in "PZ" for c in unit)


def is_separator(unit: str) -> bool:
    """Spaces and punctuation: what separates words in an IPA string."""
    return not unit.strip() or all(unicodedata.category(c)[0] == "P" for c in unit)


text_words = spoken_words  # the words of a text as spoken: one rule for the corpus timing and the inline tags
STRESS = frozenset("ˈˌ")  # espeak-ng's stress marks: they start a syllable and take no time


def align_words(units: Sequence[Hashable], word_units: Sequence[Sequence[Hashable]],
                is_boundary: Callable[[Hashable], bool], is_ignored: Callable[[Hashable], bool] = lambda u: False,
                ) -> list[tuple[int, int]]:
    """Each word's half-open span [a, b) of ``units`` (the utterance as the voice read it), given each word's
    units as read on its own.

    1. Match: the utterance and the concatenated words are matched with difflib's SequenceMatcher over their units,
       boundary units (spaces, punctuation, pauses) and ignored units (stress marks) left out, so a word read a
       little differently in context (a reduced vowel, "of the" merged into one IPA word) still finds its units.
       A word starts at its first matched unit and ends at its last.
    2. Unmatched words (espeak-ng reads "a" alone as the letter name, "eɪ", but as "ɐ" in a sentence, and "of a"
       as "ʌvɐ"): the unmatched units between the matched neighbours, cut at the boundaries among them, make
       pieces; when there are as many pieces as unmatched words (or else as many whole runs, the pieces between two
       boundaries), they take one each. When those units hold no
       boundary (a phone string without word separators, or one IPA word) and at least one unit per word, they
       are shared out in order in equal parts. Otherwise the unmatched words share one span over those units; with
       none at all they join the next matched word (the last ones the previous) and that group shares one span.
    3. Edges: the speech before the first word and after the last one belongs to them; in a gap between two words
       the units before its first boundary belong to the word before, those after its last boundary to the word
       after, and whole runs in between to the word after if it starts with unmatched words, else to the word
       before; with no boundary in the gap (one IPA word for two text words) it is cut before its last ignored
       unit (a stress mark starts a syllable), or else in half.

    Spans are in order, do not overlap, and together cover every non-boundary unit.
    """
    n = len(word_units)
    runs = _runs([not is_boundary(u) for u in units])
    if not n:
        return []
    if not runs:
        return [(0, 0)] * n
    keep = [i for i, u in enumerate(units) if not is_boundary(u) and not is_ignored(u)]
    owner: list[int] = []
    flat: list[Hashable] = []
    for w, wu in enumerate(word_units):
        for u in wu:
            if not is_boundary(u) and not is_ignored(u):
                flat.append(u)
                owner.append(w)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    matcher = SequenceMatcher(None, [units[i] for i in keep], flat, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for k in range(size):
            w, pos = owner[b + k], keep[a + k]
            first.setdefault(w, pos)
            last[w] = pos
    if not first:  # nothing matched: one group over all the speech
        return [(runs[0][0], runs[-1][1])] * n
    # 2. Unmatched words between matched neighbours p and q take the whole runs between them, one each.
    w = 0
    while w < n:
        if w in first:
            w += 1
            continue
        q = w
        while q < n and q not in first:
            q += 1
        gap_lo = last[w - 1] + 1 if w > 0 else 0
        gap_hi = first[q] if q < n else len(units)
        count = q - w
        bounds = [i for i in range(gap_lo, gap_hi) if is_boundary(units[i])]
        sounds = [i for i in range(gap_lo, gap_hi) if not is_boundary(units[i]) and not is_ignored(units[i])]
        pieces: list[list[int]] = []
        if bounds:  # the gap's speech cut at its separators: the end of p's run, whole runs, the start of q's
            edges = [gap_lo - 1, *bounds, gap_hi]
            cut = [[i for i in sounds if a < i < b] for a, b in zip(edges, edges[1:])]
            pieces = [p for p in cut if p]
            if len(pieces) != count:  # the ends of the neighbours' runs may be their own reductions: whole runs
                pieces = [p for p in cut[1:-1] if p]
        elif 0 < w and q < n and len(sounds) >= count:  # no separator (a phone string, one IPA word): equal shares
            pieces = [sounds[k * len(sounds) // count:(k + 1) * len(sounds) // count] for k in range(count)]
        if len(pieces) == count:
            for k, piece in enumerate(pieces):
                first[w + k], last[w + k] = piece[0], piece[-1]
        elif sounds:  # the unclaimed speech between the neighbours, shared by the words that cannot be told apart
            for k in range(count):
                first[w + k], last[w + k] = sounds[0], sounds[-1]
        w = q
    groups: list[list[int]] = []
    pending: list[int] = []
    for w in range(n):
        pending.append(w)
        if w in first:
            if groups and (first[w], last[w]) == (first[groups[-1][-1]], last[groups[-1][-1]]):
                groups[-1].extend(pending)  # words given one shared span above stay one group
            else:
                groups.append(pending)
            pending = []
    groups[-1].extend(pending)
    lo = [min(first[w] for w in g if w in first) for g in groups]
    hi = [max(last[w] for w in g if w in last) + 1 for g in groups]
    starts, ends = list(lo), list(hi)
    starts[0], ends[-1] = min(lo[0], runs[0][0]), max(hi[-1], runs[-1][1])
    for g in range(1, len(groups)):
        bounds = [i for i in range(hi[g - 1], lo[g]) if is_boundary(units[i])]
        if not bounds:
            ignored = [i for i in range(hi[g - 1], lo[g]) if is_ignored(units[i])]
            cut = ignored[-1] if ignored else (hi[g - 1] + lo[g] + 1) // 2
            ends[g - 1], starts[g] = cut, cut
            continue
        ends[g - 1], starts[g] = bounds[0], bounds[-1] + 1
        middle = [(a, b) for a, b in runs if bounds[0] < a and b <= bounds[-1]]
        if middle and groups[g][0] not in first:
            starts[g] = middle[0][0]
        elif middle:
            ends[g - 1] = middle[-1][1]
    spans = [(0, 0)] * n
    for g, words in enumerate(groups):
        for w in words:
            spans[w] = (starts[g], ends[g])
    return spans


def _runs(flags: Sequence[bool]) -> list[tuple[int, int]]:
    """Half-open index ranges of the maximal runs of True."""
    out: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i))
            start = None
    return out


def word_times(words: Sequence[str], spans: Sequence[tuple[int, int]], phones: Sequence[Span]) -> tuple[Span, ...]:
    """Words with their unit spans -> (word, start_s, end_s) from the phones' times."""
    out = []
    for word, (a, b) in zip(words, spans, strict=True):
        b = max(b, a + 1)
        out.append((word, phones[a][1], phones[min(b, len(phones)) - 1][2]))
    return tuple(out)


def ipa_from_words(timing: Timing, ipa: str, word_ipa: Sequence[str]) -> Timing:
    """``timing`` with word times (any alphabet) -> IPA timing of ``ipa``, the espeak-ng reading of the same text.

    ``word_ipa`` is each of ``timing.words`` read on its own (their IPA). Each word's span of ``ipa`` characters
    (:func:`align_words`) shares the word's time span, its speech characters in equal parts in order, stress marks
    and other silent characters at no length; separators between words sit at the end of the word before, those
    before the first word at its start. Words that ``align_words`` could not tell apart share their joint span.
    """
    if len(word_ipa) != len(timing.words):
        raise DuetError(f"{len(word_ipa)} word readings for {len(timing.words)} timed words")
    if not timing.words:
        raise DuetError("no timed words to lay the IPA out by")
    units = list(ipa)
    spans = align_words(units, word_ipa, is_boundary=is_separator, is_ignored=lambda ch: ch in STRESS)
    joint: dict[tuple[int, int], tuple[float, float]] = {}
    for (a, b), (_, start, end) in zip(spans, timing.words):
        lo, hi = joint.get((a, b), (start, end))
        joint[(a, b)] = (min(lo, start), max(hi, end))
    times: list[tuple[float, float] | None] = [None] * len(units)
    for (a, b), (start, end) in joint.items():
        speech = {i for i in range(a, b) if is_speech(units[i])}
        n, k = max(1, len(speech)), 0
        for i in range(a, b):
            t = start + (end - start) * k / n
            if i in speech:
                k += 1
                times[i] = (t, start + (end - start) * k / n)
            else:
                times[i] = (t, t)
    now = timing.words[0][1]  # before the first word: its start
    phones = []
    for unit, span in zip(units, times):
        if span is None:  # a separator (or unread character) between words: at the end of the word before
            span = (now, now)
        phones.append((unit, *span))
        now = span[1]
    return Timing(ipa, tuple(phones), timing.words, IPA)
