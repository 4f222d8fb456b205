"""Cut text that is still arriving (an LLM's token stream) into pieces that can be spoken before it ends.

A piece is cut only where nothing after the cut can change what is before it:

- at a sentence end (``. ! ?`` and closing quotes, then whitespace; abbreviations, initials and dotted words such
  as "p.m." are not ends: ``duet.text.sentences.ends_sentence``);
- at a clause mark (``, ; :`` then whitespace) once the piece holds enough words (fewer for the first piece, so the
  listener hears something after the first clause);
- between words once the piece reaches its length bound;
- between words when no text has arrived for ``idle_seconds`` (the LLM stalls), at the caller's ``poll``.

Every cut needs the whitespace after it to have arrived, so a number split across deltas ("3" then ".5"), a URL or
an abbreviation is never cut inside, and the text after the last whitespace (possibly half a word) is held back.
Numbers and abbreviations are normalised by the speaker, piece by piece, so only once their tokens are complete.
The cuts made by ``push`` depend on the text only, never on how it was split into deltas; the pieces joined with
single spaces are the input with its whitespace collapsed (tested on adversarial splits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from duet.text.sentences import CLAUSE_END, SENTENCE_END, ends_sentence


@dataclass(frozen=True)
class SegmenterConfig:
    first_clause_words: int = 3  # the first piece may end at a clause mark after this many words
    clause_words: int = 8  # later pieces: audio is already playing, so wait for longer clauses
    first_max_chars: int = 80  # the first piece is cut between words at this length (no punctuation at all)
    max_chars: int = 200  # later pieces (what a model speaks well in one generation)
    idle_seconds: float = 0.8  # no delta for this long: speak the complete words held

    def __post_init__(self) -> None:
        if min(self.first_clause_words, self.clause_words) < 1:
            raise ValueError("clause word counts must be at least 1")
        if min(self.first_max_chars, self.max_chars) < 1:
            raise ValueError("piece lengths must be positive")
        if not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds must be positive, got {self.idle_seconds}")


_WORD_GAP = re.compile(r"\s+")


class TextSegmenter:
    """Feed deltas with ``push``, call ``poll`` now and then, and ``finish`` at the end of input; each returns the
    pieces that became ready, in order. Times are the caller's clock in seconds (``time.monotonic()``)."""

    def __init__(self, config: SegmenterConfig = SegmenterConfig()):
        self.config = config
        self._held = ""  # text received and not yet cut off as a piece
        self._pieces = 0  # pieces handed out so far
        self._last_delta: float | None = None
        self.finished = False

    @property
    def held(self) -> str:
        """The text not yet handed out (whitespace as received)."""
        return self._held

    def push(self, delta: str, now: float = 0.0) -> list[str]:
        if self.finished:
            raise ValueError("the input has ended; no more text can be pushed")
        self._held += delta
        self._last_delta = now
        out = []
        while (piece := self._next_cut()) is not None:
            out.append(piece)
        return out

    def poll(self, now: float) -> list[str]:
        """The complete words held, as one piece, once no delta arrived for ``idle_seconds``."""
        if self.finished or self._last_delta is None or now - self._last_delta < self.config.idle_seconds:
            return []
        gaps = list(_WORD_GAP.finditer(self._held))
        if not gaps or not self._held[:gaps[-1].start()].strip():
            return []
        return [self._take(gaps[-1].end())]

    def finish(self) -> list[str]:
        """The end of input: whatever is held is the last piece."""
        self.finished = True
        return [self._take(len(self._held))] if self._held.strip() else []

    # ---- cutting ----
    def _next_cut(self) -> str | None:
        first = self._pieces == 0
        limit = self.config.first_max_chars if first else self.config.max_chars
        min_words = self.config.first_clause_words if first else self.config.clause_words
        text = self._held
        lead = len(text) - len(text.lstrip())
        cuts = []  # (end of the piece in text, end of the whitespace after it)
        for m in SENTENCE_END.finditer(text, lead):
            if ends_sentence(text[lead:m.start()]):
                cuts.append((m.start(), m.end()))
                break
        for m in CLAUSE_END.finditer(text, lead):
            if len(text[lead:m.start()].split()) >= min_words:
                cuts.append((m.start(), m.end()))
                break
        if cuts:
            end, after = min(cuts)
            if len(" ".join(text[lead:end].split())) <= limit:
                return self._take(after)
        # No mark within the bound: cut between words once a whole word lies past it. The piece's length with its
        # whitespace collapsed is kept as the gaps go by, so a long text costs one pass, not one join per gap.
        collapsed_away, inside = 0, None
        for gap in _WORD_GAP.finditer(text, lead):
            if gap.start() - lead - collapsed_away > limit:
                return self._take((inside or gap).end())
            inside = gap
            collapsed_away += len(gap.group()) - 1
        return None

    def _take(self, end: int) -> str:
        piece, self._held = " ".join(self._held[:end].split()), self._held[end:]
        self._pieces += 1
        return piece
