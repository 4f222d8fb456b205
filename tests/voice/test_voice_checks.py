"""The checks before training: the pure functions against naive loops, and every reason on a fixture of bad clips."""

from __future__ import annotations

import numpy as np
import pytest
from voice_testing import SENTENCES, write_bad_clips, write_pairs, write_tiny_base

from duet.voice.checks import (
    REASONS,
    ClipChecks,
    analyse,
    clipped_share,
    foreign_scripts,
    speakable_problem,
)
from duet.voice.corpus import VoiceDataConfig
from duet.voice.prepare import PrepConfig, prepare_audio
from duet.voice.recipe import check_voice_data
from duet.voice.report import read_report


def test_clipped_share_counts_full_scale_runs_as_a_naive_loop_does():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 2000).astype(np.float32)
    x[rng.integers(0, 2000, 300)] = 1.0
    x[100:110] = -1.0
    naive, run = 0, 0
    for v in [*(np.abs(x) >= 0.99), False]:
        if v:
            run += 1
        else:
            naive, run = naive + (run if run >= 3 else 0), 0
    assert clipped_share(x, 0.99, 3) == pytest.approx(naive / len(x))


def test_analyse_finds_the_speech_and_prepare_trims_and_normalises_it():
    rate = 16_000
    tone = 0.1 * np.sin(2 * np.pi * 200 * np.arange(rate) / rate)  # 1 s at about -23 dBFS
    audio = np.concatenate([np.zeros(rate // 2), tone, np.zeros(rate)]).astype(np.float32)
    facts = analyse(audio, rate)
    assert facts.speech_start == pytest.approx(0.5, abs=0.02) and facts.speech_end == pytest.approx(1.5, abs=0.02)
    assert facts.speech_share == pytest.approx(1.0) and facts.clipped_share == 0.0
    out = prepare_audio(audio, rate, facts, 22_050, PrepConfig(lead_seconds=0.1, trail_seconds=0.15))
    assert len(out) / 22_050 == pytest.approx(1.25, abs=0.03)
    speech = out[int(0.2 * 22_050): int(1.0 * 22_050)]
    assert 20 * np.log10(np.sqrt(np.mean(speech ** 2))) == pytest.approx(-24.0, abs=0.3)
    silent = analyse(np.zeros(rate, np.float32), rate)
    assert silent.speech_share == 0.0 and silent.speech_end == 0.0


def test_unspeakable_text():
    latin = foreign_scripts(["Hello there", "Good morning", "Привет"], ClipChecks(min_script_share=0.3))
    assert latin == {"LATIN"}
    assert speakable_problem("Hello there.", latin) is None
    assert "no words" in speakable_problem("... 42 !", latin)[1]
    assert "😀" in speakable_problem("Hello 😀", latin)[1]
    assert "CYRILLIC" in speakable_problem("Hello Привет", latin)[1]


def test_every_reason_on_a_fixture_of_bad_clips(tmp_path):
    """Each bad clip is listed with its own reason; the good clips all go on; DATA is left as it was."""
    data = write_pairs(tmp_path / "data")
    expected = {f"bad_{k}": v for k, v in write_bad_clips(tmp_path / "data" / "bad", tmp_path).items()}
    (tmp_path / "data" / "dup a.wav").write_bytes((tmp_path / "data" / "clip00.wav").read_bytes())
    (tmp_path / "data" / "dup a.txt").write_text("Please leave a message after the tone.")
    (tmp_path / "data" / "dup_a.wav").write_bytes((tmp_path / "data" / "clip00.wav").read_bytes())
    (tmp_path / "data" / "dup_a.txt").write_text("Please leave a message after the tone.")
    expected["dup_a~2"] = "duplicate id"
    before = {p: p.stat().st_mtime_ns for p in data.rglob("*")}
    base, codec = write_tiny_base(tmp_path / "models")
    cfg = VoiceDataConfig(min_minutes=0.1, checks=ClipChecks(max_seconds=6))
    summary = check_voice_data(data, cfg, tmp_path / "report.tsv", base_model=str(base), codec=str(codec),
                               progress=False)
    rows = {r.clip: r for r in read_report(tmp_path / "report.tsv")}
    assert {k: r.reason for k, r in rows.items()} == expected
    assert set(expected.values()) == set(REASONS) - {"other language"}  # a manifest's reason: test_recipe
    assert all(r.detail and r.where for r in rows.values())
    assert f"{len(SENTENCES) + 1} of {len(SENTENCES) + len(expected) + 1} clips usable" in summary
    assert {p: p.stat().st_mtime_ns for p in data.rglob("*")} == before  # nothing in DATA written or touched


def test_the_report_is_never_written_into_data(tmp_path):
    from duet.errors import DuetError

    data = write_pairs(tmp_path / "data", SENTENCES[:2])
    with pytest.raises(DuetError, match="inside DATA"):
        check_voice_data(data, VoiceDataConfig(), data / "report.tsv", progress=False)
