"""Prosodic features of one utterance: what a speaking style changes (pitch, its range, loudness, rate, spectral
tilt, voicing), as a fixed-length vector for the emotion classifier (``duet.eval.emotion``).

Frames are those of the pitch tracker (``duet.eval.pitch``: 40 ms, 10 ms hop, 16 kHz); speech frames are those within
35 dB of the loudest. Pitch is in semitones re 100 Hz over voiced frames. Tilt is the slope, in dB per octave, of the
mean speech-frame power spectrum against log frequency from 100 Hz to 5 kHz; whispered speech has almost no voiced
frames and a flatter spectrum. Rate is words per second of speech (the text is known wherever styles are scored:
a corpus manifest, or the text a model was asked to say).

Shape legend: S samples, T frames, F frequency bins.
"""

from __future__ import annotations

import numpy as np

from duet.audio import resample, to_mono
from duet.eval.pitch import SAMPLE_RATE, PitchConfig, frames_of, yin

FEATURES: tuple[str, ...] = (
    "f0_median_st",  # semitones re 100 Hz
    "f0_std_st",
    "f0_range_st",  # 90th - 10th percentile
    "f0_slope_st",  # mean |change| between consecutive voiced frames, semitones per frame
    "voiced_fraction",  # of speech frames
    "level_db",  # mean speech-frame level, dBFS
    "level_std_db",
    "tilt_db_per_octave",
    "centroid_khz",
    "flatness",  # spectral flatness (geometric / arithmetic mean power), mean over speech frames
    "speech_fraction",  # speech frames / all frames
    "words_per_s",
)
SPEECH_DB = 35.0


def prosodic_features(audio: np.ndarray, sample_rate: int, n_words: int, config: PitchConfig = PitchConfig(),
                      ) -> np.ndarray:
    """(S,) audio of an utterance of ``n_words`` words -> (len(FEATURES),) float64."""
    f0, hop_s = yin(audio, sample_rate, config)
    x = resample(to_mono(np.asarray(audio, dtype=np.float32)), sample_rate, SAMPLE_RATE).astype(np.float64)
    w, hop = int(config.frame_s * SAMPLE_RATE), int(config.hop_s * SAMPLE_RATE)
    frames = frames_of(x, w, hop)[: len(f0)]  # (T, W)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)  # (T,)
    speech = level > level.max() - SPEECH_DB
    voiced = (f0 > 0) & speech
    st = 12 * np.log2(f0[voiced] / 100.0) if voiced.any() else np.zeros(1)
    steps = np.abs(np.diff(12 * np.log2(np.where(voiced, f0, 1.0) / 100.0)))[voiced[1:] & voiced[:-1]]
    power = np.abs(np.fft.rfft(frames[speech] * np.hanning(w), axis=1)) ** 2  # (T_speech, F)
    freqs = np.fft.rfftfreq(w, 1 / SAMPLE_RATE)
    mean_power = power.mean(axis=0)
    band = (freqs >= 100) & (freqs <= 5000)
    tilt = np.polyfit(np.log2(freqs[band]), 10 * np.log10(mean_power[band] + 1e-12), 1)[0]
    centroid = float((freqs * mean_power).sum() / max(mean_power.sum(), 1e-12)) / 1000
    flatness = np.exp(np.mean(np.log(power + 1e-12), axis=1)) / np.maximum(power.mean(axis=1), 1e-12)
    speech_s = speech.sum() * hop_s
    return np.array([
        float(np.median(st)),
        float(np.std(st)),
        float(np.percentile(st, 90) - np.percentile(st, 10)),
        float(np.mean(steps)) if steps.size else 0.0,
        float(voiced.sum() / max(speech.sum(), 1)),
        float(np.mean(level[speech])),
        float(np.std(level[speech])),
        float(tilt),
        centroid,
        float(np.mean(flatness)),
        float(speech.mean()),
        n_words / max(speech_s, 1e-3),
    ])
