"""``duet speak`` with SSML and ``--verify``: malformed markup is one line naming its position (before any model
loads, or as it arrives on standard input), marks reach the timestamps file, and verification reports each
sentence, with a fake recogniser handed in where the ``duet`` command hands in Whisper."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

import pytest

import duet
import duet.cli
from checkpoint_testing import write_tiny_luna
from duet.cli import main


@pytest.fixture(scope="module")
def luna_dir(tmp_path_factory):
    return write_tiny_luna(tmp_path_factory.mktemp("luna"), aligned=True)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


@pytest.mark.parametrize("text, where", [
    ("<speak>Hello <break time='soon'/> there</speak>", "character 13: break time 'soon'"),
    ("<speak>Hello <voice>there</voice></speak>", "character 13: unsupported element <voice>"),
    ("<speak>Hello there", "character 0: <speak> is never closed"),
])
def test_malformed_ssml_is_one_line_before_the_model_loads(tmp_path, capsys, text, where):
    assert main(["speak", text, "-o", str(tmp_path / "x.wav"), "--model", "no-such-model"]) == 2
    assert where in _one_line(capsys)


def test_malformed_ssml_on_standard_input_is_one_line(luna_dir, tmp_path, capsys, monkeypatch):
    read, write = os.pipe()
    os.write(write, b"<speak>Hello there. <emphasis>Now</emphasis></speak>")
    os.close(write)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read))
    argv = ["speak", "--stdin-stream", "-o", str(tmp_path / "y.wav"), "--model", str(luna_dir), "--steps", "2"]
    assert main(argv) == 2
    assert "SSML error at character 20: unsupported element <emphasis>" in _one_line(capsys)


def test_plain_text_with_angle_brackets_is_not_markup(luna_dir, tmp_path):
    argv = ["speak", "a <b> & c", "-o", str(tmp_path / "x.wav"), "--model", str(luna_dir), "--steps", "2"]
    assert main(argv) == 0


def test_breaks_reach_the_timestamps_file(luna_dir, tmp_path):
    out = tmp_path / "t.json"
    argv = ["speak", '<speak>Hello there <break time="1s"/> how are you?</speak>', "-o", str(tmp_path / "x.wav"),
            "--model", str(luna_dir), "--steps", "2", "--seed", "1", "--timestamps", str(out)]
    assert main(argv) == 0
    written = json.loads(out.read_text())["words"]
    spoken = duet.load(luna_dir).speak('<speak>Hello there <break time="1s"/> how are you?</speak>', steps=2, seed=1)
    assert [(w["word"], w["start"], w["end"]) for w in written] == [
        (w.word, round(w.start, 3), round(w.end, 3)) for w in spoken.words]
    words = {w["word"]: w for w in written}
    # the layout's second of pause, and the silence the fit spliced into it (a random model's noise has no quiet)
    assert words["how"]["start"] - words["there"]["end"] == pytest.approx(2.0, abs=0.05)


@dataclass(frozen=True)
class _Heard:
    wer: float
    transcript: str


class _Scorer:
    """Hears every first making wrong and every retry right; remembers the Whisper it was made with."""

    made_with: list[str | None] = []

    def __init__(self, asr_model: str | None = None):
        self.seen: dict[str, int] = {}
        _Scorer.made_with.append(asr_model)

    def score(self, audio, sample_rate, text):
        self.seen[text] = self.seen.get(text, 0) + 1
        return _Heard(0.5, "something else") if self.seen[text] == 1 else _Heard(0.0, text)


def test_verify_reports_each_sentence(luna_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(duet.cli, "_whisper_scorer", _Scorer)
    argv = ["speak", "One two. Three four.", "-o", str(tmp_path / "x.wav"), "--model", str(luna_dir), "--steps",
            "2", "--verify", "--verify-tries", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "sentence 0: WER 0.000, kept making 2 of 2" in out and "sentence 1: WER 0.000, kept making 2 of 2" in out
    assert "verify: 2 pieces, 2 made again (4 makings); mean WER 0.500 -> 0.000" in out


def _fake_whisper(path):
    path.mkdir()
    (path / "model.bin").write_bytes(b"")  # a CTranslate2 directory to the check; nothing loads it here
    return path


def test_verify_asr_picks_the_whisper_the_recogniser_is_made_with(luna_dir, tmp_path, monkeypatch):
    import duet.metrics.asr

    monkeypatch.setattr(duet.cli, "_whisper_scorer", _Scorer)
    monkeypatch.setattr(_Scorer, "made_with", [])
    whisper, base = _fake_whisper(tmp_path / "whisper"), _fake_whisper(tmp_path / "joined-base")
    monkeypatch.setitem(duet.metrics.asr.SHIPPED_WHISPERS, "base", lambda: base)
    argv = ["speak", "One two.", "-o", str(tmp_path / "x.wav"), "--model", str(luna_dir), "--steps", "2",
            "--verify", "--verify-tries", "1"]
    for flags in ([], ["--verify-asr", str(whisper)], ["--verify-asr", "base"]):
        assert main([*argv, *flags]) == 0
    assert _Scorer.made_with == [None, str(whisper), str(base)]  # None: the bundled tiny.en


@pytest.mark.parametrize("flags, words", [
    (["--verify", "--stream"], "drop --stream"),
    (["--verify-tries", "2"], "go with --verify"),
    (["--verify-asr", "base"], "go with --verify"),
    (["--verify", "--verify-tries", "0"], "tries must be in [1, 16]"),
    (["--verify", "--verify-asr", "/no/such/whisper"],
     "--verify-asr: ASR model '/no/such/whisper' is neither a directory nor one of tiny.en, base"),
])
def test_verify_flags_are_checked_before_the_model_loads(tmp_path, capsys, flags, words):
    argv = ["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", "no-such-model", *flags]
    assert main(argv) == 2
    assert words in _one_line(capsys)


def test_a_whisper_directory_without_weights_is_one_line(tmp_path, capsys):
    argv = ["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", "no-such-model", "--verify", "--verify-asr",
            str(tmp_path)]
    assert main(argv) == 2
    assert f"--verify-asr: ASR model directory {tmp_path} has no model.bin" in _one_line(capsys)
