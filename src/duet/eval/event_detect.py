"""A non-verbal event detector of ours: spectral templates of breath, cough, laughter and sigh, matched against an
utterance's log-mel spectrogram by normalised cross-correlation.

Templates: each event's mean log-mel patch over ``template_seeds`` renderings of duet's own event synthesiser
(``duet.data.nonverbal_sounds``), each resampled in time to their median length, then averaged. Detection: the
utterance's log-mel frames (25 ms, 10 ms hop, 16 kHz, 32 bands, floored 60 dB under the loudest frame) are scored
at every frame offset against each template at three time scales (0.8, 1, 1.25: events vary in length) by the
Pearson correlation of the whole patch, among patches loud enough (within ``min_level_db`` of the loudest frame);
then, greedily from the best score down, each score above its event's threshold becomes a detection and silences every
other candidate that overlaps it. What it finds are sounds shaped like duet's events, in level-independent
spectro-temporal shape, which is what a model trained on the expressive corpus learns to make.

Shape legend: S samples, T frames, M mel bands, E template frames.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from duet.audio import resample, to_mono
from duet.data.nonverbal_sounds import SOUNDS, event_sound
from duet.eval.pitch import frames_of
from duet.metrics.signal import mel_filterbank

SAMPLE_RATE = 16_000
Event = tuple[str, float, float]  # (event name, start_s, end_s)


@dataclass(frozen=True)
class DetectorConfig:
    n_mels: int = 32
    frame_s: float = 0.025
    hop_s: float = 0.01
    floor_db: float = 60.0
    # Pearson correlation of a patch with each template above which it is that event: set on a micro expressive
    # build (24 readings of four voices), where the tagged events scored 0.94-0.95 (breath), 0.94-0.95 (cough),
    # 0.78-0.91 (laughter), 0.97 (sigh) and the best patch of speech elsewhere up to 0.71, 0.80, 0.65 and 0.67
    thresholds: tuple[tuple[str, float], ...] = (("breath", 0.8), ("cough", 0.88), ("laughter", 0.72), ("sigh", 0.8))
    min_level_db: float = 40.0  # a patch's mean level must be within this of the loudest frame
    scales: tuple[float, ...] = (0.8, 1.0, 1.25)
    template_seeds: int = 8
    events: tuple[str, ...] = SOUNDS


def log_mel(audio: np.ndarray, sample_rate: int, config: DetectorConfig = DetectorConfig()) -> np.ndarray:
    """(S,) -> (T, M) log-mel power in dB, floored ``floor_db`` below its maximum."""
    x = resample(to_mono(np.asarray(audio, dtype=np.float32)), sample_rate, SAMPLE_RATE).astype(np.float64)
    w, hop = int(config.frame_s * SAMPLE_RATE), int(config.hop_s * SAMPLE_RATE)
    n_fft = 1 << int(np.ceil(np.log2(w)))
    power = np.abs(np.fft.rfft(frames_of(x, w, hop) * np.hanning(w), n_fft)) ** 2  # (T, F)
    mel = power @ mel_filterbank(SAMPLE_RATE, n_fft, config.n_mels, 50.0, 7600.0).T  # (T, M)
    db = 10 * np.log10(mel + 1e-12)
    return np.maximum(db, db.max() - config.floor_db)


def _stretch(patch: np.ndarray, frames: int) -> np.ndarray:
    """(E, M) -> (frames, M) by linear interpolation in time."""
    src = np.linspace(0.0, 1.0, len(patch))
    dst = np.linspace(0.0, 1.0, frames)
    return np.stack([np.interp(dst, src, patch[:, m]) for m in range(patch.shape[1])], axis=1)


@functools.cache
def templates(config: DetectorConfig = DetectorConfig()) -> dict[str, np.ndarray]:
    """Event name -> (E, M) mean log-mel patch of its synthesised renderings."""
    out = {}
    for name in config.events:
        patches = [log_mel(event_sound(name, SAMPLE_RATE, seed), SAMPLE_RATE, config)
                   for seed in range(config.template_seeds)]
        length = int(np.median([len(p) for p in patches]))
        out[name] = np.mean([_stretch(p, length) for p in patches], axis=0)
    return out


def _correlate(spec: np.ndarray, template: np.ndarray) -> np.ndarray:
    """(T, M), (E, M) -> (T - E + 1,) Pearson correlation of each patch with the template."""
    t = template - template.mean()
    t /= max(float(np.linalg.norm(t)), 1e-12)
    patches = sliding_window_view(spec, template.shape, axis=(0, 1))[:, 0]  # (T - E + 1, E, M)
    centred = patches - patches.mean(axis=(1, 2), keepdims=True)
    norms = np.sqrt((centred**2).sum(axis=(1, 2)))
    return (centred * t).sum(axis=(1, 2)) / np.maximum(norms, 1e-9)


def detect_events(audio: np.ndarray, sample_rate: int, config: DetectorConfig = DetectorConfig()) -> list[Event]:
    """The events found in one utterance, in time order."""
    spec = log_mel(audio, sample_rate, config)
    level = spec.mean(axis=1)  # (T,)
    candidates: list[tuple[float, str, int, int]] = []  # (score, name, first frame, frames)
    thresholds = dict(config.thresholds)
    for name, template in templates(config).items():
        for scale in config.scales:
            frames = max(3, int(round(len(template) * scale)))
            if frames > len(spec):
                continue
            score = _correlate(spec, _stretch(template, frames))
            loud = sliding_window_view(level, frames).mean(axis=1) > level.max() - config.min_level_db
            for t in np.nonzero((score > thresholds[name]) & loud)[0]:
                candidates.append((float(score[t]), name, int(t), frames))
    taken = np.zeros(len(spec), dtype=bool)
    found: list[Event] = []
    for _, name, t, frames in sorted(candidates, key=lambda c: -c[0]):
        if taken[t : t + frames].any():
            continue
        taken[t : t + frames] = True
        found.append((name, t * config.hop_s, (t + frames) * config.hop_s))
    return sorted(found, key=lambda e: e[1])
