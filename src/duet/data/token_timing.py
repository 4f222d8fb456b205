"""Per-token durations from a synthesiser's phone timing: what aligned text input trains on.

A corpus timing sidecar (``duet.data.timing``) gives the IPA string a voice read and the time span of each of its
characters (a sidecar in Festival's or Flite's phone set is first laid over the text's IPA by its word times,
``duet.data.timing.ipa_from_words``). A tokenizer cuts that same string into tokens with character offsets, so each
token's span is that of its characters: it starts where its first character starts. Durations are differences of consecutive starts, so
a pause between two characters belongs to the token before it, and the durations of a row add up exactly::

    SOT = start of the first token         (leading silence)
    d_j = start_{j+1} - start_j            (the last text token ends where its last character ends)
    EOT = frames - end of the last token   (trailing silence, clamped at 0)

all in frames at the codec's frame rate, continuous (never rounded: DESIGN §D). Tokens that share characters (a
byte-level BPE can cut one character into two tokens) share its span equally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from duet.data.manifest import Utterance
from duet.data.timing import IPA, ipa_from_words, read_timing, text_words, timing_path
from duet.errors import DuetError


def token_spans(offsets: Sequence[tuple[int, int]], char_spans: Sequence[tuple[float, float]],
                ) -> list[tuple[float, float]]:
    """Token character offsets (a, b) + per-character (start, end) seconds -> per-token (start, end) seconds."""
    if not char_spans:
        raise DuetError("no timed characters")
    out: list[tuple[float, float]] = []
    i = 0
    while i < len(offsets):
        a, b = offsets[i]
        j = i + 1
        while j < len(offsets) and tuple(offsets[j]) == (a, b):  # tokens cut from the same characters
            j += 1
        a, b = min(max(a, 0), len(char_spans) - 1), min(max(b, a + 1), len(char_spans))
        start, end = char_spans[a][0], char_spans[b - 1][1]
        step = (end - start) / (j - i)
        out.extend((start + n * step, start + (n + 1) * step) for n in range(j - i))
        i = j
    return out


def wrapped_durations(spans: Sequence[tuple[float, float]], frame_rate: float, frames: int) -> list[float]:
    """Per-token (start, end) seconds of the text tokens -> frames per wrapped token [SOT, *text, EOT]."""
    if not spans:
        raise DuetError("no text tokens to lay out")
    starts = [max(0.0, s * frame_rate) for s, _ in spans]
    for k in range(1, len(starts)):  # monotone, so no duration is negative
        starts[k] = max(starts[k], starts[k - 1])
    end = max(starts[-1], min(spans[-1][1] * frame_rate, float(frames)))
    starts = [min(s, float(frames)) for s in starts]
    end = min(end, float(frames))
    text = [b - a for a, b in zip(starts, starts[1:] + [end])]
    return [starts[0], *text, float(frames) - end]


@dataclass(frozen=True)
class TimedText:
    """An utterance's text as its voice read it, tokenised, with the frames of each token."""

    utterance: Utterance
    phonemes: str  # the IPA string of the timing sidecar
    ids: tuple[int, ...]  # its token ids, without service tokens
    frames: int
    durations: tuple[float, ...]  # frames per token of [SOT, *ids, EOT], adding up to ``frames``


def _ipa_timings(utterances: Sequence[Utterance], timings: dict, voice: str) -> dict:
    """Sidecars in a synthesiser's own phone set (Festival, Flite) -> IPA timing of the text's espeak-ng reading in
    ``voice`` (:func:`duet.data.timing.ipa_from_words`): id -> Timing, or None where the words do not match."""
    from duet.text.phonemes import phonemize_many
    from duet.text.prompts import prepare_input

    if not utterances:
        return {}
    spoken = [prepare_input(u.text, u.language) for u in utterances]  # what the voice read (duet.data.build)
    words = [text_words(text) for text in spoken]
    vocab = sorted({w for ws in words for w in ws})
    word_ipa = dict(zip(vocab, phonemize_many(vocab, voice), strict=True))
    out = {}
    for u, ipa, ws in zip(utterances, phonemize_many(spoken, voice), words, strict=True):
        timing = timings[u.id]
        if [w for w, _, _ in timing.words] != ws:  # a sidecar of another text, or of another word rule
            out[u.id] = None
            continue
        out[u.id] = ipa_from_words(timing, ipa, [word_ipa[w] for w in ws])
    return out


def timed_texts(utterances: Sequence[Utterance], root: Path, tokenizer, frames_of, frame_rate: float,
                dropped: dict[str, int]) -> list[TimedText]:
    """The utterances with a timing sidecar (under corpus ``root``), tokenised by ``tokenizer``'s BPE (a phoneme
    tokenizer: inference phonemises, so training reads IPA too). A sidecar in IPA (Piper) is read as it is; one in a
    synthesiser's own phone set (Festival, Flite) is laid over the text's IPA by its word times. ``frames_of(id)``
    is the utterance's frame count; the others are counted in ``dropped["no_timing"]``."""
    from duet.text.phonemes import phoneme_tokenizer_class

    if not isinstance(tokenizer, phoneme_tokenizer_class()):
        raise DuetError("aligned text input trains on the IPA in the timing files: use a phoneme tokenizer "
                        "(--tokenizer train-phoneme-bpe)")
    backend = tokenizer.backend_tokenizer  # the BPE itself: a phoneme tokenizer's encode would phonemise again
    dropped.setdefault("no_timing", 0)
    timings = {}
    for u in utterances:
        path = timing_path(root / u.path)
        timings[u.id] = read_timing(path) if path.is_file() else None
    timings.update(_ipa_timings([u for u in utterances if timings[u.id] is not None
                                 and timings[u.id].alphabet != IPA], timings, tokenizer.voice))
    out = []
    for u in utterances:
        timing = timings[u.id]
        if timing is None or timing.alphabet != IPA:  # no file, or no word times to read the IPA by
            dropped["no_timing"] += 1
            continue
        encoding = backend.encode(timing.phonemes, add_special_tokens=False)
        if not encoding.ids:
            dropped["no_timing"] += 1
            continue
        frames = frames_of(u.id)
        spans = token_spans(encoding.offsets, [(s, e) for _, s, e in timing.phones])
        durations = wrapped_durations(spans, frame_rate, frames)
        out.append(TimedText(u, timing.phonemes, tuple(encoding.ids), frames, tuple(durations)))
    return out
