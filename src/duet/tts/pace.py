"""SSML's pauses and rates (``duet.text.ssml``) cut to the pieces a text is spoken in: what each request carries.

A :class:`Pace` rides on a :class:`~duet.tts.request.SynthesisRequest`, in character offsets of the request's own
text. How each mark is realised:

- a break between two words of one request: a pause token in the model's own duration layout lasts long enough
  that the second word starts ``seconds`` after the first ends (``duet.tts.pace_layout``). Where the text has no
  punctuation at the break, a comma is put there, so the model reads a pause token it was trained on (its silence
  at ',' is about 130 ms); the piece's text carries the comma;
- a break before the first word of a text: the leading silence of the layout (the start-of-text token's frames);
- a break after the last word of a text (:attr:`Pace.after`): silence appended after the request's audio. Measured
  (``benchmarks/results/timestamps.md``): a Gepard given a long tail in its layout does not stop at its end, and
  silence after the last sample cannot change how the speech sounds;
- a break where a long text is cut into pieces (:attr:`Pace.before` of the later piece): the silence the caller
  puts between the pieces (the Speaker's gap, the text stream's) is sized so that the pause from the last word of
  one to the first word of the next is the break (:func:`gap_seconds`), instead of the default gap;
- a rate: the layout's durations of the span's tokens divided by it (on top of the request's ``speed``).

So every word timing follows the marks: they are part of the layout the timings read, or silence that shifts the
pieces after it, as the gaps do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from duet.text.segmenter import SegmenterConfig, TextSegmenter
from duet.text.ssml import Marked, TextReader

# Where a pause token already stands: a punctuation mark a phoneme tokenizer keeps (duet.tts.timestamps.PAUSES),
# maybe inside closing quotes or brackets.
_PAUSE_MARKS = frozenset(".,;:!?\u2026")
_CLOSERS = "\"')]}\u201d\u2019\u00bb"


@dataclass(frozen=True)
class Pace:
    """The SSML marks of one request's text, in character offsets of it."""

    breaks: tuple[tuple[int, float], ...] = ()  # (offset, seconds): 0 = before the first word; inner ones in order
    rates: tuple[tuple[int, int, float], ...] = ()  # (start, end, rate > 1 faster): spans that do not overlap
    before: float = 0.0  # a pause between the piece before and this one (the caller's silence), seconds
    after: float = 0.0  # a pause after this request's last word (silence the caller appends), seconds

    @property
    def layout(self) -> bool:
        """Whether the model's layout changes (breaks or rates inside the text), not only the silence around it."""
        return bool(self.breaks or self.rates)

    @property
    def slowest(self) -> float:
        return min((r for _, _, r in self.rates), default=1.0)

    @property
    def break_seconds(self) -> float:
        return sum(s for _, s in self.breaks)


@dataclass(frozen=True)
class PacedPiece:
    text: str  # the piece as the model reads it (a comma where a break had no punctuation)
    pace: Pace | None  # None: nothing marked in or around it


def paced_pieces(marked: Marked, pieces: Sequence[str]) -> list[PacedPiece]:
    """``marked``'s plain text cut into ``pieces`` (in order, every non-whitespace character kept, as
    ``split_sentences`` and the text segmenter cut) -> each piece with its marks."""
    out, start = [], 0
    for i, piece in enumerate(pieces):
        count = sum(not ch.isspace() for ch in piece)
        out.append(piece_pace(marked, piece, start, first=i == 0, last=i == len(pieces) - 1))
        start += count
    return out


def piece_pace(marked: Marked, piece: str, start: int, *, first: bool, last: bool) -> PacedPiece:
    """One piece whose first non-whitespace character is ``start`` of ``marked``'s plain text -> its text and
    marks. A break on the boundary with the piece before belongs to this piece (``before``); ``last`` says whether
    a break at its end is the text's trailing one (else the next piece takes it)."""
    where = [i for i, ch in enumerate(piece) if not ch.isspace()]  # non-whitespace character n -> its index
    end = start + len(where)
    before = after = 0.0
    inner: list[tuple[int, float]] = []
    for b in marked.breaks:
        if b.at == start and first:
            inner.append((0, b.seconds))  # the text's leading pause
        elif b.at == start:
            before += b.seconds
        elif start < b.at < end:
            inner.append((where[b.at - start - 1] + 1, b.seconds))
        elif b.at == end and last:
            after += b.seconds
    rates = [(where[max(r.start, start) - start], where[min(r.end, end) - start - 1] + 1, r.rate)
             for r in marked.rates if r.start < end and r.end > start]
    text, shift = _with_pause_marks(piece, [o for o, _ in inner if 0 < o])
    breaks = _merged([(shift(o), s) for o, s in inner])
    pace = Pace(breaks, tuple((shift(a), shift(b), r) for a, b, r in rates), before, after)
    return PacedPiece(text, pace if pace != Pace() else None)


def _with_pause_marks(text: str, offsets: list[int]):
    """``text`` with a comma at each of ``offsets`` that has no pause mark before it, and the offset map."""
    need = sorted({o for o in offsets if text[:o].rstrip(_CLOSERS)[-1:] not in _PAUSE_MARKS})
    for o in reversed(need):
        text = f"{text[:o]},{text[o:]}"

    def shift(offset: int) -> int:
        return offset + sum(o < offset for o in need) + sum(o == offset for o in need)

    return text, shift


def _merged(breaks: list[tuple[int, float]]) -> tuple[tuple[int, float], ...]:
    """Breaks at one offset added up, in order."""
    total: dict[int, float] = {}
    for offset, seconds in breaks:
        total[offset] = total.get(offset, 0.0) + seconds
    return tuple(sorted(total.items()))


def gap_seconds(pause: float, trail: float, lead: float) -> float:
    """The silence to put between two pieces so that the pause from the last word of the first (``trail`` seconds
    of its audio after that word) to the first word of the second (``lead`` seconds into its audio) is ``pause``."""
    return max(0.0, pause - trail - lead)


class MarkedPieces:
    """Text arriving in deltas, plain or SSML (``duet.text.ssml.TextReader``), cut into pieces as soon as they can
    be spoken (``duet.text.segmenter``), each with its marks: what ``duet speak --stdin-stream`` and the
    text-streaming WebSocket speak. A piece's marks are all known when it is cut (the segmenter cuts only behind
    text that has arrived); a break where a piece ends goes with the next piece (``Pace.before``), and the one at
    the end of all the text is :attr:`trailing` once the input has finished."""

    def __init__(self, config: SegmenterConfig = SegmenterConfig()):
        self._reader = TextReader()
        self._segmenter = TextSegmenter(config)
        self._start = 0  # non-whitespace characters of the pieces handed out
        self.trailing = 0.0  # seconds of pause after the last piece (set by finish when no piece holds it)

    @property
    def marked(self) -> bool:
        """Whether the input is SSML (its pieces may carry marks)."""
        return self._reader.ssml

    def push(self, delta: str, now: float = 0.0) -> list[PacedPiece]:
        """A delta of raw input -> the pieces it completes (an SsmlError for bad markup)."""
        return self._paced(self._segmenter.push(self._reader.push(delta), now))

    def poll(self, now: float) -> list[PacedPiece]:
        return self._paced(self._segmenter.poll(now))

    def finish(self) -> list[PacedPiece]:
        tail = self._reader.finish()
        pieces = self._segmenter.push(tail) if tail else []
        pieces += self._segmenter.finish()
        out = self._paced(pieces, last=True)
        if not pieces:
            self.trailing = sum(b.seconds for b in self._reader.breaks if b.at == self._start and b.at > 0)
        return out

    def _paced(self, pieces: list[str], last: bool = False) -> list[PacedPiece]:
        marked = Marked("", tuple(self._reader.breaks), self._reader.rate_spans())
        out = []
        for i, piece in enumerate(pieces):
            out.append(piece_pace(marked, piece, self._start, first=self._start == 0,
                                  last=last and i == len(pieces) - 1))
            self._start += sum(not ch.isspace() for ch in piece)
        return out
