"""The codec training loop on tiny configs: loss goes down, resume is bit-identical, export loads, CLI runs."""

import json
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch
from safetensors.torch import load_file, save_file

from duet.codecs import load
from duet.codecs.fsq_codec import FSQCodecConfig
from duet.codecs.registry import build
from duet.config_io import from_dict, to_dict, write_json
from duet.errors import DuetError
from duet.train.audio_crops import AudioCrops, read_manifest
from duet.train.checkpoint import latest_checkpoint, read_state
from duet.train.codec_config import CodecTrainConfig, load_config, preset
from duet.train.codec_loop import export_codec, train_codec
from duet.train.metrics import read_metrics
from duet.train.runner import read_run_config


def _clips(sr: int, n: int = 6, seconds: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    clips = []
    for _ in range(n):
        f0 = rng.uniform(90, 220) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.3, 2) * t))
        phase = 2 * np.pi * np.cumsum(f0) / sr
        x = sum(np.sin(k * phase) * rng.uniform(0.2, 1) / k for k in range(1, 10))
        clips.append((0.2 * x * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32))
    return clips


def _crops(cfg):
    sr = cfg.model.sample_rate
    return AudioCrops(_clips(sr), sr), AudioCrops(_clips(sr, n=2, seed=1), sr)


@pytest.mark.parametrize("name", ["fsq", "rvq", "rvq-semantic", "rvq-decoder", "fsq-decoder", "fsq-causal-decoder",
                                  "fsq-tiny", "rvq-tiny"])
def test_presets_build_and_round_trip_json(name):
    cfg = preset(name)
    assert from_dict(CodecTrainConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg
    model = build(cfg.kind, cfg.model)
    assert model.sample_rate == cfg.model.sample_rate


def test_tiny_run_decreases_loss(tmp_path):
    cfg = replace(preset("fsq-tiny"), lr=3e-3, max_steps=40, val_every=100)
    train, val = _crops(cfg)
    result = train_codec(cfg, None, tmp_path, crops=train, val_crops=val, progress=False)
    mel = [r["mel"] for r in read_metrics(tmp_path / "metrics.jsonl") if "mel" in r]
    assert result.step == 40 and len(mel) == 40
    assert np.mean(mel[-5:]) < 0.8 * np.mean(mel[:5])
    assert (tmp_path / "loss.png").is_file() and (tmp_path / "checkpoints" / "latest").is_file()


@pytest.mark.parametrize("name", ["fsq-tiny", "rvq-tiny"])
def test_resume_is_bit_identical(tmp_path, name):
    # The discriminators join at step 2, so their weights and optimizer are part of the checkpoint too.
    cfg = replace(preset(name), disc_start_step=2)
    train_codec(cfg, None, tmp_path / "a", stop_at_step=5, crops=_crops(cfg)[0], val_crops=_crops(cfg)[1],
                progress=False)
    train_codec(cfg, None, tmp_path / "b", stop_at_step=3, crops=_crops(cfg)[0], val_crops=_crops(cfg)[1],
                progress=False)
    train_codec(cfg, None, tmp_path / "b", resume=True, stop_at_step=5, crops=_crops(cfg)[0],
                val_crops=_crops(cfg)[1], progress=False)
    a = {r["step"]: r for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if "loss" in r}
    b = {r["step"]: r for r in read_metrics(tmp_path / "b" / "metrics.jsonl") if "loss" in r}
    assert sorted(b) == [1, 2, 3, 4, 5]
    for step in (4, 5):
        assert a[step]["loss"] == b[step]["loss"] and a[step]["disc"] == b[step]["disc"]
    wa = load(export_codec(tmp_path / "a", tmp_path / "ea")).state_dict()
    wb = load(export_codec(tmp_path / "b", tmp_path / "eb")).state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_resume_refuses_a_different_config_and_a_fresh_start_refuses_a_run(tmp_path):
    cfg = preset("fsq-tiny")
    train_codec(cfg, None, tmp_path, stop_at_step=1, crops=_crops(cfg)[0], progress=False)
    with pytest.raises(DuetError, match="different config"):
        train_codec(replace(cfg, lr=0.5), None, tmp_path, resume=True, crops=_crops(cfg)[0], progress=False)
    with pytest.raises(DuetError, match="already holds a run"):
        train_codec(replace(cfg, lr=0.5), None, tmp_path, crops=_crops(cfg)[0], progress=False)
    assert read_run_config(tmp_path, CodecTrainConfig) == cfg  # refused before config.json was rewritten


def test_resume_of_a_checkpoint_without_per_rank_rng_states_is_exact(tmp_path):
    """Codec checkpoints kept their RNGs in the checkpoint module only (torch, Python, ``rng.data``); such a
    checkpoint still resumes bit-identically."""
    cfg = preset("fsq-tiny")
    train, val = _crops(cfg)
    train_codec(cfg, None, tmp_path / "a", stop_at_step=4, crops=train, val_crops=val, progress=False)
    train_codec(cfg, None, tmp_path / "b", stop_at_step=2, crops=train, val_crops=val, progress=False)
    ckpt = latest_checkpoint(tmp_path / "b")
    state = read_state(ckpt)
    rng = state["extra"].pop("rng")[0]
    (ckpt / "state.json").write_text(json.dumps(state))
    tensors = load_file(str(ckpt / "optim.safetensors"))
    tensors["rng.data"] = torch.tensor(rng["generators"]["data"], dtype=torch.uint8)
    save_file(tensors, str(ckpt / "optim.safetensors"))
    torch.manual_seed(99)  # nothing carries over from the first invocation
    train_codec(cfg, None, tmp_path / "b", resume=True, stop_at_step=4, crops=train, val_crops=val, progress=False)
    a = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if "loss" in r}
    b = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "b" / "metrics.jsonl") if "loss" in r}
    assert a == b and sorted(b) == [1, 2, 3, 4]


def test_manifest_cli_and_export(tmp_path):
    """End to end through files: a manifest of WAVs at another rate, the CLI, export, load by directory."""
    corpus = tmp_path / "corpus"
    (corpus / "wavs").mkdir(parents=True)
    lines = []
    for i, clip in enumerate(_clips(16000, n=4, seconds=0.6)):
        sf.write(corpus / "wavs" / f"{i}.wav", clip, 16000)
        lines.append(json.dumps({"id": f"u{i}", "text": "x", "speaker": "s", "path": f"wavs/{i}.wav",
                                 "duration": 0.6, "split": "val" if i == 3 else "train"}))
    (corpus / "manifest.jsonl").write_text("\n".join(lines) + "\n")
    assert len(read_manifest(corpus / "manifest.jsonl", "train")) == 3

    from duet.train.cli import main

    run = tmp_path / "run"
    assert main(["train", "codec", "--config", "rvq-tiny", "--manifest", str(corpus / "manifest.jsonl"),
                 "--out", str(run), "--stop-at", "2"]) == 0
    assert main(["train", "codec", "--resume", "--out", str(run), "--manifest", str(corpus / "manifest.jsonl"),
                 "--stop-at", "4"]) == 0
    assert main(["train", "codec-export", str(run), "--out", str(tmp_path / "shipped")]) == 0
    codec = load(tmp_path / "shipped")
    info = json.loads((tmp_path / "shipped" / "config.json").read_text())
    assert info["type"] == "duet-rvq" and info["info"]["step"] == 4
    assert codec.decode(codec.encode(torch.zeros(1, 2000)).codes).audio.shape == (1, 2880)


def test_semantic_teacher_from_a_local_directory(tmp_path):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.WavLMConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                   conv_dim=(16,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                   num_buckets=32)
    torch.manual_seed(0)
    transformers.WavLMModel(cfg).save_pretrained(tmp_path / "wavlm", safe_serialization=True)
    train_cfg = replace(preset("rvq-tiny"), semantic_teacher=str(tmp_path / "wavlm"))
    train_codec(train_cfg, None, tmp_path / "run", stop_at_step=2, crops=_crops(train_cfg)[0], progress=False)
    rows = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "semantic" in r]
    assert len(rows) == 2 and all(0 <= r["semantic"] <= 2 for r in rows)
    export_codec(tmp_path / "run", tmp_path / "out")  # the projection is training-only and is not shipped
    assert load(tmp_path / "out") is not None


def test_semantic_distillation_warm_starts_from_a_shipped_codec(tmp_path, monkeypatch):
    """The rvq-semantic recipe: a shipped codec has no semantic projection; the run adds one and starts from the
    codec's weights everywhere else, and the export leaves it out again."""
    from duet.train import codec_loop

    class Teacher(torch.nn.Module):  # a fixed random feature of each frame: enough to drive the projection
        hidden_size = 8

        def forward(self, audio, sample_rate, frames):  # (B, S) -> (B, T, H)
            return audio[:, : frames * 8].reshape(audio.shape[0], frames, 8)

    monkeypatch.setattr("duet.codecs.semantic.load_teacher", lambda spec: Teacher())
    cfg = preset("rvq-tiny")
    path, train, _ = _shipped(cfg, tmp_path)
    trainer = codec_loop.CodecTrainer(replace(cfg, semantic_teacher="fake"), train)
    assert trainer.model.semantic_proj is not None
    trainer.init_from(path)
    shipped = load(path).state_dict()
    for key, value in shipped.items():
        torch.testing.assert_close(trainer.model.state_dict()[key], value)
    train_codec(replace(cfg, semantic_teacher="fake"), None, tmp_path / "s", stop_at_step=2, crops=train,
                progress=False, init_from=path)
    assert any("semantic" in r for r in read_metrics(tmp_path / "s" / "metrics.jsonl"))
    assert set(load(export_codec(tmp_path / "s", tmp_path / "s-out")).state_dict()) == set(shipped)


def test_load_config_from_json_file(tmp_path):
    path = tmp_path / "c.json"
    write_json(path, replace(preset("fsq-tiny"), batch_size=3))
    assert load_config(str(path)).batch_size == 3
    path.write_text(json.dumps({"kind": "duet-fsq", "batch_size": 3}))  # no model: the codec's defaults
    assert load_config(str(path)).model == FSQCodecConfig()
    path.write_text(json.dumps({"kind": "duet-fsq", "model": {"n_mels": 20, "typo": 1}}))
    with pytest.raises(DuetError, match="typo"):
        load_config(str(path))


def _shipped(cfg, root):
    """A 3-step run of ``cfg`` exported as a shipped codec under ``root``: (its directory, train and val crops)."""
    train, val = _crops(cfg)
    train_codec(cfg, None, root / "a", stop_at_step=3, crops=train, val_crops=val, progress=False)
    return export_codec(root / "a", root / "shipped"), train, val


def test_init_from_a_shipped_codec_starts_from_its_weights(tmp_path):
    """Warm start: a new run begins at the exported (fp16) weights, live and EMA, not at a fresh initialisation."""
    from duet.train.codec_loop import CodecTrainer

    cfg = preset("fsq-tiny")
    path, train, _ = _shipped(cfg, tmp_path)
    shipped = load(path).state_dict()
    trainer = CodecTrainer(cfg, train)
    key = next(k for k, v in shipped.items() if v.is_floating_point() and v.numel() > 16)
    assert not torch.allclose(trainer.model.state_dict()[key], shipped[key])
    trainer.init_from(path)
    torch.testing.assert_close(trainer.model.state_dict()[key], shipped[key])
    torch.testing.assert_close(trainer.ema.shadow.state_dict()[key], shipped[key])
    with pytest.raises(DuetError, match="different model config"):
        CodecTrainer(preset("rvq-tiny"), train).init_from(path)


def test_decoder_only_fine_tune_changes_the_decoder_alone(tmp_path):
    """Encoder and quantiser (weights and EMA codebook buffers) stay bit-identical, so codes stay valid."""
    cfg = preset("rvq-tiny")
    path, train, val = _shipped(cfg, tmp_path)
    before = load(path).state_dict()
    tuned_cfg = replace(cfg, decoder_only=True, disc_start_step=0)
    with pytest.raises(DuetError, match="--init-from"):
        train_codec(tuned_cfg, None, tmp_path / "x", stop_at_step=1, crops=train, progress=False)
    train_codec(tuned_cfg, None, tmp_path / "b", stop_at_step=4, crops=train, val_crops=val, progress=False,
                init_from=path)
    export_codec(tmp_path / "b", tmp_path / "tuned")
    after = load(tmp_path / "tuned").state_dict()
    frozen = [k for k in before if not k.startswith("decoder.")]
    assert any(k.startswith("quantizer.") and "ema" in k for k in frozen)
    for key in frozen:
        assert torch.equal(before[key], after[key]), key
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("decoder."))
    assert preset("rvq-decoder").decoder_only and preset("rvq-decoder").disc_start_step == 0
    assert preset("fsq-decoder").decoder_only and preset("fsq-decoder").kind == "duet-fsq"
