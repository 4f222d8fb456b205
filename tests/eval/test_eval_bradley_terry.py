"""Bradley-Terry arena ratings: a hand-computed MLE, recovery of known strengths, judgments file parsing."""

import json
import math

import numpy as np
import pytest

from duet.errors import DuetError
from duet.eval.bradley_terry import (
    ELO_SCALE,
    Judgments,
    fit_arena,
    fit_strengths,
    format_arena,
    judgments_from_records,
    read_judgments,
    to_elo,
)


def _records(pairs):
    return [{"left": a, "right": b, "choice": c} for a, b, c in pairs]


def test_two_systems_mle_is_the_log_odds():
    # A beats B 3 times out of 4: the MLE of b_A - b_B is ln 3, i.e. 400 * log10(3) = 190.85 rating points.
    j = judgments_from_records(_records([("A", "B", "left")] * 2 + [("B", "A", "right"), ("B", "A", "left")]))
    beta = fit_strengths(j, l2=0.0)
    assert beta[0] - beta[1] == pytest.approx(math.log(3), abs=1e-9)
    elo = to_elo(beta)
    assert elo.mean() == pytest.approx(1500)
    assert elo[0] - elo[1] == pytest.approx(400 * math.log10(3), abs=1e-6)


def test_a_tie_is_half_a_win():
    # A-B: one win each plus two ties -> 2 : 2 -> equal strengths; A-C: A wins 1, tie 1 -> 1.5 : 0.5 -> ln 3
    j = judgments_from_records(_records([("A", "B", "left"), ("A", "B", "right"), ("A", "B", "tie"),
                                         ("B", "A", "tie"), ("A", "C", "left"), ("C", "A", "tie")]))
    res = fit_arena(j, bootstrap=0)
    by = {r.system: r for r in res.ratings}
    assert (by["A"].wins, by["A"].losses, by["A"].ties) == (2, 1, 3)
    assert res.head_to_head["A"]["B"] == (0.5, 4) and res.head_to_head["A"]["C"] == (0.75, 2)
    assert res.head_to_head["C"]["A"] == (0.25, 2) and "B" not in res.head_to_head["C"]


def test_sweep_needs_a_penalty():
    j = judgments_from_records(_records([("A", "B", "left")] * 5))
    with pytest.raises(DuetError, match="does not converge"):
        fit_strengths(j, l2=0.0)
    beta = fit_strengths(j, l2=1e-4)
    assert np.all(np.isfinite(beta)) and beta[0] > beta[1] + 5  # finite, and A far ahead


def test_recovers_known_strengths_within_bootstrap_interval():
    true = {"gt": 1700.0, "luna": 1550.0, "gepard": 1450.0, "codec": 1300.0}  # mean 1500
    names = sorted(true)
    rng = np.random.default_rng(1234)
    k, n = len(names), 3000
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k  # a != b
    beta = np.array([(true[s] - 1500.0) / ELO_SCALE for s in names])
    p_a = 1 / (1 + np.exp(-(beta[a] - beta[b])))
    # Simulated from the model itself, so without ties: ties drawn independently of strength would pull the
    # ratings together (a tie is half a win for each side), which is the model's reading of them, not a bug.
    outcome = (rng.random(n) < p_a).astype(float)
    # A 5-95 % interval misses a true value one time in ten, so the data come from a fixed seed (about 70 % of
    # seeds put all four inside at once); the closeness check below does not depend on that luck.
    res = fit_arena(Judgments(tuple(names), a, b, outcome), bootstrap=300, seed=0)
    assert [r.system for r in res.ratings] == ["gt", "luna", "gepard", "codec"]
    for r in res.ratings:
        assert r.low <= true[r.system] <= r.high, (r, true[r.system])
        assert r.high - r.low < 80  # the interval is informative, not trivially wide
        assert abs(r.rating - true[r.system]) < 40
    assert sum(r.rating for r in res.ratings) / k == pytest.approx(1500)
    text = format_arena(res)
    assert "| gt |" in text and "5-95 %" in text


def test_read_judgments_skips_malformed_lines(tmp_path):
    path = tmp_path / "j.jsonl"
    good = {"left": "A", "right": "B", "choice": "left"}
    path.write_text("\n".join([json.dumps(good), "{not json", json.dumps({**good, "choice": "both"}),
                               json.dumps({**good, "right": "A"}), json.dumps([1, 2]), "",
                               json.dumps({**good, "choice": "tie"})]) + "\n")
    records, problems = read_judgments(path)
    assert len(records) == 2 and [p.line for p in problems] == [2, 3, 4, 5]
    assert "choice" in problems[1].message and "itself" in problems[2].message
    with pytest.raises(DuetError, match="not found"):
        read_judgments(tmp_path / "missing.jsonl")
