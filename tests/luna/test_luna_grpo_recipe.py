"""``duet train luna-grpo`` end to end on a micro Luna (4 x 64 codes, the rvq-tiny codec's grid, so rollouts are heard
through a real random codec) with a fake scorer in place of Whisper: rollouts -> rewards -> updates -> checkpoints ->
bit-exact resume -> export -> load; skipped groups counted; the command line's flags."""

from __future__ import annotations

import argparse
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
from duet.luna.decode import DecodeConfig
from duet.luna.shipped import load_luna, save_luna
from duet.metrics.clip import ClipScore
from duet.text import get_tokenizer
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.grpo_loop import GRPOPrompt, GRPOStepConfig, backward_groups, rollout
from duet.train.loop import LoopConfig
from duet.train.metrics import read_metrics
from duet.train.objectives.luna_grpo import group_advantages, grpo_loss
from duet.train.recipes.luna_grpo import (
    LunaGRPOConfig,
    PromptSelection,
    add_train_luna_grpo_parser,
    config_from_args,
    export_luna_grpo,
    read_prompts,
    train_luna_grpo,
)

Q, K = 4, 64


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """-> (manifest, shipped micro Luna directory, rvq-tiny codec directory)."""
    root = tmp_path_factory.mktemp("corpus")
    manifest, _ = write_corpus(root, HashCodec((K,) * Q, samples_per_frame=320), "hash-rvq-tiny")
    tokenizer = train_tokenizer(manifest, root / "tokenizer.json", LunaDataConfig(), vocab_size=300)
    torch.manual_seed(0)
    luna = LunaBundle(*micro_configs(q=Q, k=K)).eval()
    shipped = save_luna(luna, tokenizer, root / "luna-micro", codec={"name": "hash-rvq-tiny", "frame_rate": 25.0})
    return manifest, shipped, write_tiny_rvq_codec(root)


class FakeScorer:
    """Fast and deterministic in the audio: a WER from its energy, in steps of 0.25, and a SIM from its mean."""

    def score(self, audio: np.ndarray, sample_rate: int, text: str, reference=None) -> ClipScore:
        energy = float(np.abs(audio).mean())
        return ClipScore(wer=float(int(energy * 1e5) % 4) / 4, sim=float(np.tanh(audio.mean() * 1e3)))


class TiedScorer:
    """Every candidate alike: no group has a preference."""

    def score(self, audio: np.ndarray, sample_rate: int, text: str, reference=None) -> ClipScore:
        return ClipScore(wer=0.5, sim=0.3)


def _config(corpus, **loop) -> LunaGRPOConfig:
    manifest, shipped, codec = corpus
    base = dict(max_steps=4, lr=1e-3, warmup_steps=0, weight_decay=0.0, log_every=1, val_every=2, diag_every=0,
                checkpoint_every=0, device="cpu")
    return LunaGRPOConfig(init_from=str(shipped), manifest=str(manifest), codec=str(codec),
                          prompts=PromptSelection(val_items=2),
                          decode=DecodeConfig(steps=3, temperature=1.0, top_k=0, cfg_scale=2.0),
                          step=GRPOStepConfig(group_size=3, prompts_per_step=2, ppo_epochs=2, max_frames=8),
                          loop=LoopConfig(**{**base, **loop}))


def test_config_round_trips_json(corpus):
    cfg = replace(_config(corpus), model=micro_configs(q=Q, k=K)[0], duration=micro_configs(q=Q, k=K)[1])
    assert from_dict(LunaGRPOConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg


def test_prompts_come_from_the_split_with_their_recordings(corpus):
    manifest, _, _ = corpus
    prompts = read_prompts(manifest, "train", PromptSelection())
    assert prompts and all(p.language == "en" for p in prompts)  # --languages en by default: no Spanish
    assert all(p.reference is not None and p.reference.is_file() for p in prompts)
    assert {p.text for p in read_prompts(manifest, "val", PromptSelection())} == {"Please call me back later.",
                                                                                  "Okay."}
    assert all(p.reference is None for p in read_prompts(manifest, "train", PromptSelection(similarity=False)))
    assert len(read_prompts(manifest, "train", PromptSelection(), limit=3)) == 3


def test_a_prompt_with_an_emotion_reads_its_token(corpus, tmp_path):
    """An expressive manifest's emotion goes with its prompt into the rollout's condition, after SOT."""
    import json as _json

    from duet.text.prompts import luna_prompt
    from duet.text.tokens import service_ids
    from duet.train.grpo_loop import prompt_inputs

    manifest, shipped, _ = corpus
    rows = [_json.loads(line) for line in manifest.read_text().splitlines()]
    rows[0]["emotion"] = "happy"
    tagged = tmp_path / "manifest.jsonl"
    tagged.write_text("".join(_json.dumps(r) + "\n" for r in rows))
    by_text = {p.text: p for p in read_prompts(tagged, rows[0]["split"], PromptSelection(languages=()))}
    assert by_text[rows[0]["text"]].emotion == "happy"
    assert all(p.emotion is None for t, p in by_text.items() if t != rows[0]["text"])
    loaded = load_luna(shipped)
    inputs = prompt_inputs(loaded.bundle, loaded.tokenizer, by_text[rows[0]["text"]], rows=2, max_frames=8)
    want = luna_prompt(rows[0]["text"], loaded.tokenizer, language=rows[0]["language"], emotion="happy")
    assert inputs.text_ids[0].tolist() == want and want[1] == service_ids(loaded.tokenizer).emotion("happy")


def test_train_resume_export_load(corpus, tmp_path):
    """Four steps; a run stopped at step 2 and resumed repeats the uninterrupted run's metrics to the bit; the export
    is a shipped Luna with the trained acoustic weights and the untouched duration predictor."""
    _, shipped, _ = corpus
    cfg = _config(corpus)
    a = train_luna_grpo(cfg, tmp_path / "a", scorer=FakeScorer(), progress=False)
    train_luna_grpo(cfg, tmp_path / "b", scorer=FakeScorer(), progress=False, stop_at_step=2)
    torch.manual_seed(99)  # the resume must not depend on the global RNG
    b = train_luna_grpo(None, tmp_path / "b", resume=True, scorer=FakeScorer(), progress=False)
    assert a.step == b.step == 4 and a.skipped_steps == 0

    rows_a, rows_b = read_metrics(tmp_path / "a" / "metrics.jsonl"), read_metrics(tmp_path / "b" / "metrics.jsonl")
    drop = ("time", "sec_per_step")
    assert [{k: v for k, v in r.items() if k not in drop} for r in rows_a] == \
        [{k: v for k, v in r.items() if k not in drop} for r in rows_b]
    steps = [r for r in rows_a if "loss" in r]
    assert len(steps) == 4 and all(r["groups_kept"] + r["groups_skipped"] == 2 for r in steps)
    assert any(r["groups_kept"] > 0 for r in steps) and all(np.isfinite(r["loss"]) for r in steps)
    assert any(r["clip_fraction"] > 0 or r["ratio"] != 1.0 for r in steps if r["groups_kept"])  # 2 PPO epochs
    assert [r["step"] for r in rows_a if "val_wer" in r] == [2, 4]

    state = read_state(latest_checkpoint(tmp_path / "a"))["extra"]
    assert state["recipe"] == "luna-grpo" and state["init_from"] == str(shipped)
    trained = load_weights(latest_checkpoint(tmp_path / "a"), "model")
    start = load_luna(shipped).bundle.state_dict()
    assert all(torch.equal(trained[k], v) for k, v in start.items() if k.startswith("duration."))
    assert any(not torch.equal(trained[k], v) for k, v in start.items() if k.startswith("acoustic."))

    out = export_luna_grpo(tmp_path / "a", tmp_path / "export", best=False)
    meta = json.loads((out / "config.json").read_text())
    assert meta["type"] == "luna" and meta["info"]["preset"] == "luna-grpo" and meta["info"]["step"] == 4
    loaded = load_luna(out)
    got = loaded.bundle.state_dict()
    assert got.keys() == trained.keys() and all(torch.equal(got[k], trained[k].half().float()) for k in got)
    assert (out / "tokenizer.json").read_bytes() == (shipped / "tokenizer.json").read_bytes()
    assert export_luna_grpo(tmp_path / "a", tmp_path / "best").is_dir()  # best/ by held-out WER


def test_groups_without_preference_are_skipped_and_counted(corpus, tmp_path):
    """A scorer that ties every candidate: no group has a signal, every group is counted as skipped, the weights do
    not move."""
    _, shipped, _ = corpus
    cfg = replace(_config(corpus, max_steps=2, val_every=0), step=replace(_config(corpus).step, ppo_epochs=1))
    train_luna_grpo(cfg, tmp_path / "run", progress=False, scorer=TiedScorer())
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if "loss" in r]
    assert [r["groups_skipped"] for r in steps] == [2, 2] and all(r["loss"] == 0.0 for r in steps)
    trained = load_weights(latest_checkpoint(tmp_path / "run"), "model")
    assert all(torch.equal(trained[k], v) for k, v in load_luna(shipped).bundle.state_dict().items())


def test_a_skipped_group_adds_nothing_and_leaves_the_normaliser(corpus):
    """backward_groups over a skipped and a kept group = grpo_loss of the kept group alone (|B| = G)."""
    manifest, shipped, codec_dir = corpus
    from duet.codecs import load as load_codec

    loaded = load_luna(shipped)
    codec, tok = load_codec(str(codec_dir)), get_tokenizer(shipped / "tokenizer.json")
    decode = DecodeConfig(steps=3, temperature=1.0, cfg_scale=2.0)
    g = torch.Generator().manual_seed(0)
    groups = [rollout(loaded.bundle, tok, codec, FakeScorer(), GRPOPrompt(text), decode, 3, 6, g)
              for text in ("Hello there.", "Thank you.")]
    advantages, _ = group_advantages(torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0]]))
    kept = torch.tensor([False, True])
    model = loaded.bundle.acoustic
    model.zero_grad()
    backward_groups(model, groups, advantages, kept, replace(_config(corpus).step.grpo))
    split = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    grpo_loss(model, groups[1].inputs, groups[1].trajectory, advantages[1], backward=True)
    alone = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    assert split.keys() == alone.keys() and split
    assert all(torch.equal(split[k], alone[k]) for k in split)


def test_command_line_flags_and_refusals(corpus, tmp_path):
    manifest, shipped, codec = corpus
    parser = argparse.ArgumentParser()
    add_train_luna_grpo_parser(parser.add_subparsers(dest="stage"))
    args = parser.parse_args(["luna-grpo", "--init-from", str(shipped), "--manifest", str(manifest), "--out",
                              str(tmp_path / "run"), "--group-size", "6", "--kl-coef", "0.05", "--top-k", "20",
                              "--temperature", "0.9", "--no-sim", "--steps", "7", "--languages", "en,es"])
    cfg = config_from_args(args)
    assert cfg.step.group_size == 6 and cfg.step.grpo.kl_coef == 0.05 and cfg.loop.max_steps == 7
    assert cfg.decode.top_k == 20 and cfg.decode.temperature == 0.9 and cfg.decode.cfg_scale == 2.0
    assert not cfg.prompts.similarity and cfg.prompts.languages == ("en", "es")
    with pytest.raises(DuetError, match="init-from"):
        config_from_args(parser.parse_args(["luna-grpo", "--out", str(tmp_path / "x")]))
    with pytest.raises(DuetError, match="G >= 2"):
        config_from_args(parser.parse_args(["luna-grpo", "--init-from", "m", "--manifest", "x", "--out", "o",
                                            "--group-size", "1"]))
    with pytest.raises(DuetError, match="temperature > 0"):
        train_luna_grpo(replace(_config(corpus), decode=DecodeConfig(steps=2, temperature=0.0)), tmp_path / "t0",
                        scorer=FakeScorer(), progress=False)


def test_duet_train_lists_luna_grpo(capsys):
    from duet.cli import main

    with pytest.raises(SystemExit):
        main(["train", "luna-grpo", "--help"])
    assert "--group-size" in capsys.readouterr().out
