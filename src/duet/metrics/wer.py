"""Word and character error rates, normalised and aggregated the way Seed-TTS-eval does it.

Seed-TTS-eval (``run_wer.py``, the protocol the Gepard and Luna-TTS reports quote) does, per utterance:
1. delete every punctuation mark (ASCII ``string.punctuation`` plus CJK punctuation) except the apostrophe,
   replacing it by nothing (so ``well-known`` becomes ``wellknown`` on both sides);
2. collapse runs of spaces; lowercase English;
3. Chinese is scored character by character (characters joined by spaces, then a word-level edit distance);
and then reports the MEAN of the per-utterance rates, not the corpus-level (pooled) rate. The mean weighs a
3-word utterance with one error (33 %) as much as a 30-word one with one error (3.3 %), so short prompts
dominate; we report the pooled rate beside it, for reference only.

Where we differ, deliberately:
- "punctuation" is every Unicode character of category P* plus ``string.punctuation`` (a superset of the
  ``zhon.hanzi.punctuation`` + ASCII list, without needing ``zhon``);
- the typographic apostrophe (U+2019) becomes ``'`` first, so ``don’t`` and ``don't`` match instead of
  turning into ``dont`` vs ``don't``;
- all text is lowercased (Seed-TTS lowercases English only; it only matters for Latin words inside Chinese);
- CER is the Seed-TTS Chinese recipe applied to any language: characters with whitespace removed.

``normalizer="whisper"`` scores English after Whisper's English text normaliser instead (``EnglishTextNormalizer``
of the ``whisper-normalizer`` package, the eval extra; as Seed-TTS-eval's English WER and other TTS evaluations
with Whisper do): contractions, British spellings, numbers written out or as digits, "Mr." and the like are read the
same on both sides, so a transcript is not counted wrong for spelling what was said another way ("you're" for
"you are", "favor" for "favour", "23" for "twenty three").
"""

from __future__ import annotations

import functools
import string
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import jiwer

from duet.errors import DuetError
from duet.text.tags import without_events

_ASCII_PUNCT = frozenset(string.punctuation) - {"'"}
NORMALIZERS = ("duet", "whisper")  # Seed-TTS-eval's (module docstring), Whisper's English one


@dataclass(frozen=True)
class ErrorRate:
    """Edit-distance counts of one utterance; units are words (WER) or characters (CER)."""

    reference: str  # normalised
    hypothesis: str  # normalised
    substitutions: int
    deletions: int
    insertions: int
    ref_len: int  # reference length in units, > 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def rate(self) -> float:
        """(S + D + I) / N; above 1 when the hypothesis has many insertions."""
        return self.errors / self.ref_len


@dataclass(frozen=True)
class AggregateRate:
    """Seed-TTS-eval's headline number (``mean``) and the corpus-level rate (``pooled``) of a set."""

    mean: float  # mean of per-utterance rates: the number to report
    pooled: float  # sum(errors) / sum(ref_len)
    count: int


def _is_punct(ch: str) -> bool:
    return ch in _ASCII_PUNCT or (ch != "'" and unicodedata.category(ch).startswith("P"))


def normalize_text(text: str, normalizer: str = "duet") -> str:
    """Lowercase, delete punctuation except apostrophes, collapse whitespace to single spaces; inline event tags
    (``[laughter]``, ``[laughs]``: ``duet.text.tags``) are not words and go first. ``normalizer="whisper"``:
    Whisper's English normaliser after the tags go (module docstring)."""
    if normalizer == "whisper":
        return " ".join(_whisper_english()(without_events(text)).split())
    if normalizer != "duet":
        raise DuetError(f"unknown WER normaliser {normalizer!r}; choose from {', '.join(NORMALIZERS)}")
    text = without_events(text).replace("\u2019", "'")
    text = "".join(ch for ch in text if not _is_punct(ch))
    return " ".join(text.lower().split())


@functools.cache
def _whisper_english() -> Callable[[str], str]:
    try:
        from whisper_normalizer.english import EnglishTextNormalizer
    except ImportError as err:
        raise DuetError("the whisper WER normaliser needs the eval extra (pip install 'duet[eval]': "
                        "whisper-normalizer)") from err
    return EnglishTextNormalizer()


def _measure(reference: str, hypothesis: str, ref_units: str, hyp_units: str) -> ErrorRate:
    if not ref_units:
        raise DuetError(f"reference {reference!r} is empty after normalisation; its error rate is undefined")
    out = jiwer.process_words(ref_units, hyp_units)
    return ErrorRate(
        reference=reference,
        hypothesis=hypothesis,
        substitutions=out.substitutions,
        deletions=out.deletions,
        insertions=out.insertions,
        ref_len=out.substitutions + out.deletions + out.hits,
    )


def word_error(reference: str, hypothesis: str, normalizer: str = "duet") -> ErrorRate:
    """WER of one utterance after :func:`normalize_text` (with ``normalizer``) on both sides."""
    ref, hyp = normalize_text(reference, normalizer), normalize_text(hypothesis, normalizer)
    return _measure(ref, hyp, ref, hyp)


def char_error(reference: str, hypothesis: str) -> ErrorRate:
    """CER of one utterance: normalised characters, whitespace not counted (Seed-TTS's Chinese recipe)."""
    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    # Characters as space-separated "words", so jiwer's word alignment becomes a character alignment.
    return _measure(ref, hyp, " ".join(ref.replace(" ", "")), " ".join(hyp.replace(" ", "")))


def aggregate(rates: Iterable[ErrorRate]) -> AggregateRate:
    """Mean of per-utterance rates (Seed-TTS-eval) and the pooled rate, over a non-empty set."""
    rates = list(rates)
    if not rates:
        raise DuetError("cannot aggregate error rates over zero utterances")
    return AggregateRate(
        mean=sum(r.rate for r in rates) / len(rates),
        pooled=sum(r.errors for r in rates) / sum(r.ref_len for r in rates),
        count=len(rates),
    )
