"""How close a model's reported word timings are to a forced alignment of the audio it made.

The model reports where its words lie from its own alignment (``duet.tts.timestamps``). The reference here is
duet's forced aligner (``duet.data.align``: the monotonic alignment search under a flat-start Gaussian model that
EM fits to the utterances themselves), run on the generated audio and its text alone, so it knows nothing of the
durations the model used.

Its units are the phones of the text's surface (the IPA a phoneme tokenizer reads; :func:`phone_units`: a letter
with its stress and length marks, a space, a pause), not the model's BPE tokens: a token such as " b" after a
comma holds a pause and a phone, which one Gaussian cannot tell apart, and a phone type recurs far more often than
a token type, so a few hundred utterances fit the emissions. The wrapped sequence is [silence, units..., silence],
one emission type per distinct unit and one for the silence at either end. Word times come from the unit
durations by the model's own rule (``duet.tts.timestamps.character_times``, ``timed_words``: a word from its first
to its last spoken character).

Features are log-mels at ``subdivide`` times the codec's frame rate (``duet.data.align_corpus.frame_features``;
4: a hop of 256 samples, 11.6 ms at 22.05 kHz), finer than the model's own frame (46 ms), so the reference is not
quantised to the frames the model's timings are counted in, and every unit can have its one frame even at twice
the speed. EM starts from the frames spread over the units by their characters' typical lengths
(``duet.tts.timestamps.character_weights``; the silences one frame each). More utterances fit the emissions
better: align every utterance of a run together. Slow speech is where it errs most (against Piper's exact timing:
a median of 46-58 ms at half pace); ``duet.eval.trained_aligner`` learns the phones from that timing instead.

Shape legend: S units with the two silences, T aligner frames, D mel bins.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from duet.data.align import AlignerConfig, AlignItem, fit_alignments
from duet.data.align_corpus import frame_features
from duet.data.timing import STRESS, is_separator
from duet.data.token_rows import spread_frames
from duet.errors import DuetError
from duet.text.tokens import SERVICE_TOKEN_RE
from duet.tts.timestamps import WordTiming, character_times, character_weights, timed_words
from duet.tts.word_map import WordMap, word_map

SILENCE = ""  # the type of the silence before and after the units


@dataclass(frozen=True)
class Spoken:
    """One piece a model spoke, alone: its text, audio and the words it reported."""

    text: str
    audio: np.ndarray  # (N,) float32, the piece's audio only
    sample_rate: int
    words: tuple[WordTiming, ...]  # the model's, in seconds of ``audio``


def phone_units(surface: str) -> list[tuple[int, int]]:
    """``surface`` cut into the aligner's units, character ranges [a, b) in order covering it: a letter with the
    stress marks before it and the modifier letters or combining marks after it, a run of separators (a space, or
    punctuation and its space: a pause), or a service token."""
    service = {m.start(): m.end() for m in SERVICE_TOKEN_RE.finditer(surface)}
    units, i, n = [], 0, len(surface)
    while i < n:
        if i in service:
            j = service[i]
        elif is_separator(surface[i]):
            j = i + 1
            while j < n and is_separator(surface[j]) and j not in service:
                j += 1
        else:
            j = i
            while j < n and surface[j] in STRESS:
                j += 1
            if j < n and j not in service and not is_separator(surface[j]):
                j += 1
                while j < n and surface[j] not in STRESS and unicodedata.category(surface[j]) in ("Lm", "Mn", "Sk"):
                    j += 1
            j = max(j, i + 1)
        units.append((i, j))
        i = j
    return units


def unit_type(text: str) -> str:
    """What a unit sounds like: its letters, its punctuation (a pause), or a space."""
    stripped = "".join(text.split())
    return stripped if stripped else " "


def forced_words(items: Sequence[Spoken], tokenizer: Any, frame_rate: float, subdivide: int = 4,
                 config: AlignerConfig = AlignerConfig(), language: str = "en") -> list[tuple[WordTiming, ...]]:
    """The forced aligner's words of each item (all aligned in one EM fit), in seconds of its audio.
    ``frame_rate`` is the codec's; the aligner runs at ``subdivide`` times it."""
    rate = frame_rate * subdivide
    types: dict[str, int] = {SILENCE: 0}
    prepared = []
    for it in items:
        wmap = word_map(it.text, tokenizer, language)
        if wmap is None:
            raise DuetError("the forced aligner needs a tokenizer with character offsets")
        units = phone_units(wmap.surface)
        kinds = [SILENCE, *(unit_type(wmap.surface[a:b]) for a, b in units), SILENCE]
        ids = np.array([types.setdefault(k, len(types)) for k in kinds])  # (S,)
        hop = it.sample_rate / rate
        frames = max(int(np.ceil(len(it.audio) / hop)), len(ids))
        feats = frame_features(it.audio, it.sample_rate, rate, frames, config)  # (T, D)
        lengths = character_weights(wmap.surface)
        weights = [round(10 * sum(lengths[a:b])) for a, b in units]  # spread_frames takes integers
        init = np.array([1, *spread_frames(weights, frames - 2), 1], dtype=np.int64)
        prepared.append((wmap, units, AlignItem(str(len(prepared)), ids, feats, init)))
    result = fit_alignments([item for _, _, item in prepared], len(types), config)
    return [unit_words(wmap, units, result.durations[item.id], rate) for wmap, units, item in prepared]


def unit_words(wmap: WordMap, units: Sequence[tuple[int, int]], durations: np.ndarray,
               rate: float) -> tuple[WordTiming, ...]:
    """Aligner frames (S,) of the wrapped units [silence, ``units``..., silence] -> the words, in seconds (``rate``
    aligner frames a second), by the model's own rule (a word from its first to its last spoken character)."""
    ends = np.cumsum(durations)  # (S,) aligner frames
    bounds = [(float(ends[j]), float(ends[j + 1])) for j in range(len(units))]  # unit j is wrapped j + 1
    times = character_times(wmap.surface, units, bounds, float(ends[0]))
    return timed_words(wmap, times, float(ends[-1]), rate)


def boundary_errors(reported: Sequence[WordTiming], forced: Sequence[WordTiming]) -> tuple[list[float], list[float]]:
    """|reported - forced| of each word's start, and of each word's end, in seconds (the same words, in order)."""
    if [w.word for w in reported] != [w.word for w in forced]:
        raise DuetError("the reported and the forced words differ")
    return ([abs(a.start - b.start) for a, b in zip(reported, forced)],
            [abs(a.end - b.end) for a, b in zip(reported, forced)])
