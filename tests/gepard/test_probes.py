"""Effective rank (Gepard §3.1) on matrices of known rank; entropy probes; saving them as JSON and PNG."""

from __future__ import annotations

import json
import math

import torch
from gepard_testing import micro_config

from duet.gepard.model import GepardModel
from duet.gepard.probes import FrameProbes, channel_entropy, effective_rank, embedding_ranks, save_probes


def test_effective_rank_of_known_matrices():
    for n in (1, 5, 32):
        assert math.isclose(effective_rank(torch.eye(n)), n, rel_tol=1e-9)
    g = torch.Generator().manual_seed(0)
    f64 = dict(generator=g, dtype=torch.float64)
    rank_one = torch.randn(40, 1, **f64) @ torch.randn(1, 30, **f64)
    assert math.isclose(effective_rank(rank_one), 1.0, abs_tol=1e-9)
    assert math.isclose(effective_rank(torch.diag(torch.tensor([2.0, 2.0, 0.0, 0.0]))), 2.0, rel_tol=1e-9)
    # sigma = (3, 1): p = (3/4, 1/4), exp(-(3/4 ln 3/4 + 1/4 ln 1/4))
    want = math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    rotation = torch.linalg.qr(torch.randn(2, 2, generator=g, dtype=torch.float64))[0]
    assert math.isclose(effective_rank(rotation @ torch.diag(torch.tensor([3.0, 1.0], dtype=torch.float64))), want,
                        rel_tol=1e-9)
    assert effective_rank(torch.zeros(3, 4)) == 0.0
    # A table [L_k x m] cannot exceed L_k (the report's "structural ceiling").
    assert effective_rank(torch.randn(6, 32, generator=g)) <= 6


def test_channel_entropy_against_formula():
    logits = torch.tensor([[[0.0, 0.0, float("-inf")], [1.0, 2.0, 3.0]]])  # (1, C=2, Lmax=3)
    p = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), dim=0)
    want = torch.tensor([[math.log(2), float(-(p * p.log()).sum())]])
    torch.testing.assert_close(channel_entropy(logits), want)


def test_embedding_ranks_of_a_model():
    torch.manual_seed(0)
    ranks = embedding_ranks(GepardModel(micro_config()))
    assert len(ranks["audio_tables"]) == 32
    # m = 2 columns: each table's rank is at most 2 (and near 2 for random init)
    assert all(1.0 < r <= 2.0 + 1e-9 for r in ranks["audio_tables"])
    assert 1.0 < ranks["text_embedding"] <= 64


def test_save_probes_json_and_png(tmp_path):
    entropy = torch.rand(2, 4, 32)
    stop = torch.tensor([[0.001, 0.002, 0.003, 0.9], [0.001, 0.8, float("nan"), float("nan")]])
    probes = FrameProbes(entropy=entropy, stop_prob=stop)
    json_path, png_path = save_probes(probes, tmp_path / "probe", row=1, frame_rate=21.5, title="hello")
    data = json.loads(json_path.read_text())
    assert data["stop_prob"] == stop[1, :2].tolist() and len(data["entropy"]) == 2
    torch.testing.assert_close(torch.tensor(data["mean_entropy"]), entropy[1, :2].mean(-1))
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
