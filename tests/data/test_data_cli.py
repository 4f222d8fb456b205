"""`duet data build` / `duet data encode` through the area's own `register`, on a parser of our own."""

from __future__ import annotations

import argparse
import json
import shutil

import pytest
from data_testing import MeanAbsCodec

import duet.codecs
from duet.data import cli
from duet.data.shards import CodeShards
from duet.errors import DuetError


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="duet")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return args.func(args)


def test_build_resumes_through_cli(tiny_corpus, tmp_path, capsys):
    out = tmp_path / "corpus"
    shutil.copytree(tiny_corpus.out_dir, out)
    assert run(["data", "build", "--preset", "tiny", "--out", str(out), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"{tiny_corpus.utterances} utterances" in printed and "0 rendered" in printed
    assert "| source | utterances | hours | share |" in printed


def test_build_flags_are_checked(tmp_path):
    with pytest.raises(DuetError, match="--workers"):
        run(["data", "build", "--preset", "tiny", "--out", str(tmp_path), "--workers", "0"])
    with pytest.raises(SystemExit):  # argparse rejects an unknown preset before any work
        run(["data", "build", "--preset", "huge", "--out", str(tmp_path)])


def test_encode_through_cli(tiny_corpus, tmp_path, monkeypatch):
    loaded = []

    def load(name):
        loaded.append(name)
        return MeanAbsCodec(24000, 240)

    monkeypatch.setattr(duet.codecs, "load", load, raising=False)
    out = tmp_path / "codes"
    manifest = tiny_corpus.out_dir / "manifest.jsonl"
    argv = ["data", "encode", "--codec", "fake-24k", "--manifest", str(manifest), "--out", str(out)]
    assert run([*argv, "--shard-size", "10", "--quiet"]) == 0
    assert loaded == ["fake-24k"]
    index = json.loads((out / "index.json").read_text())
    assert index["codec"] == "fake-24k" and len(index["shards"]) == -(-tiny_corpus.utterances // 10)
    assert len(CodeShards(out)) == tiny_corpus.utterances
