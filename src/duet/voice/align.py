"""Forced alignment of real recordings: each clip's phonemes laid over its frames, checked, and written as the timing
sidecar aligned text input trains on.

A synthesiser knows where each phone of its output lies (Piper's timing files, ``duet.data.timing``); a recording
does not. duet's own aligner (``duet.data.align``: a monotonic alignment search under a flat-start Gaussian model
fitted to the clips themselves, EM) finds it from the audio: the units are the BPE tokens of the clip's IPA, cut
exactly as training cuts them (``duet.data.token_timing``), wrapped in SOT and EOT, which take the silence before
and after the speech; the features are log-mels, one per codec frame (``duet.data.align_corpus.frame_features``).

A clip is left out as ``poor alignment`` for one of three reasons, each a sign that its transcript and its audio
disagree:

- the text has more tokens than the audio has frames (a transcript of another, longer clip);
- one token holds more than ``max_token_seconds``, or more than ``max_edge_seconds`` of audio lies before the first
  token or after the last (speech the transcript leaves out);
- its speaking rate, the speech sounds of its IPA per second of its speech (the recording's stretch from first to
  last speech frame), lies more than ``rate_mads`` scaled median absolute deviations (of the log rate) from the
  median of all clips, and more than a factor ``rate_factor`` (a floor for a very even speaker, whose deviation is
  small): a transcript far too long or too short for the audio. Texts of fewer than ``rate_min_sounds`` sounds are
  not judged by rate: a letter or a vowel said alone is slow without being wrong.

On the 548 Asterisk English prompts with the transcripts of 20 of them rotated among those 20, these rules left out
10 of the 20 and no correct clip (`duet voice check`). A wrong transcript of about the right length passes: a
flat-start model fitted to 25 minutes cannot tell it (neither its mean log-likelihood nor its gap to an
unconstrained path set those clips apart from correct single-word clips). On the 477 Spanish prompts the rate left
out six vowels said alone until texts of fewer than four sounds were spared it.

The sidecar (:func:`clip_timing`) gives every IPA character the time of the token it belongs to, split equally
between its characters; token boundaries are the aligner's (whole frames), so reading the sidecar back through
``duet.data.token_timing`` gives the aligner's durations again. Words are timed by ``duet.data.timing.align_words``
over each word's own IPA, as for a synthesiser's phone set.

Shape legend: S tokens of the wrapped text, T frames, D mel bins.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from duet.data.align import AlignerConfig, AlignItem, fit_alignments
from duet.data.timing import IPA, STRESS, Timing, align_words, check_timing, is_separator, is_speech, word_times
from duet.data.token_rows import duration_targets, spread_frames, token_weights
from duet.text.tokens import service_ids


@dataclass(frozen=True)
class AlignChecks:
    iterations: int = 6  # EM rounds of the aligner
    max_token_seconds: float = 2.0  # one token held longer: audio the transcript does not explain
    max_edge_seconds: float = 1.5  # more audio than this before the first token or after the last: the same
    rate_mads: float = 4.0  # a speaking rate this many scaled MADs (log rate) from the median ...
    rate_factor: float = 1.6  # ... and at least this factor away from it: poor (a floor for uniform speakers)
    rate_min_sounds: int = 4  # a text of fewer sounds has no rate to judge (a vowel said alone takes its time)


@dataclass(frozen=True)
class AlignInput:
    id: str
    ipa: str  # what the clip says, as the model reads it
    feats: np.ndarray  # (T, D) log-mels, one per codec frame, minus their mean
    speech_seconds: float  # from its first speech frame to its last (duet.voice.checks.AudioFacts)


@dataclass(frozen=True)
class AlignedClip:
    id: str
    durations: tuple[int, ...]  # frames per wrapped token [SOT, tokens..., EOT], adding up to T
    offsets: tuple[tuple[int, int], ...]  # each text token's characters in the IPA


def align_clips(clips: Sequence[AlignInput], tokenizer, frame_rate: float, cfg: AlignChecks = AlignChecks(),
                progress: bool = False) -> dict[str, AlignedClip | tuple[str, str]]:
    """Align every clip (module doc) -> id -> its alignment, or ("poor alignment", why)."""
    backend = tokenizer.backend_tokenizer  # the BPE itself: the IPA is already phonemised
    service = service_ids(tokenizer)
    items, offsets = [], {}
    for clip in clips:
        encoding = backend.encode(clip.ipa, add_special_tokens=False)
        ids = np.array([service.sot, *encoding.ids, service.eot])  # (S,)
        frames = clip.feats.shape[0]
        weights = token_weights(clip.ipa, encoding.offsets)
        if frames >= len(ids):  # EM starts from the character spread, SOT and EOT a frame each
            init = [1, *spread_frames(weights, frames - 2), 1]
        else:  # fewer frames than tokens: fit_alignments keeps these and lists the clip as a fallback
            init = duration_targets(weights, frames)
        items.append(AlignItem(clip.id, ids, clip.feats, np.array(init, dtype=np.int64)))
        offsets[clip.id] = tuple((int(a), int(b)) for a, b in encoding.offsets)
    result = fit_alignments(items, len(tokenizer), AlignerConfig(iterations=cfg.iterations), progress=progress)
    rates = {c.id: speaking_rate(c.ipa, c.speech_seconds) for c in clips}
    out: dict[str, AlignedClip | tuple[str, str]] = {}
    ipa = {c.id: c.ipa for c in clips}
    fallback = set(result.fallback)
    for item in items:
        frames = item.feats.shape[0]
        if item.id in fallback:
            out[item.id] = ("poor alignment", f"{len(item.ids)} tokens but {frames} frames "
                                              f"({frames / frame_rate:.1f} s): the text says more than the audio")
            continue
        durations = tuple(int(d) for d in result.durations[item.id])
        judged = sum(is_speech(ch) for ch in ipa[item.id]) >= cfg.rate_min_sounds
        out[item.id] = (_poor(durations, offsets[item.id], ipa[item.id], frame_rate, cfg)
                        or (rate_problem(rates[item.id], list(rates.values()), cfg) if judged else None)
                        or AlignedClip(item.id, durations, offsets[item.id]))
    return out


def speaking_rate(ipa: str, speech_seconds: float) -> float:
    """Speech sounds of ``ipa`` (not stress marks, spaces or punctuation) per second of speech."""
    return sum(is_speech(ch) for ch in ipa) / max(speech_seconds, 0.05)


def rate_problem(rate: float, rates: Sequence[float], cfg: AlignChecks) -> tuple[str, str] | None:
    """("poor alignment", why) for a speaking rate far from the median of ``rates`` (module doc), else None."""
    logs = [math.log(max(r, 1e-6)) for r in rates]
    median = statistics.median(logs)
    spread = 1.4826 * statistics.median(abs(x - median) for x in logs)
    off = math.log(max(rate, 1e-6)) - median
    if abs(off) > max(cfg.rate_mads * spread, math.log(cfg.rate_factor)):
        return "poor alignment", (f"{rate:.1f} sounds per second of speech against a median of "
                                  f"{math.exp(median):.1f}: the transcript is far too {'long' if off > 0 else 'short'} "
                                  "for the audio")
    return None


def _poor(durations: Sequence[int], offsets: Sequence[tuple[int, int]], ipa: str, frame_rate: float,
          cfg: AlignChecks) -> tuple[str, str] | None:
    lead, trail = durations[0] / frame_rate, durations[-1] / frame_rate
    if max(lead, trail) > cfg.max_edge_seconds:
        where = "before the first word" if lead >= trail else "after the last word"
        return "poor alignment", f"{max(lead, trail):.1f} s of audio {where}: speech the transcript leaves out?"
    text = durations[1:-1]
    j = int(np.argmax(text))
    if text[j] / frame_rate > cfg.max_token_seconds:
        a, b = offsets[j]
        return "poor alignment", (f"/{ipa[a:b]}/ held {text[j] / frame_rate:.1f} s: speech the transcript leaves "
                                  "out?")
    return None


def clip_timing(ipa: str, aligned: AlignedClip, frame_rate: float, words: Sequence[str],
                word_ipa: Sequence[str]) -> Timing:
    """The timing sidecar of an aligned clip (module doc): per IPA character, the time of its token, split equally
    among the token's characters (tokens cut from the same characters share their joint span); ``words`` are the
    text's words (``duet.data.timing.text_words``) and ``word_ipa`` each one's own IPA."""
    bounds = np.cumsum([0, *aligned.durations]) / frame_rate  # wrapped token i spans [bounds[i], bounds[i + 1])
    spans: list[tuple[float, float] | None] = [None] * len(ipa)
    j = 0
    while j < len(aligned.offsets):
        a, b = aligned.offsets[j]
        k = j + 1
        while k < len(aligned.offsets) and aligned.offsets[k] == (a, b):  # byte tokens of one character
            k += 1
        start, end = float(bounds[j + 1]), float(bounds[k + 1])  # text token j is wrapped token j + 1
        n = max(1, b - a)
        for i in range(a, min(b, len(ipa))):
            spans[i] = (start + (end - start) * (i - a) / n, start + (end - start) * (i - a + 1) / n)
        j = k
    phones, now = [], float(bounds[1])
    for ch, span in zip(ipa, spans):
        span = span or (now, now)  # a character no token covers (none with a byte-level BPE) takes no time
        phones.append((ch, *span))
        now = span[1]
    word_spans = align_words(list(ipa), word_ipa, is_boundary=is_separator, is_ignored=lambda ch: ch in STRESS)
    return Timing(ipa, tuple(phones), word_times(words, word_spans, phones), IPA)


def timing_problem(timing: Timing, seconds: float) -> tuple[str, str] | None:
    """("poor alignment", why) when a sidecar does not pass ``duet.data.timing.check_timing``."""
    problems = check_timing(timing, seconds)
    return ("poor alignment", f"its timing does not hold together: {problems[0]}") if problems else None
