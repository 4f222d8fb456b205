"""Reference-based signal metrics: PESQ-WB, STOI and mel-cepstral distance (MCD).

All three compare a degraded signal (codec output, resynthesis) with the reference it should equal, sample
for sample; they do not suit TTS output against a different recording of the same text, except MCD with DTW.

- PESQ-WB: ITU-T P.862.2 through the ``pesq`` package, at 16 kHz; MOS-LQO in [1.04, 4.64].
- STOI: Taal et al. 2011 through ``pystoi``; in [0, 1] (extended STOI, Jensen & Taal 2016, optional).
- MCD: implemented here, see :func:`mel_cepstral_distance`.

Shape legend: S samples, T frames, F frequency bins, M mel bands, D cepstral coefficients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.fft import dct

from duet.audio import check_audio, resample, to_mono
from duet.errors import DuetError, MissingDependency

PESQ_SAMPLE_RATE = 16_000  # wide-band PESQ is defined at 16 kHz only
_EXTRA_HINT = "pip install 'duet[eval]'"
MCD_CONSTANT = 10.0 * math.sqrt(2.0) / math.log(10.0)  # ~6.1418 dB per unit of cepstral distance


def _same_length(reference: np.ndarray, degraded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mono float32 at one rate, trimmed to the shorter length (both metrics need aligned, equal lengths)."""
    ref = check_audio(to_mono(reference), "reference")
    deg = check_audio(to_mono(degraded), "degraded")
    n = min(len(ref), len(deg))
    return ref[:n], deg[:n]


def pesq_wb(reference: np.ndarray, degraded: np.ndarray, sample_rate: int) -> float:
    """Wide-band PESQ of ``degraded`` against ``reference`` (both at ``sample_rate``, resampled to 16 kHz)."""
    try:
        from pesq import PesqError, pesq
    except ModuleNotFoundError as err:
        raise MissingDependency("pesq", _EXTRA_HINT) from err
    ref, deg = _same_length(reference, degraded)
    ref = resample(ref, sample_rate, PESQ_SAMPLE_RATE)
    deg = resample(deg, sample_rate, PESQ_SAMPLE_RATE)
    try:
        return float(pesq(PESQ_SAMPLE_RATE, ref, deg, "wb"))
    except PesqError as err:  # e.g. no speech found in the reference
        raise DuetError(f"PESQ cannot score this pair: {err}") from err


def stoi(reference: np.ndarray, degraded: np.ndarray, sample_rate: int, extended: bool = False) -> float:
    """Short-time objective intelligibility of ``degraded`` against ``reference``."""
    try:
        from pystoi import stoi as _stoi
    except ModuleNotFoundError as err:
        raise MissingDependency("pystoi", _EXTRA_HINT) from err
    ref, deg = _same_length(reference, degraded)
    # pystoi resamples to its internal 10 kHz itself.
    return float(_stoi(ref.astype(np.float64), deg.astype(np.float64), sample_rate, extended=extended))


# --------------------------------------------------------------------------------------------------------------
# Mel-cepstral distance


@dataclass(frozen=True)
class MCDConfig:
    sample_rate: int = 22_050  # both signals are resampled to this rate first
    n_fft: int = 1024  # 46 ms Hann window at 22.05 kHz
    hop_length: int = 256  # 11.6 ms
    n_mels: int = 80
    n_cep: int = 24  # coefficients c_1 .. c_24 enter the distance; c_0 (energy) is excluded
    fmin: float = 0.0
    fmax: float | None = None  # None = Nyquist
    amp_floor: float = 1e-5  # floor on mel amplitude before the log, so digital silence is finite (-11.5)
    align: Literal["trim", "dtw"] = "trim"  # trim: frame t vs frame t; dtw: dynamic time warping


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f) / 700.0)  # HTK mel scale


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(m) / 2595.0) - 1.0)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float, fmax: float | None) -> np.ndarray:
    """(M, F) triangular filters, HTK mel scale, peak 1, F = n_fft // 2 + 1."""
    fmax = sample_rate / 2 if fmax is None else fmax
    freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)  # (F,)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))  # (M + 2,)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # (M, 1) each
    rising = (freqs[None, :] - lo) / (mid - lo)
    falling = (hi - freqs[None, :]) / (hi - mid)
    return np.maximum(0.0, np.minimum(rising, falling))  # (M, F)


def mel_cepstrum(audio: np.ndarray, sample_rate: int, config: MCDConfig = MCDConfig()) -> np.ndarray:
    """Audio (S,) -> mel-cepstra (T, n_cep + 1), column d = c_d, c_0 included.

    c_d = (1/M) * sum_m ln A_m * cos(pi * d * (m + 1/2) / M), with A_m the mel-band amplitude (square root of
    the filterbank-weighted power). This is the cosine series ln A_m = c_0 + 2 * sum_{d>=1} c_d cos(...), i.e.
    the convention of SPTK's mel-cepstra (natural log of amplitude), for which the classic MCD constant
    10*sqrt(2)/ln 10 is stated. SPTK warps frequency with an all-pass filter instead of a filterbank, so our
    values are in the same range as SPTK-based MCD but not equal to it.
    """
    x = resample(check_audio(to_mono(audio)), sample_rate, config.sample_rate).astype(np.float64)
    if len(x) < config.n_fft:
        x = np.pad(x, (0, config.n_fft - len(x)))
    n_frames = 1 + (len(x) - config.n_fft) // config.hop_length
    idx = np.arange(config.n_fft)[None, :] + config.hop_length * np.arange(n_frames)[:, None]  # (T, n_fft)
    frames = x[idx] * np.hanning(config.n_fft)[None, :]  # (T, n_fft)
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # (T, F)
    fb = mel_filterbank(config.sample_rate, config.n_fft, config.n_mels, config.fmin, config.fmax)  # (M, F)
    log_amp = np.log(np.maximum(np.sqrt(power @ fb.T), config.amp_floor))  # (T, M)
    # scipy's unnormalised DCT-II is 2 * sum_m x_m cos(pi d (2m+1) / 2M); halve and divide by M for c_d above.
    cep = dct(log_amp, type=2, axis=1, norm=None) / (2 * config.n_mels)  # (T, M)
    return cep[:, : config.n_cep + 1]  # (T, D + 1)


def dtw_path(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost monotone alignment of a (T1, T2) cost matrix, steps (1,0), (0,1), (1,1).

    Returns frame indices (i, j) along the path, from (0, 0) to (T1-1, T2-1). The accumulated cost is filled one
    anti-diagonal at a time: every cell on diagonal i + j = s depends only on diagonals s - 1 and s - 2, so each
    diagonal is one vectorised numpy step instead of a Python loop per cell.
    """
    n, m = cost.shape
    acc = np.full((n + 1, m + 1), np.inf)  # acc[i, j] = best cost to reach cell (i-1, j-1); row/col 0 = border
    acc[0, 0] = 0.0
    for s in range(2, n + m + 1):
        i = np.arange(max(1, s - m), min(n, s - 1) + 1)
        j = s - i
        best = np.minimum(np.minimum(acc[i - 1, j - 1], acc[i - 1, j]), acc[i, j - 1])
        acc[i, j] = cost[i - 1, j - 1] + best
    # Backtrack; ties prefer the diagonal step, then the step in i, then the step in j.
    i, j = n, m
    path = [(i - 1, j - 1)]
    while (i, j) != (1, 1):
        steps = ((i - 1, j - 1), (i - 1, j), (i, j - 1))
        i, j = min(steps, key=lambda ij: acc[ij])
        path.append((i - 1, j - 1))
    path.reverse()
    pi, pj = zip(*path)
    return np.asarray(pi), np.asarray(pj)


def mel_cepstral_distance(
    reference: np.ndarray, degraded: np.ndarray, sample_rate: int, config: MCDConfig = MCDConfig()
) -> float:
    """MCD in dB = 10 * sqrt(2) / ln 10 * mean over aligned frames of sqrt(sum_{d=1}^{D} (c_d - c'_d)^2).

    c_0 (overall level) is left out, so a gain change alone barely moves MCD. Frames are aligned by trimming the
    longer signal (``align="trim"``) or by DTW on the same per-frame distance (``align="dtw"``, the usual choice
    for TTS output against a recording of the same text); the mean is then over the DTW path.
    """
    ref = mel_cepstrum(reference, sample_rate, config)[:, 1:]  # (T1, D)
    deg = mel_cepstrum(degraded, sample_rate, config)[:, 1:]  # (T2, D)
    if config.align == "trim":
        n = min(len(ref), len(deg))
        dist = np.sqrt(((ref[:n] - deg[:n]) ** 2).sum(axis=1))  # (T,)
    elif config.align == "dtw":
        # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b: no (T1, T2, D) temporary (140 MB for two 10 s clips).
        sq = (ref**2).sum(1)[:, None] + (deg**2).sum(1)[None, :] - 2.0 * ref @ deg.T  # (T1, T2)
        cost = np.sqrt(np.maximum(sq, 0.0))
        pi, pj = dtw_path(cost)
        dist = cost[pi, pj]
    else:
        raise DuetError(f"MCD alignment must be 'trim' or 'dtw', got {config.align!r}")
    return float(MCD_CONSTANT * dist.mean())
