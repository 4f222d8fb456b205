"""Forced alignment of text tokens to codec frames: the duration predictor's per-token targets (Luna §2.5 trains it
on forced-alignment durations).

The corpus has no alignments, and its real recordings (Asterisk) have no synthesiser timing, so duet aligns every
utterance the same way, by a monotonic alignment search (Glow-TTS, Kim et al. 2020) under a flat-start model fitted
to the corpus itself:

* features: a log-mel frame per codec frame (the code grid's rate), each utterance normalised to zero mean;
* emissions: one diagonal Gaussian per token type (shared variance), so log p(x_t | token s) =
  -1/2 sum_d (x_td - mu_{k(s),d})^2 / var_d up to a constant;
* alignment: the monotonic path that maximises the summed log-likelihood, every token of the wrapped text
  [SOT, tokens..., EOT] taking at least one frame, in order (SOT and EOT take the leading and trailing silence);
* EM: start from the character-proportional spread (``duet.data.token_rows.spread_frames``, SOT and EOT one frame each),
  re-estimate the means and the variance from the current alignments, re-align all utterances; a few rounds.

An utterance with fewer frames than tokens cannot give every token a frame; it keeps the spread targets and is
counted. The alignment file (JSON lines: a header with the tokenizer's fingerprint, then ``{"id", "durations"}``)
is read by ``duet train luna --alignments`` (``duet.luna.data``).

Shape legend: S tokens of the wrapped text, T frames, D feature bins, V token types.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from duet.errors import DuetError

FORMAT = "duet-alignments/1"


@dataclass(frozen=True)
class AlignerConfig:
    iterations: int = 6  # EM rounds (alignment, then means and variance)
    n_mels: int = 40
    n_fft: int = 2048
    min_var: float = 1e-2  # floor of the shared per-bin variance


def monotonic_alignment(log_lik: np.ndarray) -> np.ndarray:
    """log_lik (S, T) -> durations (S,) ints >= 1 adding up to T: the monotonic path (token s covers a run of frames,
    tokens in order) with the largest summed log-likelihood. Dynamic programming over frames, O(S T)."""
    S, T = log_lik.shape
    if T < S:
        raise DuetError(f"cannot give each of {S} tokens a frame of {T}")
    best = np.full(S, -np.inf)  # best[s]: best score of a path ending in token s at the current frame
    best[0] = log_lik[0, 0]
    advanced = np.zeros((T, S), dtype=bool)  # at frame t, token s was entered from s-1 (not stayed in)
    for t in range(1, T):
        enter = np.concatenate(([-np.inf], best[:-1]))  # (S,) from token s-1 at t-1
        advanced[t] = enter > best
        best = np.maximum(best, enter) + log_lik[:, t]
    durations = np.zeros(S, dtype=np.int64)
    s = S - 1
    for t in range(T - 1, -1, -1):  # walk back from the last token at the last frame
        durations[s] += 1
        if t and advanced[t, s]:
            s -= 1
    if s != 0:  # cannot happen for T >= S: every finite path starts in token 0 at frame 0
        raise DuetError("alignment backtrack did not reach the first token")
    return durations


def log_likelihoods(feats: np.ndarray, means: np.ndarray, inv_var: np.ndarray) -> np.ndarray:
    """feats (T, D), per-token means (S, D), inverse variance (D,) -> (S, T) Gaussian log-likelihoods (no constant)."""
    w = np.sqrt(inv_var)  # (D,)
    x, m = feats * w, means * w  # whitened
    return -0.5 * ((m * m).sum(1)[:, None] - 2.0 * m @ x.T + (x * x).sum(1)[None, :])


@dataclass(frozen=True)
class AlignItem:
    """What alignment needs of one utterance: its wrapped token ids and features, and where EM starts."""

    id: str
    ids: np.ndarray  # (S,) token ids of [SOT, tokens..., EOT]
    feats: np.ndarray  # (T, D) float32
    init: np.ndarray  # (S,) starting durations adding up to T (may hold zeros)


@dataclass(frozen=True)
class AlignResult:
    durations: dict[str, np.ndarray]  # id -> (S,) frames per token, adding up to T
    fallback: tuple[str, ...]  # ids that kept their starting durations (fewer frames than tokens)
    log_lik: tuple[float, ...]  # mean per-frame Gaussian log-likelihood of each round's alignment (should rise)


def _frame_tokens(ids: np.ndarray, durations: np.ndarray) -> np.ndarray:
    return np.repeat(ids, durations)  # (T,) the token type of every frame


def fit_alignments(utts: Sequence[AlignItem], vocab_size: int, cfg: AlignerConfig = AlignerConfig(),
                   progress: bool = False) -> AlignResult:
    """EM over the corpus (module doc): Gaussian means per token type from the current alignments, then the monotonic
    alignment of every utterance under them."""
    if not utts:
        raise DuetError("no utterances to align")
    D = utts[0].feats.shape[1]
    current = {u.id: u.init for u in utts}
    fallback = tuple(u.id for u in utts if u.feats.shape[0] < len(u.ids))
    aligned = [u for u in utts if u.feats.shape[0] >= len(u.ids)]
    scores = []
    for _ in _rounds(cfg.iterations, progress):
        sums, counts = np.zeros((vocab_size, D)), np.zeros(vocab_size)
        sq = np.zeros(D)
        types = [_frame_tokens(u.ids, current[u.id]) for u in utts]  # (T,) each: every frame's token type
        for u, t in zip(utts, types):
            np.add.at(sums, t, u.feats)
            np.add.at(counts, t, 1.0)
        total = counts.sum()
        overall = sums.sum(0) / total  # (D,) a type never seen takes the corpus mean
        means = np.where(counts[:, None] > 0, sums / np.maximum(counts, 1.0)[:, None], overall)  # (V, D)
        for u, t in zip(utts, types):
            sq += ((u.feats - means[t]) ** 2).sum(0)
        inv_var = 1.0 / np.maximum(sq / total, cfg.min_var)  # (D,)
        log_norm = 0.5 * float(np.log(inv_var / (2.0 * np.pi)).sum())  # the Gaussian's constant, for the score
        score, frames = 0.0, 0
        for u in aligned:
            ll = log_likelihoods(u.feats, means[u.ids], inv_var)  # (S, T)
            current[u.id] = monotonic_alignment(ll)
            score += float(ll[np.repeat(np.arange(len(u.ids)), current[u.id]), np.arange(ll.shape[1])].sum())
            frames += ll.shape[1]
        scores.append(score / max(frames, 1) + log_norm)
    return AlignResult(current, fallback, tuple(scores))


def _rounds(n: int, progress: bool) -> Iterator[int]:
    if not progress:
        yield from range(n)
        return
    from tqdm import tqdm

    yield from tqdm(range(n), desc="alignment EM", unit="round")


# ---- the alignment file -------------------------------------------------------------------------------------------


def tokenizer_fingerprint(tokenizer_json: str | Path) -> str:
    """SHA-256 of a tokenizer.json: alignments hold token positions, valid only for the tokenizer that made them."""
    return hashlib.sha256(Path(tokenizer_json).read_bytes()).hexdigest()


def write_alignments(path: str | Path, durations: dict[str, np.ndarray], tokenizer_json: str | Path,
                     info: dict | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = {"format": FORMAT, "tokenizer_sha256": tokenizer_fingerprint(tokenizer_json), **(info or {})}
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for uid in sorted(durations):
            f.write(json.dumps({"id": uid, "durations": [int(d) for d in durations[uid]]}) + "\n")
    tmp.replace(path)
    return path


def read_alignments(path: str | Path, tokenizer_json: str | Path) -> dict[str, tuple[int, ...]]:
    """id -> durations of the wrapped text; a file made with another tokenizer is a DuetError."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0]) if lines else {}
        rows = [json.loads(line) for line in lines[1:] if line.strip()]
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"cannot read alignments {path}: {err}") from err
    if header.get("format") != FORMAT:
        raise DuetError(f"{path} is not a duet alignment file (format {header.get('format')!r})")
    if header.get("tokenizer_sha256") != tokenizer_fingerprint(tokenizer_json):
        raise DuetError(f"{path} was made with another tokenizer than {tokenizer_json}: align again with it")
    return {r["id"]: tuple(int(d) for d in r["durations"]) for r in rows}
