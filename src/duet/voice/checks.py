"""The checks every clip passes before training, as small pure functions, and the reasons a clip is left out.

Audio, read at its own rate before any change:

- ``unreadable``: libsndfile cannot read it, or it holds no samples or non-finite ones;
- ``clipped``: more than ``max_clipped_share`` of its samples sit at full scale (``clip_level``) in runs of at least
  ``clip_run``: the flat tops an overdriven recording leaves;
- ``mostly silence``: there is no speech (20 ms frames within ``activity_db`` of the clip's loudest frame and above
  ``floor_dbfs``), or it fills less than ``min_speech_share`` of the stretch from its first speech frame to its
  last (leading and trailing silence is trimmed anyway, ``duet.voice.prepare``);
- ``too short`` / ``too long``: the clip as it will be trained on (trimmed to its speech plus margins,
  ``duet.voice.prepare``) is shorter than ``min_seconds`` or longer than ``max_seconds``.

Text:

- ``missing transcript`` / ``empty transcript``;
- ``unspeakable text``: after normalisation it has no letter, holds symbols espeak-ng would read out by name or skip
  (emoji, math and currency signs: Unicode category S, control or unassigned characters), holds letters of a script
  the rest of the data does not use (``foreign_scripts``), or espeak-ng gives it no phonemes.

The forced alignment adds ``poor alignment`` (``duet.voice.align``), reading DATA adds ``missing audio``,
``duplicate id`` and ``other language`` (a manifest line in another language than the voice's).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

# Every reason a clip can be left out, in the order the report lists them.
REASONS = ("unreadable", "missing audio", "missing transcript", "empty transcript", "duplicate id",
           "other language", "too short", "too long", "clipped", "mostly silence", "unspeakable text",
           "poor alignment")


@dataclass(frozen=True)
class ClipChecks:
    min_seconds: float = 0.4  # a trimmed clip shorter than this is too short
    max_seconds: float = 30.0  # ... longer than this too long (a row of the tiny model stays under 1,000 positions)
    clip_level: float = 0.99  # |sample| at or above this is at full scale
    clip_run: int = 3  # that many full-scale samples in a row are a clipped peak
    max_clipped_share: float = 0.001  # more clipped samples than this share: "clipped"
    frame_seconds: float = 0.02  # the activity detector's frames
    activity_db: float = 35.0  # a frame within this of the loudest frame is speech ...
    floor_dbfs: float = -55.0  # ... if it is also above this absolute level
    min_speech_share: float = 0.3  # less speech than this share between its first and last word: "mostly silence"
    min_script_share: float = 0.1  # scripts with fewer of all the data's letters are foreign


@dataclass(frozen=True)
class AudioFacts:
    """What the checks and the preparation read off one clip's audio."""

    seconds: float
    speech_start: float  # seconds: the first speech frame's start (0 when there is no speech)
    speech_end: float  # seconds: the last speech frame's end
    speech_share: float  # speech frames / frames from the first speech frame to the last (0 without speech)
    clipped_share: float  # samples in clipped runs / samples
    speech_dbfs: float  # RMS level of the speech frames (-inf without speech)


def frame_levels(audio: np.ndarray, frame: int) -> np.ndarray:
    """(S,) -> (F,) RMS level in dBFS of each whole frame of ``frame`` samples (a clip shorter than one frame is one
    frame; the last partial frame is left out)."""
    frames = max(1, len(audio) // frame)
    x = audio[: frames * frame].astype(np.float64)
    x = x.reshape(frames, -1) if len(x) else np.zeros((1, 1))  # (F, frame)
    return 20 * np.log10(np.maximum(np.sqrt((x * x).mean(1)), 1e-10))


def clipped_share(audio: np.ndarray, level: float, run: int) -> float:
    """Share of samples that sit at full scale in runs of at least ``run`` (naive loop in the tests)."""
    hot = np.abs(audio) >= level
    if not hot.any():
        return 0.0
    edges = np.diff(np.concatenate(([0], hot.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    lengths = ends - starts
    return float(lengths[lengths >= run].sum()) / len(audio)


def analyse(audio: np.ndarray, sample_rate: int, cfg: ClipChecks = ClipChecks()) -> AudioFacts:
    """Mono ``audio`` (S,) at its own rate -> :class:`AudioFacts`."""
    seconds = len(audio) / sample_rate
    frame = max(1, round(cfg.frame_seconds * sample_rate))
    levels = frame_levels(audio, frame)  # (F,)
    speech = levels > max(float(levels.max()) - cfg.activity_db, cfg.floor_dbfs)
    clipped = clipped_share(audio, cfg.clip_level, cfg.clip_run)
    if not speech.any():
        return AudioFacts(seconds, 0.0, 0.0, 0.0, clipped, -np.inf)
    index = np.flatnonzero(speech)
    step = frame / sample_rate
    power = float(np.mean(10 ** (levels[speech] / 10)))
    return AudioFacts(seconds, float(index[0] * step), float(min(seconds, (index[-1] + 1) * step)),
                      float(speech[index[0]: index[-1] + 1].mean()), clipped, 10 * np.log10(power))


def audio_problem(facts: AudioFacts, cfg: ClipChecks = ClipChecks()) -> tuple[str, str] | None:
    """(reason, detail) for audio that cannot be used as it is, else None (length is checked after trimming)."""
    if facts.clipped_share > cfg.max_clipped_share:
        return "clipped", f"{100 * facts.clipped_share:.2f}% of the samples at full scale"
    if facts.speech_share < cfg.min_speech_share:
        if facts.speech_end <= facts.speech_start:
            return "mostly silence", f"no speech in {facts.seconds:.1f} s"
        return "mostly silence", (f"speech in {100 * facts.speech_share:.0f}% of the "
                                  f"{facts.speech_end - facts.speech_start:.1f} s between its first and last sound")
    return None


def length_problem(seconds: float, cfg: ClipChecks = ClipChecks()) -> tuple[str, str] | None:
    """(reason, detail) for a trimmed clip of ``seconds`` outside the bounds, else None."""
    if seconds < cfg.min_seconds:
        return "too short", f"{seconds:.2f} s of speech (at least {cfg.min_seconds:g} s)"
    if seconds > cfg.max_seconds:
        return "too long", f"{seconds:.1f} s of speech (at most {cfg.max_seconds:g} s)"
    return None


def transcript_problem(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return "missing transcript", "no transcript for this audio"
    if not text.strip():
        return "empty transcript", "the transcript is empty"
    return None


def script_of(ch: str) -> str:
    """The script a letter belongs to, by the first word of its Unicode name (LATIN, CYRILLIC, CJK, ...)."""
    return unicodedata.name(ch, "UNKNOWN").split()[0]


def foreign_scripts(texts: Iterable[str], cfg: ClipChecks = ClipChecks()) -> frozenset[str]:
    """The scripts that make up at least ``min_script_share`` of all the texts' letters: the data's own."""
    counts = Counter(script_of(ch) for text in texts for ch in text if ch.isalpha())
    total = sum(counts.values()) or 1
    return frozenset(s for s, n in counts.items() if n / total >= cfg.min_script_share)


def speakable_problem(text: str, scripts: frozenset[str]) -> tuple[str, str] | None:
    """("unspeakable text", why) for a normalised text espeak-ng cannot read as it was spoken, else None.
    ``scripts``: the data's own scripts (:func:`foreign_scripts`)."""
    if not any(ch.isalpha() for ch in text):
        return "unspeakable text", "no words in it"
    odd = sorted({ch for ch in text if unicodedata.category(ch)[0] == "S"
                  or (unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cn") and not ch.isspace())})
    if odd:
        return "unspeakable text", f"symbols espeak-ng would read out or skip: {' '.join(odd)}"
    other = sorted({script_of(ch) for ch in text if ch.isalpha()} - scripts)
    if other:
        return "unspeakable text", f"letters of another script than the rest of the data ({', '.join(other)})"
    return None


def phonemes_problem(ipa: str) -> tuple[str, str] | None:
    """("unspeakable text", why) when espeak-ng's IPA for a text holds no speech sound."""
    from duet.data.timing import is_speech

    if not any(is_speech(ch) for ch in ipa):
        return "unspeakable text", "espeak-ng gives no phonemes for it"
    return None
