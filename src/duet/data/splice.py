"""Splice non-verbal events into an utterance at word boundaries, using its timing sidecar, and time them.

An event tagged after the k-th spoken word (``duet.text.tags.split_tags``) goes into the gap between word k and
word k + 1 (k = 0: before the first word, k = n: after the last). Inside that gap the cut is the phone boundary
(a unit edge of the sidecar, so no phone is cut in two) with the least energy in the 10 ms around it. At the cut
the audio opens for ``PAD`` s of silence, the sound, ``PAD`` s of silence; 5 ms fades on both sides of the cut
keep it click-free. The sound's level is set against the speech's RMS (``nonverbal_sounds.RELATIVE_DB``).

The timing is rewritten to match, so a sidecar keeps describing its audio: what follows the cut moves later by the
block's length; the event becomes a word of its own (its tag's word, ``laughter`` for ``[laughter]``, as
``text_words`` reads the tagged text) and phoneme units of its own spanning the sound: the tag's characters for
an IPA sidecar (with a space on either side where needed, so a phoneme tokenizer sees the service token between
words, spread evenly over the sound), one unit named by the tag for a synthesiser's phone set. A corpus reads the
events back from those units (:func:`timed_events`).

Shape legend: S samples.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from duet.data.nonverbal_sounds import RELATIVE_DB, event_sound
from duet.data.timing import IPA, Span, Timing
from duet.errors import DuetError
from duet.text.tokens import NONVERBALS, nonverbal_token

PAD = 0.06  # s of silence on each side of an event
FADE = 0.005  # s
_TAG_RE = re.compile("|".join(re.escape(nonverbal_token(n)) for n in NONVERBALS))


@dataclass(frozen=True)
class Spliced:
    audio: np.ndarray  # (S,) float32
    timing: Timing
    events: tuple[Span, ...]  # (event name, start_s, end_s), in time order


def speech_rms(audio: np.ndarray, sample_rate: int, timing: Timing) -> float:
    """RMS of the samples inside the words (the whole audio when there are none)."""
    mask = np.zeros(len(audio), dtype=bool)
    for _, a, b in timing.words:
        mask[int(a * sample_rate) : int(b * sample_rate)] = True
    x = audio[mask] if mask.any() else audio
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if x.size else 0.0


def _cut_time(audio: np.ndarray, sr: int, timing: Timing, k: int) -> float:
    """Where boundary k (words before it) opens: the quietest phone edge in the gap between words k and k + 1."""
    words, duration = timing.words, len(audio) / sr
    lo = words[k - 1][2] if k > 0 else 0.0
    hi = words[k][1] if k < len(words) else duration
    lo, hi = min(lo, hi), max(lo, hi)
    edges = sorted({t for _, a, b in timing.phones for t in (a, b)} | {0.0, duration})
    inside = [t for t in edges if lo - 1e-6 <= t <= hi + 1e-6]
    if not inside:  # word edges off the phone grid (a synthesiser's token times): the nearest phone edge
        inside = [min(edges, key=lambda t: abs(t - (lo + hi) / 2))]
    half = max(1, int(0.005 * sr))

    def energy(t: float) -> float:
        i = int(round(t * sr))
        x = audio[max(0, i - half) : i + half]
        return float(np.mean(np.square(x, dtype=np.float64))) if x.size else 0.0

    return min(inside, key=lambda t: (energy(t), abs(t - (lo + hi) / 2)))


def _shift(spans: Sequence[Span], start: int, by: float, cut: float) -> list[Span]:
    """Spans from index ``start`` on moved by ``by``; those before it end at ``cut`` at the latest."""
    before = [(u, min(a, cut), min(b, cut)) for u, a, b in spans[:start]]
    return before + [(u, a + by, b + by) for u, a, b in spans[start:]]


def splice_event(audio: np.ndarray, sample_rate: int, timing: Timing, name: str, k: int, level: float,
                 seed: int = 0) -> tuple[np.ndarray, Timing, Span]:
    """One event after spoken word k of ``timing`` (whose words are all spoken ones) -> (audio, timing, span)."""
    sr = sample_rate
    if not 0 <= k <= len(timing.words):
        raise DuetError(f"event {name!r} after word {k}: the timing has {len(timing.words)} words")
    edge = _cut_time(audio, sr, timing, k)  # a phone edge of the sidecar
    p = next((j for j, (_, _, b) in enumerate(timing.phones) if b > edge + 1e-6), len(timing.phones))
    i = int(round(edge * sr))
    cut = i / sr  # on the sample grid: within half a sample of the edge
    sound = event_sound(name, sr, seed) * np.float32(level * 10 ** (RELATIVE_DB[name] / 20))
    pad = np.zeros(int(round(PAD * sr)), dtype=np.float32)
    head, tail = audio[:i].astype(np.float32).copy(), audio[i:].astype(np.float32).copy()
    fade = min(int(FADE * sr), len(head), len(tail))
    if fade:
        ramp = np.linspace(1.0, 0.0, fade, dtype=np.float32)
        head[len(head) - fade :] *= ramp
        tail[:fade] *= ramp[::-1]
    out = np.concatenate([head, pad, sound, pad, tail])
    block = (2 * len(pad) + len(sound)) / sr
    start, end = cut + len(pad) / sr, cut + (len(pad) + len(sound)) / sr

    phones = _shift(timing.phones, p, block, cut)
    tag = nonverbal_token(name)
    if timing.alphabet == IPA:
        units = [u for u, _, _ in phones]
        new: list[Span] = []
        if p > 0 and units[p - 1] != " ":
            new.append((" ", cut, start))
        step = (end - start) / len(tag)
        new += [(ch, start + j * step, start + (j + 1) * step) for j, ch in enumerate(tag)]
        if p < len(units) and units[p] != " ":
            new.append((" ", end, cut + block))
        phones[p:p] = new
        phonemes = "".join(u for u, _, _ in phones)
    else:
        phones[p:p] = [(tag, start, end)]
        phonemes = " ".join(u for u, _, _ in phones)
    words = _shift(timing.words, k, block, cut)
    words.insert(k, (name, start, end))
    return out, Timing(phonemes, tuple(phones), tuple(words), timing.alphabet), (name, start, end)


def splice_events(audio: np.ndarray, sample_rate: int, timing: Timing, events: Sequence[tuple[str, int]],
                  seed: int = 0) -> Spliced:
    """Every (event name, spoken words before it) of one utterance, at most one per boundary."""
    ks = [k for _, k in events]
    if len(set(ks)) != len(ks):
        raise DuetError(f"two events at one word boundary: {list(events)}")
    level = speech_rms(audio, sample_rate, timing)
    # Last boundary first: the words before a boundary never move, so each k still indexes the original words.
    for j, (name, k) in sorted(enumerate(events), key=lambda e: -e[1][1]):
        audio, timing, _ = splice_event(audio, sample_rate, timing, name, k, level, seed=seed * 1000 + j)
    return Spliced(audio.astype(np.float32), timing, timed_events(timing))


def timed_events(timing: Timing) -> tuple[Span, ...]:
    """The events a spliced sidecar holds: (event name, start_s, end_s) of each tag among its units."""
    out: list[Span] = []
    if timing.alphabet == IPA:
        for m in _TAG_RE.finditer(timing.phonemes):
            out.append((m.group(0)[1:-1], timing.phones[m.start()][1], timing.phones[m.end() - 1][2]))
    else:
        out = [(u[1:-1], a, b) for u, a, b in timing.phones if _TAG_RE.fullmatch(u)]
    return tuple(out)
