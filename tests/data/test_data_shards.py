"""Encoding a corpus into code shards: round trip against an independent computation, resume, mixed rates."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import torch
from data_testing import MeanAbsCodec, expected_codes

from duet.data.manifest import Utterance, read_manifest, write_manifest
from duet.data.shards import CodeShards, encode_corpus
from duet.errors import DuetError


@pytest.fixture
def corpus(tmp_path):
    """7 utterances of different lengths and loudness at 16 kHz, and their manifest."""
    rng = np.random.default_rng(0)
    utts = []
    for i in range(7):
        n = 1000 + 737 * i  # not a multiple of the frame: the last frame is partial
        t = np.arange(n) / 16000
        audio = (0.1 + 0.1 * i) * np.sin(2 * np.pi * (150 + 40 * i) * t) * np.linspace(0.2, 1, n)
        audio += 0.01 * rng.standard_normal(n)
        rel = f"wavs/u{i}.wav"
        (tmp_path / "wavs").mkdir(exist_ok=True)
        sf.write(str(tmp_path / rel), audio, 16000, subtype="PCM_16")
        utts.append(Utterance(f"u{i}", f"text {i}", "en", "s", rel, n / 16000, "test", "train"))
    return write_manifest(tmp_path / "manifest.jsonl", utts)


def test_encode_round_trip(corpus, tmp_path):
    out = tmp_path / "codes"
    index = encode_corpus(MeanAbsCodec(), corpus, out, shard_size=3, batch_size=2, codec_name="fake", progress=False)
    assert [s["file"] for s in index["shards"]] == [f"shard-0000{i}.safetensors" for i in range(3)]
    assert index["codec"] == "fake" and index["codebook_sizes"] == [16, 4] and index["frame_rate"] == 100.0
    assert json.loads((out / "index.json").read_text()) == index

    shards = CodeShards(out)
    utts = read_manifest(corpus)
    assert shards.ids == [u.id for u in utts] and len(shards) == 7
    for u in utts:
        want = expected_codes(corpus.parent / u.path)
        got = shards[u.id]
        assert got.dtype == torch.int64 and got.shape == want.shape == (2, shards.frames(u.id))
        assert np.array_equal(got.numpy(), want), u.id
    assert [uid for uid, _ in shards] == shards.ids
    assert len({int(c[0].max()) for _, c in shards}) > 2  # loudness differs, so do the codes
    with pytest.raises(KeyError):
        shards["nope"]


def test_encode_resumes_after_interruption(corpus, tmp_path):
    out = tmp_path / "codes"
    crashing = MeanAbsCodec(fail_after=4)  # shard 0 (3 utterances) finishes, shard 1 dies mid-way
    with pytest.raises(RuntimeError, match="simulated crash"):
        encode_corpus(crashing, corpus, out, shard_size=3, batch_size=2, codec_name="fake", progress=False)
    assert [s["file"] for s in json.loads((out / "index.json").read_text())["shards"]] == ["shard-00000.safetensors"]
    first = (out / "shard-00000.safetensors").stat().st_mtime_ns
    # Leftovers of a crash while writing shard 1: a temp file and a file never entered in the index.
    (out / "shard-00001.safetensors.tmp").write_bytes(b"partial")
    (out / "shard-00001.safetensors").write_bytes(b"partial")

    codec = MeanAbsCodec()
    index = encode_corpus(codec, corpus, out, shard_size=3, batch_size=2, codec_name="fake", progress=False)
    assert codec.encoded == 4  # only shards 1 and 2 were redone
    assert (out / "shard-00000.safetensors").stat().st_mtime_ns == first
    assert len(index["shards"]) == 3 and not (out / "shard-00001.safetensors.tmp").exists()
    shards = CodeShards(out)
    for u in read_manifest(corpus):
        assert np.array_equal(shards[u.id].numpy(), expected_codes(corpus.parent / u.path))

    again = MeanAbsCodec()
    encode_corpus(again, corpus, out, shard_size=3, codec_name="fake", progress=False)
    assert again.encoded == 0  # all finished: nothing to do


def test_encode_refuses_to_mix_codecs(corpus, tmp_path):
    out = tmp_path / "codes"
    encode_corpus(MeanAbsCodec(), corpus, out, shard_size=3, codec_name="fake", progress=False)
    with pytest.raises(DuetError, match="codec="):
        encode_corpus(MeanAbsCodec(), corpus, out, shard_size=3, codec_name="other", progress=False)


def test_unreadable_audio_is_skipped(corpus, tmp_path):
    (tmp_path / "wavs" / "u2.wav").write_bytes(b"not audio")
    index = encode_corpus(MeanAbsCodec(), corpus, tmp_path / "codes", shard_size=3, codec_name="fake", progress=False)
    assert index["shards"][0]["skipped"] == ["u2"] and "u2" not in CodeShards(tmp_path / "codes")


def test_tiny_corpus_encodes_at_24khz(tiny_corpus, tmp_path):
    """Mixed native rates (16, 22.05, 32 kHz) all reach a 24 kHz codec, resampled on load."""
    manifest = tiny_corpus.out_dir / "manifest.jsonl"
    encode_corpus(MeanAbsCodec(24000, 240), manifest, tmp_path / "codes", shard_size=16, progress=False)
    shards = CodeShards(tmp_path / "codes")
    utts = read_manifest(manifest)
    assert len(shards) == len(utts)
    for u in utts:
        assert abs(shards.frames(u.id) - u.duration * 100) <= 1.01, u.id
