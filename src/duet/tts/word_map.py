"""Which characters of a model's input string belong to which word of the text: the map word timings read.

A runtime encodes a request's text as ``prepare_input`` (normalised: "$3.50" -> "three dollars and fifty cents")
-> the tokenizer's *surface* string (espeak-ng's IPA for a phoneme tokenizer, ``duet.text.phonemes.surface``; the
prepared text itself for any other) -> token ids, each with its characters of the surface. :func:`word_map` does
the same and adds the words:

- the spoken words are the prepared text's words (``duet.text.tags.spoken_words``: whitespace words, surrounding
  punctuation stripped; inline event tags such as ``[laughter]`` are not words);
- each is read on its own (espeak-ng for a phoneme tokenizer) and found in the surface by
  ``duet.data.timing.align_words``, the rule that lays a corpus's word timing over the text's IPA
  (``duet.data.token_timing``): espeak-ng reads "of the" as one IPA word, and its two words still get their own
  characters (words it cannot tell apart share one span).

What a word is reported as (:func:`display_words`): the word as the user wrote it wherever the normaliser maps
written words one-to-one onto spoken ones ("Hello" -> "Hello", "7" -> "seven" is reported "7", "Dr." -> "Doctor"
is reported "Dr"), else the normalised spoken words ("$3.50" is reported "three", "dollars", "and", "fifty",
"cents"; "1984" is "nineteen", "eighty-four"), so every reported word has a time span of its own.

Shape legend: S text tokens (no service tokens added), W words.
"""

from __future__ import annotations

from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from duet.data.timing import STRESS, align_words, is_separator
from duet.text.phonemes import phoneme_voice, phonemize_many
from duet.text.prompts import prepare_input
from duet.text.tags import canonical_tags, spoken_words
from duet.text.tokens import SERVICE_TOKEN_RE


@dataclass(frozen=True)
class WordMap:
    """A text as a model reads it, cut into tokens and into words over the same characters."""

    surface: str  # the string the token offsets index: IPA for a phoneme tokenizer, else the prepared text
    ids: tuple[int, ...]  # (S,) the text's token ids, as the runtime encodes them between its service tokens
    offsets: tuple[tuple[int, int], ...]  # (S,) each token's characters [a, b) of ``surface``
    words: tuple[str, ...]  # (W,) as reported (:func:`display_words`)
    spans: tuple[tuple[int, int], ...]  # (W,) each word's characters [a, b) of ``surface``
    phonemes: bool  # the surface is IPA: its characters are phones


def without_tags(text: str) -> str:
    """``text`` with every service token (inline event tags, emotion tokens) replaced by a space."""
    return SERVICE_TOKEN_RE.sub(" ", canonical_tags(text))


def display_words(written: str, spoken: list[str]) -> list[str]:
    """The spoken (normalised) words, each replaced by the written word it comes from where the normaliser maps
    written words one-to-one onto spoken ones (matched case-blind, in order)."""
    typed = spoken_words(without_tags(written))
    out = list(spoken)
    matcher = SequenceMatcher(None, [w.casefold() for w in typed], [w.casefold() for w in spoken], autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op in ("equal", "replace") and i2 - i1 == j2 - j1:
            out[j1:j2] = typed[i1:i2]
    return out


def word_map(text: str, tokenizer: Any, language: str = "en") -> WordMap | None:
    """``text`` (as a request carries it) -> its :class:`WordMap`; None for a tokenizer without character offsets
    (one that is not a ``tokenizers`` BPE)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    prepared = prepare_input(text, language)
    spoken = spoken_words(without_tags(prepared))
    voice = phoneme_voice(tokenizer)
    phonemes = voice is not None
    if voice is not None:
        surface, *readings = phonemize_many([prepared, *spoken], voice)
    else:
        surface, readings = prepared, spoken
    encoding = backend.encode(surface, add_special_tokens=False)
    # service tokens stay in the surface (the tokenizer reads each as one id) but belong to no word
    units = list(SERVICE_TOKEN_RE.sub(lambda m: " " * len(m.group(0)), surface))
    spans = align_words(units, readings, is_boundary=is_separator, is_ignored=lambda u: u in STRESS)
    return WordMap(surface, tuple(encoding.ids), tuple((int(a), int(b)) for a, b in encoding.offsets),
                   tuple(display_words(text, spoken)), tuple(spans), phonemes)
