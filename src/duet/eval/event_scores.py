"""Scores of non-verbal events: precision / recall / F1 of detected events against the tagged ones, and PCER.

Matching (the event-based scoring of sound event detection, Mesaros et al. 2016, onset collar only): a detection
matches a reference event of the same name whose onset is within ``tolerance`` seconds of its own; each event is
matched at most once, pairs taken greedily from the closest onsets. TP = matched pairs, precision = TP / detections,
recall = TP / references (1 by convention for an empty side), F1 their harmonic mean. Summed over utterances before
the ratios are taken (micro-averaged), as in the report's table.

PCER (paralinguistic CER, Luna-TTS §6.2) is the CER of a transcript in which each event is one character: the
reference text with its tags against a hypothesis made of the ASR words and the detected events merged by time
(:func:`tagged_transcript`). Tags become private-use characters, so CER's normalisation keeps them whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from duet.metrics.wer import ErrorRate, char_error
from duet.text.tags import canonical_tags
from duet.text.tokens import NONVERBALS, nonverbal_token

Event = tuple[str, float, float]  # (event name, start_s, end_s)
_PRIVATE = {nonverbal_token(n): chr(0xE000 + i) for i, n in enumerate(NONVERBALS)}  # one character per event


@dataclass(frozen=True)
class EventCounts:
    true_positives: int
    detections: int
    references: int

    @property
    def precision(self) -> float:
        return self.true_positives / self.detections if self.detections else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.references if self.references else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __add__(self, other: EventCounts) -> EventCounts:
        return EventCounts(self.true_positives + other.true_positives, self.detections + other.detections,
                           self.references + other.references)


def match_events(reference: Sequence[Event], detected: Sequence[Event], tolerance: float = 0.25,
                 same_name: bool = True) -> EventCounts:
    """Counts of one utterance (``same_name=False`` scores where events are, whatever they are called)."""
    pairs = sorted(
        (abs(d[1] - r[1]), i, j)
        for i, r in enumerate(reference)
        for j, d in enumerate(detected)
        if abs(d[1] - r[1]) <= tolerance and (not same_name or d[0] == r[0])
    )
    used_r: set[int] = set()
    used_d: set[int] = set()
    for _, i, j in pairs:
        if i not in used_r and j not in used_d:
            used_r.add(i)
            used_d.add(j)
    return EventCounts(len(used_r), len(detected), len(reference))


def total(counts: Iterable[EventCounts]) -> EventCounts:
    out = EventCounts(0, 0, 0)
    for c in counts:
        out = out + c
    return out


def tagged_transcript(words: Sequence[tuple[str, float, float]], events: Sequence[Event]) -> str:
    """ASR words with their times and events -> one text, each event's tag placed by its start time."""
    items = [(a, 0, w) for w, a, _ in words] + [(a, 1, nonverbal_token(n)) for n, a, _ in events]
    return " ".join(text for _, _, text in sorted(items, key=lambda x: (x[0], x[1])))


def _one_char_tags(text: str) -> str:
    text = canonical_tags(text)
    for tag, ch in _PRIVATE.items():
        text = text.replace(tag, f" {ch} ")
    return text


def paralinguistic_cer(reference: str, hypothesis: str) -> ErrorRate:
    """CER with every event tag one character (``duet.metrics.wer.char_error`` otherwise)."""
    return char_error(_one_char_tags(reference), _one_char_tags(hypothesis))
