"""Word timings as files (``duet.tts.captions``) and ``duet speak --timestamps``: JSON shape, SRT and WebVTT read
back by real parsers (``srt``, ``webvtt-py``), the same timings from every CLI path, one-line refusals."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import pytest
import srt
import webvtt

from checkpoint_testing import write_tiny_gepard, write_tiny_luna
from duet.cli import main
from duet.tts.captions import CaptionConfig, cues, srt_text, timestamps_json, vtt_text
from duet.tts.timestamps import PhoneTiming, WordTiming

TEXT = "Hello there, how are you? The quick brown fox jumps over the lazy dog."


def _words(spec: list[tuple[str, float, float]]) -> list[WordTiming]:
    return [WordTiming(w, a, b, (PhoneTiming(w[0], a, b),)) for w, a, b in spec]


WORDS = _words([("Hello", 0.1, 0.4), ("there", 0.45, 0.8), ("how", 1.3, 1.5), ("are", 1.55, 1.7),
                ("you", 1.75, 2.0), ("one", 2.05, 2.2), ("two", 2.25, 2.4), ("three", 2.45, 2.6),
                ("four", 2.65, 2.8), ("five", 2.85, 3.0), ("six", 3.0, 3.0)])


def test_cues_are_short_groups_cut_at_pauses_and_never_overlap():
    got = cues(WORDS)
    assert [c.text for c in got] == ["Hello there", "how are you one two three four", "five six"]
    assert all(a.end <= b.start for a, b in zip(got, got[1:]))
    assert [c.text for c in cues(WORDS, CaptionConfig(max_words=1))][:2] == ["Hello", "there"]
    assert cues(WORDS, CaptionConfig(max_words=1))[-1].text == "five six"  # a word of no length stays with its cue


def test_srt_reads_back_with_the_srt_parser():
    subs = list(srt.parse(srt_text(WORDS)))
    assert [s.content for s in subs] == [c.text for c in cues(WORDS)]
    assert subs[0].start == timedelta(milliseconds=100) and subs[0].end == timedelta(milliseconds=800)
    assert [s.index for s in subs] == [1, 2, 3]


def test_vtt_reads_back_with_webvtt_and_times_each_word_inline():
    captions = webvtt.from_string(vtt_text(WORDS)).captions
    assert [c.text for c in captions] == [c.text for c in cues(WORDS)]
    assert captions[0].start == "00:00:00.100" and captions[0].end == "00:00:00.800"
    assert captions[0].raw_text == "Hello <00:00:00.450>there"


def test_json_holds_words_and_phones_in_seconds():
    doc = timestamps_json(WORDS, 3.2, 22050, "m")
    assert set(doc) == {"model", "sample_rate", "duration", "words"}
    assert doc["words"][0] == {"word": "Hello", "start": 0.1, "end": 0.4,
                               "phones": [{"phone": "H", "start": 0.1, "end": 0.4}]}


@pytest.fixture(scope="module")
def luna_dir(tmp_path_factory):
    return write_tiny_luna(tmp_path_factory.mktemp("luna"), aligned=True)


def _speak(luna_dir, tmp_path, name: str, *flags: str) -> str:
    out = tmp_path / name
    argv = ["speak", TEXT, "-o", str(tmp_path / "x.wav"), "--model", str(luna_dir), "--seed", "4", "--steps", "2",
            "--timestamps", str(out), *flags]
    assert main(argv) == 0
    return out.read_text(encoding="utf-8")


def test_cli_writes_the_same_timings_whole_and_streamed(luna_dir, tmp_path, monkeypatch):
    whole = json.loads(_speak(luna_dir, tmp_path, "a.json"))
    assert json.loads(_speak(luna_dir, tmp_path, "b.json", "--stream")) == whole
    assert [w["word"] for w in whole["words"]][:3] == ["Hello", "there", "how"] and whole["sample_rate"] == 24000
    read, write = os.pipe()  # --stdin-stream reads standard input's file descriptor
    os.write(write, TEXT.encode())
    os.close(write)
    monkeypatch.setattr(sys, "stdin", os.fdopen(read))
    argv = ["speak", "--stdin-stream", "-o", str(tmp_path / "y.wav"), "--model", str(luna_dir), "--seed", "4",
            "--steps", "2", "--timestamps", str(tmp_path / "c.json")]
    assert main(argv) == 0
    assert json.loads((tmp_path / "c.json").read_text(encoding="utf-8")) == whole
    last = whole["words"][-1]["end"]
    assert 0 <= whole["words"][0]["start"] and last <= whole["duration"]


def test_cli_captions_parse(luna_dir, tmp_path):
    subs = list(srt.parse(_speak(luna_dir, tmp_path, "a.srt")))
    assert " ".join(s.content for s in subs).startswith("Hello there how are you")
    captions = webvtt.from_string(_speak(luna_dir, tmp_path, "b.vtt")).captions
    assert [c.text for c in captions] == [s.content for s in subs]


def test_cli_refuses_timestamps_without_alignment_in_one_line(tmp_path, capsys):
    model = write_tiny_gepard(tmp_path)
    argv = ["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", str(model), "--timestamps", str(tmp_path / "t.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "has no word timings" in err and "\n" not in err and not (tmp_path / "t.json").exists()


def test_cli_refuses_an_unknown_timestamps_format_before_loading(tmp_path, capsys):
    argv = ["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", "no-such-model", "--timestamps",
            str(tmp_path / "t.txt")]
    assert main(argv) == 2
    assert ".json, .srt or .vtt" in capsys.readouterr().err
