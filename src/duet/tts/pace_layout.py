"""A :class:`~duet.tts.pace.Pace` realised in a model's own duration layout: frames per wrapped token, changed
before the model generates over them (aligned text input, ``duet.nn.aligned``).

The layout is the one word timings read (``duet.tts.timestamps``), so a mark is placed by the same character
times: a word's span runs from its first to its last character that is not a separator.

- rate spans: the words whose characters the span covers (counted as the word map counts spoken words, in the
  normalised text before each offset), and every token that touches them, including the separators between
  them, last ``1 / rate`` times as long;
- a break between words k-1 and k: the pause token between them (the first token there that holds a pause mark;
  ``duet.tts.pace`` puts a comma where the text had none) gets the frames that make the gap from word k-1's end to
  word k's start ``seconds`` long; after the last word, the gap to the end of the text's tokens. A break shorter
  than the gap the model predicts there shortens it, down to the pause token's frames alone (the rest of the gap
  belongs to the words' own tokens);
- a break before the first word: the start-of-text token's frames, so the first word starts ``seconds`` in.

Rates come first, then breaks, so a break's length is absolute, whatever the rate around it.

Shape legend: S wrapped text tokens.
"""

from __future__ import annotations

from typing import Any, Sequence

from duet.data.timing import is_separator
from duet.errors import InvalidRequest
from duet.text.prompts import prepare_input
from duet.text.tags import spoken_words
from duet.tts.pace import Pace
from duet.tts.timestamps import PAUSES, TextLayout, character_frames
from duet.tts.word_map import WordMap, without_tags, word_map


def paced_durations(durations: Sequence[float], ids: Sequence[int], text: str, pace: Pace, tokenizer: Any,
                    frame_rate: float, language: str = "en") -> list[float]:
    """Frames per wrapped token (S,) of ``text`` (wrapped as ``ids``) -> the same with ``pace``'s rates and breaks
    (module docstring). An InvalidRequest for a tokenizer without character offsets."""
    wmap = word_map(text, tokenizer, language)
    if wmap is None:
        raise InvalidRequest("SSML pauses and rates need a tokenizer with character offsets", param="input",
                             code="ssml_unsupported")
    d = [float(x) for x in durations]
    first = character_frames(wmap, ids, d)[1]
    words = len(wmap.words)
    if not words:
        return d

    def words_before(offset: int) -> int:
        return _words_before(text, offset, language, words)

    scaled: set[int] = set()
    for a, b, rate in pace.rates:
        wa, wb = words_before(a), words_before(b)
        if wb <= wa:
            continue
        lo, hi = wmap.spans[wa][0], wmap.spans[wb - 1][1]
        for j in _tokens_touching(wmap, lo, hi):
            if j not in scaled:
                scaled.add(j)
                d[first + j] /= rate
    for offset, seconds in pace.breaks:
        k = words_before(offset)
        if k == words and offset >= len(text.rstrip()):
            continue  # after the text's last character: the caller's silence (Pace.after)
        target = seconds * frame_rate
        starts, ends = _word_frames(wmap, ids, d)
        if k == 0:
            d[0] = max(0.0, d[0] + target - starts[0])
            continue
        until = starts[k] if k < words else sum(d[: first + len(wmap.offsets)])
        j = _pause_token(wmap, wmap.spans[k - 1][1], wmap.spans[k][0] if k < words else len(wmap.surface))
        if j is not None:
            d[first + j] = max(0.0, d[first + j] + target - (until - ends[k - 1]))
    return d


def break_gaps(layout: TextLayout, pace: Pace, frame_rate: float) -> list[tuple[float, float, float]]:
    """Each break of ``pace`` between two words of ``layout``'s text -> (end of the word before it, start of the word
    after it, the break's seconds), in seconds of the piece's audio as ``piece_words`` counts them: where the layout
    put the pause, for ``duet.tts.pause_fit`` to find it in the audio. A layout with a voice prompt's words has none
    (pauses are not laid out with a prompt)."""
    wmap = word_map(layout.text, layout.tokenizer, layout.language)
    if wmap is None or layout.prompt_tokens or not wmap.words:
        return []
    words = len(wmap.words)
    starts, ends = _word_frames(wmap, layout.ids, layout.durations, layout.offset)
    out = []
    for offset, seconds in pace.breaks:
        k = _words_before(layout.text, offset, layout.language, words)
        if 0 < k < words:
            out.append((ends[k - 1] / frame_rate, starts[k] / frame_rate, seconds))
    return out


def _words_before(text: str, offset: int, language: str, words: int) -> int:
    """How many spoken words of ``text`` lie before character ``offset`` (at most ``words``)."""
    return min(len(spoken_words(without_tags(prepare_input(text[:offset], language)))), words)


def _tokens_touching(wmap: WordMap, lo: int, hi: int) -> list[int]:
    """Text tokens with a character in the surface's [lo, hi)."""
    return [j for j, (a, b) in enumerate(wmap.offsets) if a < hi and b > lo]


def _pause_token(wmap: WordMap, lo: int, hi: int) -> int | None:
    """The first text token between surface characters ``lo`` and ``hi`` (the separators between two words) that
    holds a pause mark; else the first token that holds a separator there; None if there is none."""
    inside = [j for j, (a, b) in enumerate(wmap.offsets) if a < hi and b > lo]
    for j in inside:
        a, b = wmap.offsets[j]
        if any(ch in PAUSES for ch in wmap.surface[max(a, lo):min(b, hi)]):
            return j
    for j in inside:
        a, b = wmap.offsets[j]
        if any(is_separator(ch) for ch in wmap.surface[max(a, lo):min(b, hi)]):
            return j
    return None


def _word_frames(wmap: WordMap, ids: Sequence[int], durations: Sequence[float],
                 offset: float = 0.0) -> tuple[list[float], list[float]]:
    """Each word's first and last frame (its characters that are not separators) under ``durations``, ``offset``
    frames of the layout before the first generated one."""
    times, _ = character_frames(wmap, ids, durations, offset)
    starts, ends = [], []
    for a, b in wmap.spans:
        chars = [i for i in range(a, b) if not is_separator(wmap.surface[i])] or list(range(a, max(b, a + 1)))
        chars = [min(i, len(times) - 1) for i in chars]
        starts.append(times[chars[0]][0])
        ends.append(times[chars[-1]][1])
    return starts, ends
