"""Metrics JSONL (resume cuts the log back) and the PNG plot."""

import pytest

from duet.train.metrics import MetricsLog, read_metrics
from duet.train.plots import plot_metrics, smooth


def test_resume_truncates(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for step in range(1, 11):
        log.log(step, loss=1.0 / step)
    log2 = MetricsLog(tmp_path / "m.jsonl", resume_step=6)
    assert [r["step"] for r in read_metrics(tmp_path / "m.jsonl")] == [1, 2, 3, 4, 5, 6]
    log2.log(7, loss=0.5)
    assert read_metrics(tmp_path / "m.jsonl")[-1] == {**read_metrics(tmp_path / "m.jsonl")[-1], "step": 7}


def test_torn_line_is_skipped(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "lo')
    assert read_metrics(path) == [{"step": 1, "loss": 2.0}]


def test_smooth_constant_is_constant():
    assert smooth([3.0] * 10) == pytest.approx([3.0] * 10, rel=1e-12)


def test_plot_writes_png(tmp_path):
    log = MetricsLog(tmp_path / "m.jsonl")
    for step in range(1, 30):
        log.log(step, loss=10.0 / step, mel=1.0 + 1.0 / step)
    log.log(20, val_mel=1.5)
    out = plot_metrics(tmp_path / "m.jsonl", tmp_path / "loss.png", title="t")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
