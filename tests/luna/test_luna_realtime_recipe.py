"""The Luna Realtime recipe end to end on a fake corpus encoded into real shards (4 x 64 codes at 25 Hz, the rvq-tiny
codec's grid): a shipped micro Luna -> continual training -> bit-exact resume -> export -> load -> stream with the
causal codec; the duration predictor carried over frozen, the command line, and its errors. A 2-layer, width-32
model: seconds per test.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from luna_train_testing import micro_configs

from checkpoint_testing import write_tiny_rvq_codec
from corpus_testing import HashCodec, write_corpus
from duet.config_io import from_dict, to_dict
from duet.data.token_rows import LunaDataConfig
from duet.data.utterances import train_tokenizer
from duet.errors import DuetError
from duet.luna.bundle import LunaBundle
from duet.luna.realtime import PRESETS, RealtimeConfig
from duet.luna.shipped import load_luna, load_luna_realtime, save_luna
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.loop import LoopConfig
from duet.train.metrics import read_metrics
from duet.train.recipe import read_run_config
from duet.train.recipes.luna_realtime import (
    RealtimeTrainConfig,
    export_luna_realtime,
    main,
    recipe,
    train_luna_realtime,
)
from duet.tts.luna_realtime import RealtimeRuntimeConfig, load_realtime_runtime
from duet.tts.speaker import Speaker

Q, K = 4, 64  # rvq-tiny's grid, so the exported model speaks through a real (random) causal RVQ codec
DATA = LunaDataConfig(batch_frames=200, max_frames=100, max_batch_size=6, val_items=4)
BLOCK = 4


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """-> (manifest, shards, shipped micro Luna directory, rvq-tiny codec directory)."""
    root = tmp_path_factory.mktemp("corpus")
    manifest, shards = write_corpus(root, HashCodec((K,) * Q, samples_per_frame=320), "hash-rvq-tiny")
    tokenizer = train_tokenizer(manifest, root / "tokenizer.json", DATA, vocab_size=300)
    torch.manual_seed(0)
    luna = LunaBundle(*micro_configs(q=Q, k=K)).eval()
    shipped = save_luna(luna, tokenizer, root / "luna-micro", codec={"name": "hash-rvq-tiny", "frame_rate": 25.0})
    return manifest, shards, shipped, write_tiny_rvq_codec(root)


def _recipe(corpus, **loop) -> RealtimeTrainConfig:
    manifest, shards, _, _ = corpus
    model, duration = micro_configs(q=Q, k=K)
    base = dict(max_steps=6, lr=3e-3, warmup_steps=1, log_every=1, val_every=3, diag_every=0, checkpoint_every=0)
    return RealtimeTrainConfig(name="micro", model=RealtimeConfig(luna=model, block_size=BLOCK), duration=duration,
                               shards=str(shards), manifest=str(manifest), data=DATA,
                               loop=LoopConfig(**{**base, **loop}))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_recipe_that_round_trips_json(name):
    cfg = recipe(name, shards="codes", manifest="manifest.jsonl")
    assert cfg.name == name and cfg.model.block_size == 32  # §2.6: 1.28 s blocks
    assert cfg.model.luna.backbone.vocab_size == cfg.duration.backbone.vocab_size
    assert cfg.objective.diffusion.text_drop_prob == 0.1  # CFG text dropout, as Luna's
    assert from_dict(RealtimeTrainConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg


def test_train_resume_export_load_and_stream(corpus, tmp_path):
    """Continual training from the shipped Luna; a resume mid-run repeats an uninterrupted run's losses to the bit;
    the duration predictor never moves; the export streams through the causal codec."""
    _, _, shipped, codec = corpus
    cfg = _recipe(corpus)
    a = train_luna_realtime(cfg, tmp_path / "a", init_from=shipped, progress=False)
    train_luna_realtime(cfg, tmp_path / "b", init_from=shipped, stop_at_step=3, progress=False)
    torch.manual_seed(123)  # the resume must not depend on the global RNG
    b = train_luna_realtime(None, tmp_path / "b", resume=True, progress=False)  # config and tokenizer from the run
    assert a.step == b.step == 6 and a.skipped_steps == 0
    keys = ("loss", "diffusion", "end_bce", "end_acc", "masked_ce", "val_loss", "val_end_bce")
    la = [tuple(r.get(k) for k in ("step",) + keys) for r in read_metrics(tmp_path / "a" / "metrics.jsonl")]
    lb = [tuple(r.get(k) for k in ("step",) + keys) for r in read_metrics(tmp_path / "b" / "metrics.jsonl")]
    assert la == lb and len(la) == 6 + 2  # 6 steps and 2 validations
    rows = [r for r in read_metrics(tmp_path / "a" / "metrics.jsonl") if "loss" in r]
    assert all(np.isfinite(r["end_bce"]) and r["end_bce"] > 0 for r in rows)
    state = read_state(latest_checkpoint(tmp_path / "a"))["extra"]
    assert state["recipe"] == "luna-realtime" and state["init_from"] == str(shipped)
    assert state["codec"] == {"name": "hash-rvq-tiny", "frame_rate": 25.0}
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (shipped / "tokenizer.json").read_bytes()

    # Luna's weights moved (it was trained); the duration predictor is Luna's, bit for bit (frozen).
    trained = load_weights(latest_checkpoint(tmp_path / "a"), "model")
    luna = load_luna(shipped).bundle.state_dict()
    duration = {k: v for k, v in luna.items() if k.startswith("duration.")}
    assert duration and all(torch.equal(trained[k], v) for k, v in duration.items())
    moved = [k for k, v in luna.items() if k.startswith("acoustic.")
             and not torch.equal(trained["acoustic.luna." + k.removeprefix("acoustic.")], v)]
    assert moved and {k for k in trained if "end_head" in k} == {"acoustic.end_head.weight", "acoustic.end_head.bias"}

    out = export_luna_realtime(tmp_path / "a", tmp_path / "export")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["type"] == "luna-realtime" and meta["dtype"] == "float16" and meta["config"]["block_size"] == BLOCK
    assert meta["codec"]["name"] == "hash-rvq-tiny" and meta["info"]["init_from"] == str(shipped)
    loaded = load_luna_realtime(out)
    best = load_weights(latest_checkpoint(tmp_path / "a" / "best"), "model")
    got = loaded.bundle.state_dict()
    assert got.keys() == best.keys() and all(torch.equal(got[k], best[k].half().float()) for k in got)

    config = RealtimeRuntimeConfig(bound_factor=None, stream=replace(RealtimeRuntimeConfig().stream, max_frames=10))
    # the corpus' codec is a hash: speak via rvq-tiny
    speaker = Speaker(load_realtime_runtime(out, codec=str(codec), config=config))
    with torch.no_grad():  # an end head trained 6 steps could stop anywhere: never stop, run to the bound
        speaker.runtime.model.end_head.bias.fill_(-30.0)
    text = "Thank you. Good morning."
    chunks = list(speaker.chunks(text, seed=5, steps=2))
    held = [(c.codes.clone(), c.audio.clone()) for c in chunks]
    assert [c.codes.shape for c in chunks] == [(Q, 4), (Q, 4), (Q, 2)] * 2  # two pieces, blocks of 4, bound 10
    streamed = list(speaker.stream(text, seed=5, steps=2))
    speech = speaker.speak(text, seed=5, steps=2)
    gap = round(speaker.config.gap_seconds * speaker.sample_rate)
    assert [len(x) for x in streamed] == [len(c.audio) for c in chunks[:3]] + [gap] + [len(c.audio) for c in
                                                                                        chunks[3:]]
    np.testing.assert_array_equal(np.concatenate(streamed), speech.audio)  # streamed == joined == speak
    assert speech.ended == ("bound", "bound") and len(speech.audio) == 20 * 960 + gap
    for (codes, audio), c in zip(held, chunks):  # a committed block, once handed out, never changes
        assert torch.equal(codes, c.codes) and torch.equal(audio, c.audio)
    for piece in (chunks[:3], chunks[3:]):  # each piece's chunks are the causal codec's decode of its codes
        codes = torch.cat([c.codes for c in piece], dim=1)[None]  # (1, Q, T)
        whole = speaker.codec.decode(codes).audio[0]
        torch.testing.assert_close(torch.cat([c.audio for c in piece]), whole, atol=1e-5, rtol=0)


def test_a_new_run_needs_a_luna_to_continue_and_resume_refuses_another_block_size(corpus, tmp_path):
    _, _, shipped, _ = corpus
    cfg = _recipe(corpus, max_steps=2, val_every=0)
    with pytest.raises(DuetError, match="--init-from"):
        train_luna_realtime(cfg, tmp_path / "none")
    with pytest.raises(DuetError, match="no checkpoint to resume"):  # never a random Luna by mistake
        train_luna_realtime(cfg, tmp_path / "none", resume=True)
    other = replace(cfg, model=replace(cfg.model, luna=replace(cfg.model.luna, num_codebooks=2)))
    with pytest.raises(DuetError, match="cannot continue it"):
        train_luna_realtime(other, tmp_path / "other", init_from=shipped)
    train_luna_realtime(cfg, tmp_path / "run", init_from=shipped, progress=False)
    with pytest.raises(DuetError, match="already holds a run"):
        train_luna_realtime(cfg, tmp_path / "run", init_from=shipped, progress=False)
    with pytest.raises(DuetError, match="different model"):
        train_luna_realtime(replace(cfg, model=replace(cfg.model, block_size=8)), tmp_path / "run", resume=True,
                            progress=False)
    longer = replace(cfg, loop=replace(cfg.loop, max_steps=3))
    assert train_luna_realtime(longer, tmp_path / "run", resume=True, progress=False).step == 3


def test_command_line_continues_a_shipped_luna_and_exports(corpus, tmp_path, capsys):
    manifest, shards, shipped, _ = corpus
    run = tmp_path / "run"
    argv = ["luna-realtime", "--init-from", str(shipped), "--shards", str(shards), "--manifest", str(manifest),
            "--out", str(run), "--block-size", "4", "--steps", "1", "--batch-frames", "120", "--max-batch", "4",
            "--val-every", "0", "--quiet"]
    assert main(argv) == 0
    cfg = read_run_config(run, RealtimeTrainConfig)
    assert cfg.name == "luna-realtime-tiny" and cfg.model.block_size == 4  # default preset; the shipped Luna's shape
    assert cfg.model.luna == load_luna(shipped).bundle.acoustic.config and cfg.loop.max_steps == 1
    assert "step 1 (end)" in capsys.readouterr().out
    assert main(["luna-realtime", "--out", str(run), "--resume", "--steps", "2", "--quiet"]) == 0
    assert main(["luna-realtime", "--out", str(run), "--resume", "--block-size", "8", "--quiet"]) == 2
    assert "different model" in capsys.readouterr().err
    assert main(["luna-realtime-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    assert load_luna_realtime(tmp_path / "ship").bundle.acoustic.config == cfg.model
    assert main(["luna-realtime", "--shards", str(shards), "--out", str(tmp_path / "x")]) == 2  # no --init-from
    assert "--init-from" in capsys.readouterr().err
    assert main(["luna-realtime", "--init-from", str(tmp_path / "ship"), "--shards", str(shards),
                 "--out", str(tmp_path / "y")]) == 2  # a Realtime model is not a Luna to continue
    assert "continues from a Luna" in capsys.readouterr().err
