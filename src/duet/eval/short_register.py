"""Short-register failure rates (Gepard §3.3, DESIGN.md §A): runaways, late stops and skipped words.

1-2 word inputs make autoregressive TTS fail in three ways; each gets a per-utterance flag and a rate over a set:

- **runaway**: the model never decided to stop and hit its frame bound (``Synthesis.ended == "bound"``). Known only
  for systems that report how they ended; others get None and drop out of the rate.
- **late stop**: the audio lasts more than ``k`` times the expected duration (default k = 2). Expected duration is
  the ground-truth recording's when the set has one (``gt_wav``); otherwise the prompt's speaking rate applied to
  the target text (prompt seconds per character x target characters, characters of the normalised text without
  spaces). A runaway is usually also a late stop; the two are reported separately because a late stop can end
  by the stop head (a long babble or silence before stopping), which a bound cannot fix.
- **skipped words**: deletions in the ASR alignment of the output against the target text (the ``D`` of WER).
  Reported as the deletion rate (deleted words / reference words) and the share of utterances with at least one.
  Deletions include ASR misses, so read them against ground truth's own rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from duet.errors import DuetError
from duet.metrics.wer import normalize_text

DEFAULT_LATE_FACTOR = 2.0


def text_chars(text: str) -> int:
    """Characters of the normalised text, spaces excluded (what speaking rates are measured in)."""
    return len(normalize_text(text).replace(" ", ""))


def expected_duration(target_text: str, gt_duration_s: float | None = None, prompt_text: str | None = None,
                      prompt_duration_s: float | None = None) -> tuple[float | None, str | None]:
    """(expected seconds, how it was found: "gt" | "prompt-rate"), or (None, None) when nothing tells."""
    if gt_duration_s is not None:
        return gt_duration_s, "gt"
    if prompt_text and prompt_duration_s:
        n_prompt, n_target = text_chars(prompt_text), text_chars(target_text)
        if n_prompt > 0 and n_target > 0:
            return prompt_duration_s * n_target / n_prompt, "prompt-rate"
    return None, None


def is_late_stop(duration_s: float, expected_s: float | None, factor: float = DEFAULT_LATE_FACTOR) -> bool | None:
    """duration > factor x expected; None when the expected duration is unknown."""
    if factor <= 1.0:
        raise DuetError(f"the late-stop factor must exceed 1, got {factor}")
    if expected_s is None:
        return None
    return duration_s > factor * expected_s


def is_runaway(ended: str | None) -> bool | None:
    """True when generation hit its length bound; None when the system does not say how it ended."""
    if ended is None:
        return None
    if ended not in ("stop", "bound"):
        raise DuetError(f"unknown end of generation {ended!r} (expected 'stop' or 'bound')")
    return ended == "bound"


@dataclass(frozen=True)
class Rate:
    """``hits`` of ``count`` utterances for which the flag is known; ``rate`` None when none are."""

    hits: int
    count: int

    @property
    def rate(self) -> float | None:
        return self.hits / self.count if self.count else None


def flag_rate(flags: Sequence[bool | None]) -> Rate:
    known = [f for f in flags if f is not None]
    return Rate(sum(known), len(known))


@dataclass(frozen=True)
class SkippedWords:
    deleted: int  # words deleted, summed over utterances
    reference_words: int
    utterances_with_deletion: int
    utterances: int

    @property
    def deletion_rate(self) -> float | None:
        return self.deleted / self.reference_words if self.reference_words else None

    @property
    def utterance_rate(self) -> float | None:
        return self.utterances_with_deletion / self.utterances if self.utterances else None


def skipped_words(deletions: Sequence[int], reference_words: Sequence[int]) -> SkippedWords:
    """Aggregate per-utterance deletion counts (from :func:`duet.metrics.wer.word_error`)."""
    if len(deletions) != len(reference_words):
        raise DuetError("deletions and reference word counts differ in length")
    return SkippedWords(sum(deletions), sum(reference_words), sum(d > 0 for d in deletions), len(deletions))
