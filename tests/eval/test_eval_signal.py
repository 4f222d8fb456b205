"""PESQ-WB, STOI and MCD: identity, monotone degradation with noise, and MCD/DTW against naive loops."""

import math

import numpy as np
import pytest

from duet.audio import load_audio
from duet.metrics.signal import MCD_CONSTANT, MCDConfig, dtw_path, mel_cepstral_distance, mel_cepstrum, pesq_wb, stoi


@pytest.fixture(scope="module")
def speech(espeak, speech_dir):
    path = espeak("The quick brown fox jumps over the lazy dog near the river bank.", "en", speech_dir / "sig.wav")
    return load_audio(path)  # (samples, 22050)


def _noisy(x: np.ndarray, snr_db: float) -> np.ndarray:
    noise = np.random.default_rng(0).standard_normal(len(x)).astype(np.float32)
    return x + noise * np.sqrt(np.mean(x**2) / 10 ** (snr_db / 10))


def test_identical_signals_score_perfectly(speech):
    x, sr = speech
    pytest.importorskip("pesq")
    pytest.importorskip("pystoi")
    assert pesq_wb(x, x, sr) == pytest.approx(4.64, abs=0.01)  # the top of P.862.2's MOS-LQO range
    assert stoi(x, x, sr) == pytest.approx(1.0, abs=1e-6)
    assert mel_cepstral_distance(x, x, sr) == 0.0


def test_more_noise_scores_worse_on_every_metric(speech):
    x, sr = speech
    pytest.importorskip("pesq")
    pytest.importorskip("pystoi")
    snrs = [30, 20, 10]  # dB, decreasing quality
    p = [pesq_wb(x, _noisy(x, s), sr) for s in snrs]
    s = [stoi(x, _noisy(x, s), sr) for s in snrs]
    m = [mel_cepstral_distance(x, _noisy(x, s), sr) for s in snrs]
    assert 4.64 > p[0] > p[1] > p[2]
    assert 1.0 > s[0] > s[1] > s[2]
    assert 0.0 < m[0] < m[1] < m[2]


def test_mcd_constant():
    assert MCD_CONSTANT == pytest.approx(6.141851, abs=1e-6)


def _naive_mcd(x: np.ndarray, y: np.ndarray, cfg: MCDConfig) -> float:
    """Frame by frame, band by band, coefficient by coefficient: the formula in the docstring, written out."""
    sr, n_fft, hop, n_mels = cfg.sample_rate, cfg.n_fft, cfg.hop_length, cfg.n_mels
    mel = lambda f: 2595 * math.log10(1 + f / 700)
    imel = lambda m: 700 * (10 ** (m / 2595) - 1)
    edges = [imel(mel(cfg.fmin) + k * (mel(sr / 2) - mel(cfg.fmin)) / (n_mels + 1)) for k in range(n_mels + 2)]
    bin_hz = [k * sr / n_fft for k in range(n_fft // 2 + 1)]
    window = [0.5 - 0.5 * math.cos(2 * math.pi * k / (n_fft - 1)) for k in range(n_fft)]  # symmetric Hann

    def cepstra(sig):
        out = []
        for start in range(0, len(sig) - n_fft + 1, hop):
            spec = np.fft.rfft(np.asarray(sig[start : start + n_fft], dtype=np.float64) * window)
            power = np.abs(spec) ** 2
            log_amp = []
            for b in range(n_mels):
                lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
                e = 0.0
                for k, f in enumerate(bin_hz):
                    if lo < f <= mid:
                        e += power[k] * (f - lo) / (mid - lo)
                    elif mid < f < hi:
                        e += power[k] * (hi - f) / (hi - mid)
                log_amp.append(math.log(max(math.sqrt(e), cfg.amp_floor)))
            c = [
                sum(log_amp[m] * math.cos(math.pi * d * (m + 0.5) / n_mels) for m in range(n_mels)) / n_mels
                for d in range(1, cfg.n_cep + 1)
            ]
            out.append(c)
        return out

    cx, cy = cepstra(x), cepstra(y)
    n = min(len(cx), len(cy))
    total = sum(math.sqrt(sum((a - b) ** 2 for a, b in zip(cx[t], cy[t]))) for t in range(n))
    return 10 * math.sqrt(2) / math.log(10) * total / n


def test_mcd_matches_naive_loop():
    # Small config so the pure-Python reference stays fast; both inputs already at cfg.sample_rate.
    cfg = MCDConfig(sample_rate=8000, n_fft=128, hop_length=64, n_mels=20, n_cep=12)
    rng = np.random.default_rng(1)
    t = np.arange(4000) / 8000
    x = (np.sin(2 * np.pi * 220 * t) + 0.3 * rng.standard_normal(len(t))).astype(np.float32)
    t2 = t[:3700]  # unequal lengths: the longer one is trimmed
    y = (np.sin(2 * np.pi * 330 * t2) + 0.1 * rng.standard_normal(len(t2))).astype(np.float32)
    assert mel_cepstral_distance(x, y, 8000, cfg) == pytest.approx(_naive_mcd(x, y, cfg), rel=1e-9)


def test_mcd_ignores_gain_because_c0_is_excluded(speech):
    x, sr = speech
    # ln(0.5 A) = ln A + ln 0.5 moves c_0 only; the tiny residue comes from bands at the silence floor.
    assert mel_cepstral_distance(x, 0.5 * x, sr) < 0.01
    assert mel_cepstrum(x, sr).shape[1] == MCDConfig().n_cep + 1


def _naive_dtw(cost):
    n, m = cost.shape
    acc = [[math.inf] * (m + 1) for _ in range(n + 1)]
    acc[0][0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            acc[i][j] = cost[i - 1, j - 1] + min(acc[i - 1][j - 1], acc[i - 1][j], acc[i][j - 1])
    path, i, j = [(n - 1, m - 1)], n, m
    while (i, j) != (1, 1):
        i, j = min([(i - 1, j - 1), (i - 1, j), (i, j - 1)], key=lambda ij: acc[ij[0]][ij[1]])
        path.append((i - 1, j - 1))
    return acc[n][m], path[::-1]


@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (7, 1), (9, 13), (20, 11)])
def test_dtw_matches_naive_double_loop(shape):
    cost = np.random.default_rng(sum(shape)).random(shape)
    total, path = _naive_dtw(cost)
    pi, pj = dtw_path(cost)
    assert list(zip(pi.tolist(), pj.tolist())) == path
    assert cost[pi, pj].sum() == pytest.approx(total)


def test_dtw_realigns_a_delayed_copy(speech):
    x, sr = speech
    delayed = np.concatenate([np.zeros(sr // 5, np.float32), x])  # 200 ms of leading silence
    trimmed = mel_cepstral_distance(x, delayed, sr)
    warped = mel_cepstral_distance(x, delayed, sr, MCDConfig(align="dtw"))
    assert trimmed > 5.0  # every frame compared with one 200 ms away
    assert warped < 1.5  # DTW undoes the shift up to sub-hop frame phase
