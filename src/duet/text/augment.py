"""Short-register text repetition: repeat a 1-2 word text in the prefill so the decoder sees a longer text region.

Gepard §1.4 names the "short register" failure: given one or two words, an autoregressive TTS decoder runs away
(never stops, or stops seconds late) or skips the word. §1.2 states the remedy that keeps the decode loop stock:
"text augmentation (text repetitions in prefill)", which "requires no dynamic logic changes at inference".

Divergence / gap: the copy of the report in this project stops in §4.1, before §5 where the recipe is detailed,
so the parameters here are duet's reading, not the report's. What follows from §1.2 is the shape:
- the audio target is left alone: a training sample keeps its one spoken utterance while its short text is
  written ``copies`` times, so the model learns "repeated short text -> say it once";
- at inference the same static rewrite is applied to short inputs before prefill (:func:`prefill_text`),
  so nothing changes inside the decode loop.
Training draws the number of copies at random and leaves a fraction of short samples plain, so the model also
copes with a short text that arrives unrepeated; inference uses one fixed count inside the trained range.

The functions take only the spoken text; emotion and speaker tokens are added around it afterwards, so they
are never repeated. Inline non-verbal tags (``[laughter]``) are part of the spoken text and repeat with it,
but they never count as words.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from duet.errors import DuetError

_WORD_RE = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_TAG_RE = re.compile(r"<\|[^|<>\s]+\|>|\[[a-z_]+\]")


@dataclass(frozen=True)
class RepetitionConfig:
    max_words: int = 2  # short register: one or two words (Gepard §1.4)
    min_copies: int = 2  # training draws copies uniformly from [min_copies, max_copies]
    max_copies: int = 4
    prob: float = 0.5  # training: chance that a short sample is repeated at all
    inference_copies: int = 3  # prefill_text's fixed count, inside the trained range
    separator: str = " "

    def __post_init__(self) -> None:
        if not 1 <= self.min_copies <= self.inference_copies <= self.max_copies:
            raise DuetError(
                "repetition copies must satisfy 1 <= min_copies <= inference_copies <= max_copies, got "
                f"{self.min_copies}, {self.inference_copies}, {self.max_copies}"
            )
        if not 0.0 <= self.prob <= 1.0:
            raise DuetError(f"repetition prob must be in [0, 1], got {self.prob}")


def count_words(text: str) -> int:
    """Words a reader would say: runs of letters or digits (apostrophes inside), service tags excluded."""
    return len(_WORD_RE.findall(_TAG_RE.sub(" ", text)))


def is_short_register(text: str, config: RepetitionConfig = RepetitionConfig()) -> bool:
    return 1 <= count_words(text) <= config.max_words


def repeat_text(text: str, copies: int, separator: str = " ") -> str:
    """``copies`` copies of the stripped text joined by ``separator``: ("Yes.", 3) -> "Yes. Yes. Yes."."""
    text = text.strip()
    return separator.join([text] * copies)


def prefill_text(text: str, config: RepetitionConfig = RepetitionConfig()) -> str:
    """Inference: the text to put in the prefill. Short texts get ``inference_copies`` copies; others unchanged."""
    if not is_short_register(text, config):
        return text
    return repeat_text(text, config.inference_copies, config.separator)


def augment_text(text: str, rng: random.Random | int, config: RepetitionConfig = RepetitionConfig()) -> str:
    """Training: with probability ``prob`` a short text becomes 2..4 copies of itself; the audio stays as it is.

    Deterministic given ``rng`` (a ``random.Random`` that is advanced, or an int seed). Exactly two draws are taken
    for a short text and none for any other, so a data loader's stream of draws does not depend on sample order
    beyond which samples are short.
    """
    if not is_short_register(text, config):
        return text
    rng = random.Random(rng) if isinstance(rng, int) else rng
    apply = rng.random() < config.prob
    copies = rng.randint(config.min_copies, config.max_copies)
    return repeat_text(text, copies, config.separator) if apply else text
