"""Split long text into pieces a TTS model can speak one at a time: at sentence ends, then clause breaks, then words.

Small models are trained on single sentences of a few seconds; a paragraph spoken in one generation drifts or hits
the length bound. ``split_sentences`` cuts at ``. ! ?`` (and their closing quotes or brackets) followed by
whitespace; a sentence longer than ``max_chars`` is cut again at ``, ; :`` and, as a last resort, between words.
Abbreviations ("Dr.", single letters, dotted words such as "p.m.") are not sentence ends. Joining the pieces with single spaces gives back
the input with its whitespace collapsed (tested); no piece is empty.
"""

from __future__ import annotations

import re

# Words after which a full stop is not a sentence end (compared lower-case, without the dot).
_ABBREVIATIONS = frozenset("mr mrs ms dr st jr sr prof vs etc e.g i.e no fig approx inc ltd co mt".split())
SENTENCE_END = re.compile(r"""(?<=[.!?])["')\]]*\s+""")
CLAUSE_END = re.compile(r"(?<=[,;:])\s+")


def ends_sentence(before: str) -> bool:
    """Whether punctuation that closes ``before`` (followed by whitespace) ends a sentence: "Dr. Smith",
    "J. R. R. Tolkien", "5 p.m. today" are not ends. Looks at ``before`` only, never at what follows."""
    before = before.rstrip("\"')]")
    words = before.rsplit(None, 1)  # the last word is all it reads: no pass over the whole text
    last_word = words[-1].rstrip(".").lower() if words else ""
    return not (before.endswith(".") and (last_word in _ABBREVIATIONS or len(last_word) == 1 or "." in last_word))


def _sentences(text: str) -> list[str]:
    pieces, start = [], 0
    for m in SENTENCE_END.finditer(text):
        if not ends_sentence(text[start:m.start()]):
            continue
        pieces.append(text[start:m.end()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def _cut(piece: str, pattern: re.Pattern | None, max_chars: int) -> list[str]:
    """Greedily pack the parts of ``piece`` (split by ``pattern``, or words) into chunks of <= max_chars."""
    parts = pattern.split(piece) if pattern is not None else piece.split()
    chunks: list[str] = []
    for part in parts:
        if chunks and len(chunks[-1]) + 1 + len(part) <= max_chars:
            chunks[-1] = f"{chunks[-1]} {part}"
        else:
            chunks.append(part)
    return chunks


def split_sentences(text: str, max_chars: int = 200) -> list[str]:
    """Text -> speakable pieces, each at most ``max_chars`` long unless a single word is longer."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be positive, got {max_chars}")
    text = " ".join(text.split())
    out: list[str] = []
    for sentence in _sentences(text):
        if len(sentence) <= max_chars:
            out.append(sentence)
            continue
        for clause in _cut(sentence, CLAUSE_END, max_chars):
            out.extend([clause] if len(clause) <= max_chars else _cut(clause, None, max_chars))
    return out
