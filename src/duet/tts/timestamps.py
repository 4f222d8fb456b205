"""Word and phone timestamps from the model's own alignment: where each word of a piece lies in its audio.

A model with aligned text input (``duet.nn.aligned``: Gepard ``--aligned``, an aligned Luna or Luna Realtime) lays
its wrapped text over its frames by per-token durations before it generates, and every frame it generates reads the
token that layout gives it. Those durations are the alignment the frames followed, not an estimate made afterwards:
the runtime hands them out with every step of the request (``StepOutput.layout``, a :class:`TextLayout`):

- Gepard: the duration predictor's frames per token at the request's speed (``GepardModel.prefill``), frame f of
  the output laid out at audio position f;
- Luna: the predictor's durations scaled to the grid's T frames (``LunaParts.layout``; a voice prompt's transcript
  laid over the prompt's frames, before the first generated frame);
- Luna Realtime: the predictor's durations as they are; the end head decides where the audio ends.

Token k spans frames [sum of d before k, sum through k). :func:`piece_words` turns that into seconds of the piece's
audio (a frame is ``1 / frame_rate`` s of audio: the codecs decode ``samples_per_frame`` samples per frame, in
order) and cuts it into words and phones (``duet.tts.word_map``):

- a token's span is shared by its characters in proportion to their typical lengths (:func:`character_weights`;
  tokens cut from the same characters, a byte-level BPE's halves of one IPA letter, share the span of their
  characters), the reverse of how the corpus timing gave each token the span of its characters
  (``duet.data.token_timing``): a word-initial token " ð" keeps its leading space's share out of the word;
- a word runs from its first to its last character that is not a separator (space, punctuation), stress marks
  included; a phone is one IPA letter with its stress mark (before it) and its length or diacritic marks (after it),
  as the corpus's Piper timing counts phones. A model reading text rather than phonemes reports no phones;
- times are clipped to the audio the piece has: a model that stops before its layout ends (Gepard's stop head,
  Realtime's end head) leaves the words it did not reach at the end of its audio, with no length.

Speed needs no correction here: it scales the durations the model lays out (and so its frames) before generation.
A speed slower or faster than a model follows is made at the nearest one it follows and the audio time-stretched by
the rest (``duet.tts.speaker``): the words are then :func:`scaled` by the same factor. Sentence joins are the Speaker's (``duet.tts.speaker``): it shifts each piece's words by where its audio starts,
after the gaps it inserts.

Shape legend: S wrapped text tokens, W words.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from duet.data.timing import STRESS, is_separator
from duet.tts.word_map import WordMap, word_map

# Relative lengths of surface characters, from the corpus timing the shipped models trained on (Piper joe, 3,245
# utterances): a phone, a stress mark or a space between words lasts about 46 ms whatever it is (45.7 ms for a
# space, 41-59 ms for each phone); punctuation is a pause (',' 127 ms, ';' 120, '.' 83) and so is a space after it
# (132 ms): 2.8 of the others.
PAUSE_WEIGHT = 2.8
PAUSES = frozenset(".,;:!?\u2026")  # the punctuation a phoneme tokenizer's IPA keeps (duet.text.phonemes)


@dataclass(frozen=True)
class PhoneTiming:
    phone: str  # IPA, one letter with its marks
    start: float  # seconds of the audio
    end: float


@dataclass(frozen=True)
class WordTiming:
    word: str  # as written where the normaliser maps words one-to-one, else the spoken word (duet.tts.word_map)
    start: float  # seconds of the audio
    end: float
    phones: tuple[PhoneTiming, ...] = ()  # in order, inside [start, end]; () for a model that reads text


@dataclass(frozen=True, eq=False)
class TextLayout:
    """How a request's text lies over its frames, as the model read it while generating."""

    text: str  # the text the ids encode (a Luna voice prompt's transcript, then the request's text)
    ids: tuple[int, ...]  # (S,) wrapped text ids, service tokens included
    durations: tuple[float, ...]  # (S,) frames per wrapped token, continuous
    tokenizer: Any = field(repr=False)  # what made ``ids`` from ``text`` (with ``language``)
    language: str = "en"
    offset: float = 0.0  # frames of the layout before the first generated frame (a voice prompt's)
    prompt_tokens: int = 0  # leading wrapped tokens laid over the prompt: its words are not reported


def shifted(words: Sequence[WordTiming], seconds: float) -> tuple[WordTiming, ...]:
    """``words`` moved ``seconds`` later (a piece's words placed in the whole utterance)."""
    if not seconds:
        return tuple(words)
    return tuple(replace(w, start=w.start + seconds, end=w.end + seconds,
                         phones=tuple(replace(p, start=p.start + seconds, end=p.end + seconds) for p in w.phones))
                 for w in words)


def scaled(words: Sequence[WordTiming], factor: float) -> tuple[WordTiming, ...]:
    """``words`` with every time multiplied by ``factor`` (a piece's audio time-stretched that many times,
    ``duet.tts.wsola``)."""
    if factor == 1.0:
        return tuple(words)
    return tuple(replace(w, start=w.start * factor, end=w.end * factor,
                         phones=tuple(replace(p, start=p.start * factor, end=p.end * factor) for p in w.phones))
                 for w in words)


def clipped(words: Sequence[WordTiming], seconds: float) -> tuple[WordTiming, ...]:
    """``words`` with every time past ``seconds`` moved back to it: what :func:`piece_words` gives for audio of
    that length, from the words of the whole layout (``frames`` infinite)."""
    def clip(t: float) -> float:
        return min(t, seconds)

    return tuple(replace(w, start=clip(w.start), end=clip(w.end),
                         phones=tuple(replace(p, start=clip(p.start), end=clip(p.end)) for p in w.phones))
                 for w in words)


def piece_words(layout: TextLayout, frames: float, frame_rate: float) -> tuple[WordTiming, ...]:
    """The words of one piece, in seconds from the start of its audio, which holds ``frames`` frames (``math.inf``:
    the whole layout, unclipped)."""
    wmap = word_map(layout.text, layout.tokenizer, layout.language)
    if wmap is None:
        return ()
    times, first = character_frames(wmap, layout.ids, layout.durations, layout.offset)
    owner = _token_of_character(wmap)

    def spoken_here(chars: list[int]) -> bool:  # not all in the voice prompt's transcript
        return max(first + owner[i] for i in chars) >= layout.prompt_tokens

    return timed_words(wmap, times, frames, frame_rate, spoken_here)


def timed_words(wmap: WordMap, times: Sequence[tuple[float, float]], frames: float, frame_rate: float,
                keep: Callable[[list[int]], bool] = lambda chars: True) -> tuple[WordTiming, ...]:
    """Words (and phones, for IPA) from each surface character's (start, end) in frames, clipped to ``frames``;
    a word runs from its first to its last character that is not a separator. ``keep`` says, from a word's
    characters, whether to report it."""

    def seconds(t: float) -> float:
        return min(max(t, 0.0), float(frames)) / frame_rate

    out = []
    for word, (a, b) in zip(wmap.words, wmap.spans):
        chars = [i for i in range(a, b) if not is_separator(wmap.surface[i])]
        if not chars or not keep(chars):
            continue
        phones = ()
        if wmap.phonemes:
            phones = tuple(PhoneTiming(text, seconds(times[lo][0]), seconds(times[hi][1]))
                           for text, lo, hi in phone_groups(wmap.surface, chars))
        out.append(WordTiming(word, seconds(times[chars[0]][0]), seconds(times[chars[-1]][1]), phones))
    return tuple(out)


def phone_groups(surface: str, chars: Sequence[int]) -> list[tuple[str, int, int]]:
    """A word's characters (indices into ``surface``, in order) -> phones (text, first index, last index): a stress
    mark joins the letter after it, a modifier letter (length ``ː``) or combining mark joins the letter before."""
    groups: list[list[int]] = []
    lead: list[int] = []
    for i in chars:
        ch = surface[i]
        if ch in STRESS:
            lead.append(i)
        elif groups and not lead and unicodedata.category(ch) in ("Lm", "Mn", "Sk"):
            groups[-1].append(i)
        else:
            groups.append([*lead, i])
            lead = []
    if lead:  # a stress mark with no letter after it
        if groups:
            groups[-1].extend(lead)
        else:
            groups.append(lead)
    return [("".join(surface[i] for i in g), g[0], g[-1]) for g in groups]


def character_frames(wmap: WordMap, ids: Sequence[int], durations: Sequence[float],
                     offset: float = 0.0) -> tuple[list[tuple[float, float]], int]:
    """Wrapped ids (S,) laid out by ``durations`` (S,) -> each surface character's (start, end) in frames of the
    generated audio (``offset`` frames of the layout come before it), and where the text's own ids begin."""
    first = text_start(ids, wmap.ids)
    ends, total = [], 0.0  # ends[k]: where wrapped token k ends, in frames of the generated audio
    for d in durations:
        total += d
        ends.append(total - offset)
    bounds = [(ends[first + j - 1], ends[first + j]) for j in range(len(wmap.offsets))]
    return character_times(wmap.surface, wmap.offsets, bounds, ends[first - 1]), first


def text_start(wrapped: Sequence[int], text_ids: Sequence[int]) -> int:
    """Where the text's own ids begin in the wrapped ids (after SOT and any instruction token)."""
    n = len(text_ids)
    for k in range(1, len(wrapped) - n + 1):
        if tuple(wrapped[k:k + n]) == tuple(text_ids):
            return k
    raise RuntimeError("the text layout's ids are not the tokenizer's ids of its text")  # a runtime bug


def _token_of_character(wmap: WordMap) -> list[int]:
    """The text token each surface character belongs to (the last one whose offsets start at or before it)."""
    owner = [0] * len(wmap.surface)
    for j, (a, b) in enumerate(wmap.offsets):
        for i in range(a, min(b, len(owner))):
            owner[i] = j
    return owner


def character_weights(surface: str) -> list[float]:
    """Each character's typical length, relative (1 for a phone or a space; ``PAUSE_WEIGHT`` for a pause: a
    punctuation mark of ``PAUSES`` and a space after one)."""
    out = []
    for i, ch in enumerate(surface):
        pause = ch in PAUSES or (not ch.strip() and i > 0 and surface[i - 1] in PAUSES)
        out.append(PAUSE_WEIGHT if pause else 1.0)
    return out


def character_times(surface: str, units: Sequence[tuple[int, int]], bounds: Sequence[tuple[float, float]],
                    start: float) -> list[tuple[float, float]]:
    """Units of ``surface`` in order (tokens: their characters [a, b)) with their (start, end) -> each character's
    (start, end): its unit's span shared in proportion to :func:`character_weights` (units of the same characters
    joined). A character no unit covers sits, with no length, where the one before it ends (the first at
    ``start``)."""
    n = len(surface)
    weights = character_weights(surface)
    times: list[tuple[float, float] | None] = [None] * n
    j = 0
    while j < len(units):
        a, b = units[j]
        k = j + 1
        while k < len(units) and tuple(units[k]) == (a, b):
            k += 1
        begin, end = bounds[j][0], bounds[k - 1][1]  # units j..k-1 together
        a, b = max(0, a), min(b, n)
        total, done = sum(weights[a:b]), 0.0
        for i in range(a, b):
            t = begin + (end - begin) * done / total
            done += weights[i]
            times[i] = (t, begin + (end - begin) * done / total)
        j = k
    out, now = [], start
    for span in times:
        span = (now, now) if span is None else span
        out.append(span)
        now = span[1]
    return out
