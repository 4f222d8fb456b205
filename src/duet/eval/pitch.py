"""A YIN pitch tracker (de Cheveigné & Kawahara 2002, "YIN, a fundamental frequency estimator for speech and
music"), vectorised over frames with numpy FFTs.

Per 40 ms frame (10 ms hop, at 16 kHz): the difference function d(tau) of step 2 from one cross-correlation and
running energies, the cumulative-mean-normalised d'(tau) of step 3, the first dip below ``threshold`` (step 4:
absolute threshold, then the local minimum after it) refined by a parabola (step 5). A frame is voiced when such a
dip exists and the frame is within ``floor_db`` of the loudest one; unvoiced frames get f0 = 0.

Shape legend: S samples, T frames, W samples per frame, L lags.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from duet.audio import resample, to_mono

SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class PitchConfig:
    fmin: float = 60.0
    fmax: float = 500.0
    frame_s: float = 0.04
    hop_s: float = 0.01
    threshold: float = 0.2  # YIN step 4 (0.15 in the paper; synthetic voices are breathier)
    floor_db: float = 40.0  # quieter frames (relative to the loudest) are unvoiced


def frames_of(x: np.ndarray, length: int, hop: int) -> np.ndarray:
    """(S,) -> (T, W) frames starting every ``hop`` samples (the tail zero-padded)."""
    n = max(1, 1 + int(np.ceil(max(0, len(x) - length) / hop)))
    padded = np.zeros((n - 1) * hop + length, dtype=np.float64)
    padded[: len(x)] = x[: len(padded)]
    idx = np.arange(length)[None, :] + hop * np.arange(n)[:, None]  # (T, W)
    return padded[idx]


def yin(audio: np.ndarray, sample_rate: int, config: PitchConfig = PitchConfig()) -> tuple[np.ndarray, float]:
    """(S,) audio -> ((T,) f0 in Hz with 0 where unvoiced, frame hop in s)."""
    x = resample(to_mono(np.asarray(audio, dtype=np.float32)), sample_rate, SAMPLE_RATE).astype(np.float64)
    w = int(config.frame_s * SAMPLE_RATE)
    hop = int(config.hop_s * SAMPLE_RATE)
    tau_max = min(int(SAMPLE_RATE / config.fmin), w // 2)
    tau_min = max(2, int(SAMPLE_RATE / config.fmax))
    win = w - tau_max  # the integration window of step 2
    frames = frames_of(x, w, hop)  # (T, W)
    n_fft = 1 << int(np.ceil(np.log2(2 * w)))
    spec_all = np.fft.rfft(frames, n_fft)
    spec_head = np.fft.rfft(frames[:, :win], n_fft)
    acf = np.fft.irfft(np.conj(spec_head) * spec_all, n_fft)[:, : tau_max + 1]  # (T, L) sum x[j] x[j + tau]
    sq = np.concatenate([np.zeros((len(frames), 1)), np.cumsum(frames**2, axis=1)], axis=1)  # (T, W + 1)
    lags = np.arange(tau_max + 1)
    energy0 = sq[:, win][:, None]  # (T, 1)
    energy_tau = sq[:, lags + win] - sq[:, lags]  # (T, L)
    d = np.maximum(energy0 + energy_tau - 2 * acf, 0.0)  # (T, L) step 2
    cum = np.cumsum(d[:, 1:], axis=1)
    dn = np.ones_like(d)
    dn[:, 1:] = d[:, 1:] * lags[1:] / np.maximum(cum, 1e-12)  # (T, L) step 3
    f0 = np.zeros(len(frames))
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = level > level.max() - config.floor_db
    for t in np.nonzero(loud)[0]:
        row = dn[t]
        below = np.nonzero(row[tau_min:tau_max] < config.threshold)[0]
        if not below.size:
            continue
        tau = tau_min + below[0]
        while tau + 1 < tau_max and row[tau + 1] < row[tau]:
            tau += 1
        a, b, c = row[tau - 1], row[tau], row[min(tau + 1, tau_max)]
        denom = a - 2 * b + c
        shift = 0.5 * (a - c) / denom if abs(denom) > 1e-12 else 0.0
        f0[t] = SAMPLE_RATE / (tau + float(np.clip(shift, -1, 1)))
    return f0, hop / SAMPLE_RATE
