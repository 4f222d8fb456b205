"""Inline non-verbal tags and the emotion token in text: spellings users type -> duet's service tokens, and a tagged
text taken apart into what a voice says and where each event sits.

The service tokens themselves live in ``duet.text.tokens`` (``[laughter]``, ``<|emo_happy|>``, ...). People also
write ``[laugh]``, ``[Laughs]``, ``[breathes]`` or ``[clears throat]``; :func:`canonical_tags` rewrites such a
spelling to the one token of its event, so every later stage (normalisation, phonemisation, BPE) sees one service
token. A bracketed word that names no event (``[sic]``, ``[1]``) is left as written.

A tagged text's events sit at word boundaries: :func:`split_tags` returns the spoken text (tags removed) and, per
event, how many spoken words come before it, which is where a corpus splices the sound (``duet.data.splice``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from duet.errors import DuetError
from duet.text.tokens import NONVERBALS, emotion_token, nonverbal_token

# Spellings of the events beyond the token names themselves (compared after case folding, with spaces, hyphens
# and underscores made one underscore).
ALIASES: dict[str, str] = {
    "laugh": "laughter",
    "laughs": "laughter",
    "laughing": "laughter",
    "chuckle": "laughter",
    "chuckles": "laughter",
    "giggle": "laughter",
    "breathe": "breath",
    "breathes": "breath",
    "breathing": "breath",
    "inhale": "breath",
    "inhales": "breath",
    "coughs": "cough",
    "coughing": "cough",
    "sighs": "sigh",
    "sighing": "sigh",
    "gasps": "gasp",
    "sniffs": "sniff",
    "sniffle": "sniff",
    "cries": "cry",
    "crying": "cry",
    "sob": "cry",
    "yawns": "yawn",
    "clears_throat": "clear_throat",
    "throat_clear": "clear_throat",
    "hums": "hum",
    "humming": "hum",
}

_BRACKET_RE = re.compile(r"\[([A-Za-z][A-Za-z _-]{0,30})\]")
_EVENT_RE = re.compile("(" + "|".join(re.escape(nonverbal_token(n)) for n in NONVERBALS) + ")")


def event_name(spelling: str) -> str | None:
    """The event a bracketed word names (``"Laughs"`` -> ``"laughter"``), or None when it names none."""
    key = re.sub(r"[\s_-]+", "_", spelling.strip().casefold())
    key = ALIASES.get(key, key)
    return key if key in NONVERBALS else None


def canonical_tags(text: str) -> str:
    """Every bracketed event spelling rewritten to its service token; anything else unchanged."""

    def one(m: re.Match) -> str:
        name = event_name(m.group(1))
        return m.group(0) if name is None else nonverbal_token(name)

    return _BRACKET_RE.sub(one, text)


def without_events(text: str) -> str:
    """The text with every event tag (any spelling :func:`event_name` knows) removed: what the words say, for WER."""
    return _EVENT_RE.sub(" ", canonical_tags(text))


def with_emotion(text: str, emotion: str) -> str:
    """The text with its utterance-level emotion token in front (the instruction context, Luna-TTS §2.3)."""
    return emotion_token(emotion) + text


@dataclass(frozen=True)
class TaggedText:
    """A tagged text taken apart: what is spoken, and where each inline event sits."""

    spoken: str  # the text without its event tags, spaces tidied
    events: tuple[tuple[str, int], ...]  # (event name, spoken words before it), in text order

    @property
    def words(self) -> list[str]:
        return spoken_words(self.spoken)


def spoken_words(text: str) -> list[str]:
    """Whitespace-separated words with surrounding punctuation stripped, empty ones dropped: the words as a corpus
    timing sidecar counts them (``duet.data.timing`` reads words with this function)."""
    words = []
    for token in text.split():
        start, end = 0, len(token)
        while start < end and unicodedata.category(token[start])[0] == "P":
            start += 1
        while end > start and unicodedata.category(token[end - 1])[0] == "P":
            end -= 1
        if start < end:
            words.append(token[start:end])
    return words


def split_tags(text: str) -> TaggedText:
    """``"Well [laughter] I never."`` -> spoken ``"Well I never."``, events ``(("laughter", 1),)``.

    Words are counted as the corpus timing counts them (:func:`spoken_words`), so boundary k is the gap after
    the k-th word of a timing sidecar. Tags are canonicalised first.
    """
    pieces = _EVENT_RE.split(canonical_tags(text))
    spoken_parts: list[str] = []
    events: list[tuple[str, int]] = []
    words = 0
    for i, piece in enumerate(pieces):
        if i % 2:
            if pieces[i - 1][-1:].isalnum() and pieces[i + 1][:1].isalnum():
                raise DuetError(f"an event tag sits inside a word: {text!r}")
            events.append((piece[1:-1], words))
        else:
            spoken_parts.append(piece)
            words += len(spoken_words(piece))
    spoken = re.sub(r"\s+", " ", " ".join(spoken_parts)).strip()
    spoken = re.sub(r" +([,.!?;:])", r"\1", spoken)
    return TaggedText(spoken, tuple(events))


def insert_tags(words_text: str, events: list[tuple[str, int]]) -> str:
    """The inverse of :func:`split_tags` for a plain text: each event's tag written after its k-th word (k = 0:
    before the first), after any punctuation that ends that word."""
    tokens = words_text.split()
    # index in `tokens` after which each boundary k falls: after the token that holds the k-th word
    after: list[int] = [-1]
    for i, tok in enumerate(tokens):
        after += [i] * len(spoken_words(tok))
    out: list[str] = []
    by_slot: dict[int, list[str]] = {}
    for name, k in events:
        if not 0 <= k < len(after):
            raise DuetError(f"event {name!r} after word {k}, but the text has {len(after) - 1} words")
        by_slot.setdefault(after[k], []).append(nonverbal_token(name))
    out += by_slot.get(-1, [])
    for i, tok in enumerate(tokens):
        out.append(tok)
        out += by_slot.get(i, [])
    return " ".join(out)
