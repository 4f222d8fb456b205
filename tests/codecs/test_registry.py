"""Loading codecs by name and directory, the shipped checkpoints themselves, and the `duet codec` commands."""

import json

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors import safe_open

from duet.checkpoint_dir import checkpoints_root
from duet.codecs import load
from duet.codecs.base import bitrate
from duet.codecs.cli import register
from duet.codecs.fsq_codec import FSQCodec, FSQCodecConfig
from duet.codecs.registry import KNOWN, save_pretrained
from duet.errors import DuetError

TINY = FSQCodecConfig(n_mels=20, enc_sub_dim=16, enc_sub_blocks=1, enc_dim=32, enc_blocks=1, dec_dim=32,
                      dec_blocks=1, dec_sub_dim=16, dec_sub_blocks=1)


def test_name_resolves_under_duet_checkpoints(tmp_path, monkeypatch):
    save_pretrained(FSQCodec(TINY), tmp_path / "duet-fsq")
    monkeypatch.setenv("DUET_CHECKPOINTS", str(tmp_path))
    assert isinstance(load("duet-fsq"), FSQCodec)
    with pytest.raises(DuetError, match="not in"):
        load("duet-rvq")  # a known name whose checkpoint is missing: say where it should be


def test_config_json_is_validated(tmp_path):
    path = save_pretrained(FSQCodec(TINY), tmp_path / "c")
    meta = json.loads((path / "config.json").read_text())
    meta["config"]["no_such_field"] = 1
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(DuetError, match="unknown config keys"):
        load(path)


@pytest.mark.parametrize("name", KNOWN)
def test_shipped_checkpoint(name):
    """The checkpoints in the repo: small, fp16, safetensors + JSON, the interface numbers of the issue."""
    path = checkpoints_root() / name
    if not (path / "config.json").is_file():
        pytest.skip(f"{name} not exported yet")
    weights = path / "model.safetensors"
    assert weights.stat().st_size < 30 * 2**20
    assert sorted(p.name for p in path.iterdir() if p.name != "README.md") == ["config.json", "model.safetensors"]
    assert (path / "README.md").is_file()  # its model card
    with safe_open(str(weights), "pt") as fh:
        dtypes = {fh.get_slice(k).get_dtype() for k in fh.keys()}
    assert "F32" not in dtypes and "F16" in dtypes
    codec = load(name)
    expected = {"duet-fsq": 1890.0, "duet-rvq": 2200.0}[name]
    assert bitrate(codec) == pytest.approx(expected, rel=0.01)
    audio = torch.zeros(1, codec.sample_rate // 2)
    assert torch.isfinite(codec.decode(codec.encode(audio).codes).audio).all()


def test_codec_cli_round_trip(tmp_path, capsys):
    import argparse

    save_pretrained(FSQCodec(TINY), tmp_path / "c")
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    sf.write(tmp_path / "in.wav", (0.1 * np.sin(np.arange(8000) / 5)).astype(np.float32), 16000)

    def run(*argv):
        args = parser.parse_args(list(argv))
        return args.func(args)

    assert run("codec", "info", str(tmp_path / "c")) == 0
    assert "1.891 kbps" in capsys.readouterr().out
    assert run("codec", "encode", str(tmp_path / "in.wav"), str(tmp_path / "codes.npy"), "--codec",
               str(tmp_path / "c")) == 0
    codes = np.load(tmp_path / "codes.npy")
    assert codes.shape == (8, 11)  # 0.5 s at 22,050 Hz -> 11 frames of 1024
    assert run("codec", "decode", str(tmp_path / "codes.npy"), str(tmp_path / "out.wav"), "--codec",
               str(tmp_path / "c")) == 0
    assert sf.info(str(tmp_path / "out.wav")).samplerate == 22050
    assert run("codec", "reconstruct", str(tmp_path / "in.wav"), str(tmp_path / "rec.wav"), "--codec",
               str(tmp_path / "c")) == 0
    assert sf.info(str(tmp_path / "rec.wav")).frames == 11025
