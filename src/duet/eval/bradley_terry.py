"""Bradley-Terry strengths from pairwise listening judgments, on an Elo-like scale (Luna-TTS §6.3).

Model (Bradley & Terry 1952): system i beats system j with probability sigmoid(b_i - b_j). We fit b by maximum
likelihood with Newton's method on the logistic log-likelihood (k systems: a k x k Hessian, converges in a few
steps). A tie counts as half a win for each side (outcome 0.5 in the likelihood), as in Chatbot Arena's
published analysis. Strengths are identified up to a constant, so they are centred; an optional L2 penalty
``l2 / 2 * sum(b^2)`` keeps the estimate finite when a system wins or loses every comparison (the plain MLE
diverges then). The default penalty is tiny: with 1000 judgments it moves ratings by well under a point.

Reported scale (the report's convention): rating_i = 1500 + (400 / ln 10) * (b_i - mean(b)), so the mean rating
is 1500 and a 400-point gap means 10:1 odds. Uncertainty: 300 bootstrap resamples of the judgments (with
replacement), refitted; we report the median and the 5th-95th percentile interval of each system's rating.

Shape legend: K systems, P judgments.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.errors import DuetError
from duet.eval.testset import Problem

ELO_BASE = 1500.0
ELO_SCALE = 400.0 / math.log(10.0)  # rating points per logit
CHOICES = ("left", "right", "tie")


@dataclass(frozen=True)
class Judgments:
    """P judgments as arrays: winner-side index ``a``, other side ``b``, outcome 1 (a won) / 0.5 (tie)."""

    systems: tuple[str, ...]
    a: np.ndarray  # (P,) int
    b: np.ndarray  # (P,) int
    outcome: np.ndarray  # (P,) float: 1.0 = a beat b, 0.0 = b beat a, 0.5 = tie

    def __len__(self) -> int:
        return len(self.a)


def judgments_from_records(records: Sequence[dict]) -> Judgments:
    """Records with ``left``, ``right`` (system names) and ``choice`` (left | right | tie)."""
    systems = tuple(sorted({r["left"] for r in records} | {r["right"] for r in records}))
    index = {s: i for i, s in enumerate(systems)}
    a = np.array([index[r["left"]] for r in records], dtype=np.int64)
    b = np.array([index[r["right"]] for r in records], dtype=np.int64)
    outcome = np.array([{"left": 1.0, "right": 0.0, "tie": 0.5}[r["choice"]] for r in records])
    return Judgments(systems, a, b, outcome)


def read_judgments(path: str | Path) -> tuple[list[dict], list[Problem]]:
    """The arena's JSONL file; malformed lines become problems with their line number, not exceptions."""
    path = Path(path)
    if not path.is_file():
        raise DuetError(f"judgments file not found: {path}")
    records, problems = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            if not isinstance(r, dict):
                raise ValueError("not a JSON object")
            if not (isinstance(r.get("left"), str) and isinstance(r.get("right"), str) and r["left"]
                    and r["right"]):
                raise ValueError("needs 'left' and 'right' system names")
            if r["left"] == r["right"]:
                raise ValueError("a system judged against itself")
            if r.get("choice") not in CHOICES:
                raise ValueError(f"'choice' must be one of {', '.join(CHOICES)}, got {r.get('choice')!r}")
        except ValueError as err:  # json.JSONDecodeError is a ValueError
            problems.append(Problem(lineno, None, "parse", str(err)))
            continue
        records.append(r)
    return records, problems


def fit_strengths(j: Judgments, l2: float = 1e-4, max_iter: int = 100, tol: float = 1e-10) -> np.ndarray:
    """Penalised MLE of the Bradley-Terry logits (K,), centred to mean 0.

    Newton steps on the concave objective sum_p [y log s(d) + (1 - y) log(1 - s(d))] - l2/2 |b|^2 with
    d = b_a - b_b, s = sigmoid, restricted to mean-zero b (the likelihood is flat along the all-ones direction,
    so we add the constraint's projection to the Hessian instead of relying on the penalty alone).
    """
    k = len(j.systems)
    if k < 2:
        raise DuetError(f"a Bradley-Terry fit needs at least two systems, got {k}")
    if l2 < 0:
        raise DuetError(f"l2 must be >= 0, got {l2}")
    beta = np.zeros(k)
    ones = np.ones((k, k)) / k

    def objective(b: np.ndarray) -> float:
        d = b[j.a] - b[j.b]
        # log s(d) = -log(1 + e^-d); written with logaddexp for large |d|
        return float(-(j.outcome * np.logaddexp(0, -d) + (1 - j.outcome) * np.logaddexp(0, d)).sum()
                     - 0.5 * l2 * (b @ b))

    value = objective(beta)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(beta[j.a] - beta[j.b])))  # (P,)
        resid = j.outcome - p
        grad = np.zeros(k)
        np.add.at(grad, j.a, resid)
        np.add.at(grad, j.b, -resid)
        grad -= l2 * beta
        w = p * (1 - p)
        hess = np.zeros((k, k))  # the negative Hessian (positive semi-definite)
        np.add.at(hess, (j.a, j.a), w)
        np.add.at(hess, (j.b, j.b), w)
        np.add.at(hess, (j.a, j.b), -w)
        np.add.at(hess, (j.b, j.a), -w)
        hess += l2 * np.eye(k) + ones  # `ones`: pins the mean (the likelihood's flat direction)
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:  # only without a penalty, once a sweep has pushed every p to 0 or 1
            break
        step -= step.mean()
        t = 1.0
        while True:  # backtracking keeps every step an ascent step, even far from the optimum
            new = beta + t * step
            new_value = objective(new)
            if new_value >= value - 1e-12 or t < 1e-6:
                break
            t /= 2
        beta, value = new, new_value
        if np.max(np.abs(t * step)) < tol:
            return beta - beta.mean()
    if l2 == 0:
        raise DuetError("the Bradley-Terry MLE does not converge: a system wins or loses every comparison it is "
                        "in (use l2 > 0)")
    return beta - beta.mean()


def to_elo(beta: np.ndarray) -> np.ndarray:
    """Logits -> ratings with mean 1500 and 400 points per factor 10 in odds."""
    return ELO_BASE + ELO_SCALE * (beta - beta.mean())


@dataclass(frozen=True)
class SystemRating:
    system: str
    rating: float  # from the fit on all judgments
    median: float  # bootstrap median
    low: float  # 5th percentile
    high: float  # 95th percentile
    wins: int
    losses: int
    ties: int


@dataclass(frozen=True)
class ArenaResult:
    ratings: list[SystemRating]  # best first
    head_to_head: dict[str, dict[str, tuple[float, int]]]  # row system -> column system -> (win rate, games)
    judgments: int
    bootstrap: int


def head_to_head(j: Judgments) -> dict[str, dict[str, tuple[float, int]]]:
    """Win rate of each system against each other one: (wins + ties / 2) / games, and the number of games."""
    k = len(j.systems)
    score = np.zeros((k, k))
    games = np.zeros((k, k), dtype=np.int64)
    np.add.at(score, (j.a, j.b), j.outcome)
    np.add.at(score, (j.b, j.a), 1 - j.outcome)
    np.add.at(games, (j.a, j.b), 1)
    np.add.at(games, (j.b, j.a), 1)
    return {j.systems[r]: {j.systems[c]: (float(score[r, c] / games[r, c]), int(games[r, c]))
                           for c in range(k) if c != r and games[r, c] > 0} for r in range(k)}


def fit_arena(j: Judgments, bootstrap: int = 300, seed: int = 0, l2: float = 1e-4) -> ArenaResult:
    """Ratings from all judgments plus the bootstrap median and 5-95 % interval of each."""
    if len(j) == 0:
        raise DuetError("no judgments to fit")
    k = len(j.systems)
    elo = to_elo(fit_strengths(j, l2))
    rng = np.random.default_rng(seed)
    samples = np.empty((bootstrap, k))
    for i in range(bootstrap):
        idx = rng.integers(0, len(j), len(j))  # (P,) resample with replacement
        samples[i] = to_elo(fit_strengths(Judgments(j.systems, j.a[idx], j.b[idx], j.outcome[idx]), l2))
    wins = np.zeros(k, dtype=np.int64)
    losses = np.zeros(k, dtype=np.int64)
    ties = np.zeros(k, dtype=np.int64)
    np.add.at(wins, j.a[j.outcome == 1.0], 1)
    np.add.at(wins, j.b[j.outcome == 0.0], 1)
    np.add.at(losses, j.b[j.outcome == 1.0], 1)
    np.add.at(losses, j.a[j.outcome == 0.0], 1)
    np.add.at(ties, j.a[j.outcome == 0.5], 1)
    np.add.at(ties, j.b[j.outcome == 0.5], 1)
    if bootstrap > 0:
        med, low, high = (np.percentile(samples, q, axis=0) for q in (50, 5, 95))
    else:
        med = low = high = elo
    ratings = [SystemRating(s, float(elo[i]), float(med[i]), float(low[i]), float(high[i]), int(wins[i]),
                            int(losses[i]), int(ties[i])) for i, s in enumerate(j.systems)]
    ratings.sort(key=lambda r: -r.rating)
    return ArenaResult(ratings, head_to_head(j), len(j), bootstrap)


def format_arena(result: ArenaResult) -> str:
    """Markdown: the rating table and the head-to-head win-rate matrix."""
    from duet.eval.report import markdown_table

    rows = [[r.system, f"{r.rating:.0f}", f"{r.median:.0f}", f"{r.low:.0f} - {r.high:.0f}", str(r.wins),
             str(r.losses), str(r.ties)] for r in result.ratings]
    out = [f"{result.judgments} judgments; Bradley-Terry, Elo-like scale (mean 1500, 400 per 10x odds); "
           f"{result.bootstrap} bootstrap resamples", "",
           markdown_table(["system", "rating", "median", "5-95 %", "wins", "losses", "ties"], rows), "",
           "Head to head: row's win rate against column ((wins + ties/2) / games, games in brackets)", ""]
    names = [r.system for r in result.ratings]
    matrix = [[a] + [("" if a == b else (f"{100 * result.head_to_head[a][b][0]:.0f}% ({result.head_to_head[a][b][1]})"
                                          if b in result.head_to_head[a] else "-")) for b in names] for a in names]
    out.append(markdown_table(["", *names], matrix))
    return "\n".join(out) + "\n"
