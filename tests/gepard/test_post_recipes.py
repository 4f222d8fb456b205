"""Gepard's post-training stages end to end on micro models: CFG / no-CFG pairs (reproducible, resumable, with the
reference log-likelihoods), cloning pairs, ``duet train gepard-dpo`` -> merged export that ``duet.load`` speaks
with, and ``duet train gepard-sft`` on selected data. A fake scorer stands in for Whisper here (its real path is
tested in test_dpo.py)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from gepard_train_testing import write_corpus

import duet
from checkpoint_testing import write_tiny_gepard
from duet.cli import main as duet_main
from duet.codecs import load as load_codec
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.finish import STOP
from duet.gepard.checkpoint import load_gepard
from duet.gepard.generate import generate
from duet.gepard.model import GepardPrompt, collate
from duet.gepard.trajectory import trajectory_logprob
from duet.metrics.clip import ClipScore
from duet.text.prompts import gepard_prompt
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.dpo_data import DPOData, DPODataConfig
from duet.train.gepard_pairs import PairPrompt, PairsConfig, PairStore, make_pairs, pair_seed
from duet.train.objectives.gepard_dpo import GepardDPO
from duet.train.recipes import gepard_post
from duet.train.recipes.gepard_post import GepardSFTConfig, SelectedData, SFTSelection, build_policy
from duet.train.runner import read_run_config

TEXTS = ["Hello there.", "Good morning, how are you?", "The quick brown fox.", "Thank you."]


class FakeScorer:
    """Every utterance heard word for word (WER 0); SIM 0.5 when cloning. Counts its calls."""

    def __init__(self, *_: object):
        self.calls: list[tuple[int, int, str, Path | None]] = []

    def score(self, audio, sample_rate, text, prompt_wav=None):
        self.calls.append((audio.shape[0], sample_rate, text, prompt_wav))
        return ClipScore(wer=0.0, transcript=text, sim=0.5 if prompt_wav is not None else None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_gepard(tmp_path_factory.mktemp("gepard"), text_dropout_prob=0.1)


def _fold(codes: torch.Tensor) -> torch.Tensor:
    return GroupFSQ(FSQConfig()).fold(codes[None].cpu())[0].to(torch.int16)


def test_pairs_are_reproducible_scored_and_resumable(tiny, tmp_path):
    loaded = load_gepard(tiny)
    model, tok = loaded.model, loaded.tokenizer
    codec = load_codec(loaded.codec["name"])
    cfg = PairsConfig(cfg_scale=2.5, temperature=1.0, top_k=0, max_frames=12, chunk=2)
    prompts = [PairPrompt(f"p{i}", t) for i, t in enumerate(TEXTS[:3])]
    scorer = FakeScorer()
    store = PairStore(tmp_path, {"settings": 1})
    assert make_pairs(model, codec, tok, prompts, store, scorer, cfg, progress=False) == 3
    assert sorted(p.name for p in (tmp_path / "codes").iterdir()) == ["00000.safetensors", "00001.safetensors"]
    assert len(scorer.calls) == 6 and all(sr == codec.sample_rate for _, sr, _, _ in scorer.calls)

    store = PairStore(tmp_path, {"settings": 1})
    for record, prompt in zip(store.records, prompts):
        ids = gepard_prompt(prompt.text, tok)
        assert record["text_ids"] == ids and record["seed"] == pair_seed(0, prompt.id)
        gp = GepardPrompt(torch.tensor([ids]))
        chosen = generate(model, gp, params=replace(cfg.sampling(record["seed"]), cfg_scale=2.5), bound=cfg.bound(),
                          uncond_prompt=gp.unconditional())
        rejected = generate(model, gp, params=cfg.sampling(record["seed"]), bound=cfg.bound())
        rows, stopped = [], []
        for side, result in (("chosen", chosen), ("rejected", rejected)):
            t = int(result.lengths[0])
            assert record[side]["frames"] == t and record[side]["ended"] == result.ended[0]
            assert torch.equal(store.tensor(record, side), _fold(result.codes[0, :, :t]))  # same seed, same frames
            rows.append((ids, result.codes[0, :, :t]))
            stopped.append(result.ended[0] == STOP)
        batch = collate(rows, pad_id=0)
        with torch.no_grad():
            ref = trajectory_logprob(model.audio_logits(batch), batch.codes, batch.audio_lengths,
                                     torch.tensor(stopped)).total
        assert [record["chosen"]["ref_logp"], record["rejected"]["ref_logp"]] == pytest.approx(ref.tolist(), rel=1e-5)
        assert torch.isfinite(ref).all()
    assert any(r["chosen"]["frames"] != r["rejected"]["frames"] or not torch.equal(
        store.tensor(r, "chosen"), store.tensor(r, "rejected")) for r in store.records)  # guidance changed something

    again = FakeScorer()
    more = prompts + [PairPrompt("p3", TEXTS[3])]
    assert make_pairs(model, codec, tok, more, PairStore(tmp_path, {"settings": 1}), again, cfg, progress=False) == 1
    assert len(again.calls) == 2  # only the new prompt was generated and scored
    with pytest.raises(DuetError, match="no unconditional path"):
        make_pairs(load_gepard(write_tiny_gepard(tmp_path / "plain")).model, codec, tok, more,
                   PairStore(tmp_path / "other", {}), again, cfg, progress=False)


def test_cloning_pairs_carry_the_prefix_and_its_similarity(tiny, tmp_path):
    import soundfile as sf

    loaded = load_gepard(tiny)
    codec = load_codec(loaded.codec["name"])
    wav = tmp_path / "ref.wav"
    sf.write(str(wav), 0.1 * np.random.default_rng(0).standard_normal(8000), codec.sample_rate)
    torch.manual_seed(0)
    prefix = torch.randn(1, 4, loaded.model.config.width) * 0.02  # stands in for a compressor's output
    cfg = PairsConfig(temperature=1.0, top_k=0, max_frames=8)
    store = PairStore(tmp_path / "pairs", {})
    prompts = [PairPrompt("a", TEXTS[0], prompt_wav=str(wav)), PairPrompt("b", TEXTS[1], prompt_wav=str(wav))]
    with pytest.raises(DuetError, match="no voice prefix"):
        make_pairs(loaded.model, codec, loaded.tokenizer, prompts, store, FakeScorer(), cfg, progress=False)
    make_pairs(loaded.model, codec, loaded.tokenizer, prompts, store, FakeScorer(), cfg,
               voice_prefix=lambda path: prefix, progress=False)
    record = store.records[0]
    assert record["chosen"]["sim"] == 0.5 and record["prompt_wav"] == str(wav)
    torch.testing.assert_close(store.tensor(record, "prefix"), prefix[0])
    train, _ = DPOData.split(store, 0, DPODataConfig())
    batch = train.make_batch([0])
    assert batch.gepard.prefix.shape == (2, 4, loaded.model.config.width)
    with torch.no_grad():
        ref = trajectory_logprob(loaded.model.audio_logits(batch.gepard), batch.gepard.codes,
                                 batch.gepard.audio_lengths, batch.stopped).total
    torch.testing.assert_close(ref.double(), batch.ref_logp, rtol=1e-5, atol=1e-4)  # scored with the same prefix


def test_gepard_dpo_command_line_trains_resumes_and_exports_a_stock_model(tiny, tmp_path, monkeypatch, capsys):
    scorers: list[FakeScorer] = []
    monkeypatch.setattr(gepard_post, "ClipScorer", lambda cfg: scorers.append(FakeScorer()) or scorers[-1])
    texts = tmp_path / "prompts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    run = tmp_path / "run"
    argv = ["gepard-dpo", "--init-from", str(tiny), "--texts", str(texts), "--out", str(run), "--steps", "3",
            "--lr", "1e-2", "--rank", "2", "--val-pairs", "1", "--val-every", "2", "--max-wer-loss", "0", "--quiet"]
    assert gepard_post.main(argv) == 0
    assert "step 3 (end)" in capsys.readouterr().out
    cfg = read_run_config(run, gepard_post.GepardDPOConfig)
    assert cfg.lora.rank == 2 and cfg.loop.max_steps == 3 and cfg.data.val_pairs == 1 and cfg.loop.val_every == 2
    assert cfg.data.max_wer_loss == 0.0
    assert cfg.pairs.temperature == 0.6 and cfg.pairs.top_k == 20  # no sampling in the model's config: speak's
    assert len(scorers[0].calls) == 2 * len(TEXTS)
    lines = (run / "pairs" / "pairs.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [f"text-{i:05d}" for i in range(len(TEXTS))]
    state = read_state(latest_checkpoint(run))
    assert state["extra"]["recipe"] == "gepard-dpo" and state["extra"]["train_pairs"] == len(TEXTS) - 1
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [m for m in metrics if "loss" in m][-1]
    assert np.isfinite(last["loss"]) and "reward_accuracy" in last and "stop_chosen" in last
    assert any("val_loss" in m for m in metrics)
    # at the start the policy is the reference that scored the pairs: every pair's loss is log 2
    train, _ = DPOData.split(PairStore(run / "pairs", json.loads((run / "pairs" / "settings.json").read_text())), 0,
                             cfg.data)
    start = build_policy(cfg, load_gepard(tiny).model)
    loss, _ = GepardDPO(cfg.dpo).loss(start, train.batches()[0])
    assert float(loss.detach()) == pytest.approx(np.log(2), abs=1e-4)

    assert gepard_post.main(["gepard-dpo", "--out", str(run), "--resume", "--steps", "4", "--quiet"]) == 0
    assert read_state(latest_checkpoint(run))["step"] == 4 and len(scorers[-1].calls) == 0  # no pair made again
    assert gepard_post.main(["gepard-dpo", "--out", str(run), "--resume", "--beta", "0.5", "--quiet"]) == 2
    assert gepard_post.main(argv) == 2  # a fresh start in a run directory is refused

    ship = tmp_path / "ship"
    assert duet_main(["train", "gepard-export", str(run), "--out", str(ship), "--latest"]) == 0
    exported = load_gepard(ship)
    init = load_gepard(tiny).model.state_dict()
    got = exported.model.state_dict()
    assert got.keys() == init.keys()  # merged: the stock names, no adapter left
    assert exported.info["stage"] == "dpo" and exported.info["lora_layers_merged"] == 14
    for name in ("model.embed_tokens.weight", "heads.stop.weight", "model.layers.0.input_layernorm.weight"):
        assert torch.equal(got[name], init[name])  # frozen in DPO
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(got[q], init[q])
    policy = build_policy(cfg)
    policy.load_state_dict(load_weights(latest_checkpoint(run), "model"))
    from duet.nn.lora import merge_lora

    merge_lora(policy.gepard)
    want = policy.gepard.state_dict()
    assert all(torch.equal(got[k], want[k].half().float()) for k in got)  # what the export wrote is the merge

    speech = duet.load(ship).speak("Hello there", seed=0)
    assert speech.audio.shape[0] > 0 and np.isfinite(speech.audio).all()


def test_gepard_sft_trains_on_the_selection_and_exports(tiny, tmp_path, capsys):
    manifest, shards = write_corpus(tmp_path / "corpus")
    data = SelectedData(SFTSelection(speakers=("slt",))).from_shards(
        shards, manifest, load_gepard(tiny).tokenizer, replace(gepard_post.GepardDataConfig(), batch_frames=200))
    assert data.items and all(it.id.startswith("slt-") for it in data.items) and data.dropped["not_selected"] > 0
    ids = tmp_path / "ids.txt"
    ids.write_text("slt-001\nkal-002\n")
    picked = SelectedData(SFTSelection(ids=str(ids))).from_shards(
        shards, manifest, load_gepard(tiny).tokenizer, replace(gepard_post.GepardDataConfig(), batch_frames=200))
    assert sorted(it.id for it in picked.items) == ["kal-002", "slt-001"]

    run = tmp_path / "sft"
    argv = ["gepard-sft", "--init-from", str(tiny), "--shards", str(shards), "--manifest", str(manifest),
            "--out", str(run), "--steps", "2", "--batch-frames", "200", "--val-every", "0", "--speakers", "slt",
            "--quiet"]
    assert gepard_post.main(argv) == 0
    cfg = read_run_config(run, GepardSFTConfig)
    assert cfg.selection.speakers == ("slt",) and cfg.loop.max_steps == 2
    assert cfg.loop.lr == pytest.approx(1e-4)  # a tenth of gepard-tiny's pretraining LR
    assert "step 2 (end)" in capsys.readouterr().out
    assert (run / "tokenizer.json").read_bytes() == (tiny / "tokenizer.json").read_bytes()
    trained = load_weights(latest_checkpoint(run), "model")
    init = load_gepard(tiny).model.state_dict()
    assert not torch.equal(trained["heads.codes.weight"], init["heads.codes.weight"])
    assert gepard_post.main(["gepard-sft", "--out", str(run), "--resume", "--steps", "3", "--quiet"]) == 0
    assert read_state(latest_checkpoint(run))["step"] == 3
    assert duet_main(["train", "gepard-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    exported = load_gepard(tmp_path / "ship")
    assert exported.info["stage"] == "sft" and exported.info["step"] == 3
    assert gepard_post.main(["gepard-sft", "--shards", str(shards), "--out", str(tmp_path / "x"), "--quiet"]) == 2


def test_a_voice_model_clones_from_a_clip_through_its_compressor(tmp_path):
    import soundfile as sf

    from duet.train.gepard_pairs import clip_prefix

    loaded = load_gepard(write_tiny_gepard(tmp_path, text_dropout_prob=0.1, voice=True))
    codec = load_codec(loaded.codec["name"])
    wav = tmp_path / "ref.wav"
    sf.write(str(wav), 0.1 * np.random.default_rng(1).standard_normal(4000), codec.sample_rate)
    prefix = clip_prefix(loaded.model, codec)(wav)
    assert prefix.shape == (1, loaded.model.config.num_prefix, loaded.model.config.width)
    store = PairStore(tmp_path / "pairs", {})
    make_pairs(loaded.model, codec, loaded.tokenizer, [PairPrompt("a", TEXTS[0], prompt_wav=str(wav))], store,
               FakeScorer(), PairsConfig(temperature=1.0, top_k=0, max_frames=6),
               voice_prefix=clip_prefix(loaded.model, codec), progress=False)
    torch.testing.assert_close(store.tensor(store.records[0], "prefix"), prefix[0])
    with pytest.raises(DuetError, match="no voice compressor"):
        clip_prefix(load_gepard(write_tiny_gepard(tmp_path / "plain")).model, codec)


def test_an_aligned_voice_model_guides_through_the_null_prefix_and_its_pairs_keep_the_layout(tmp_path):
    """Aligned text input has no text-dropped path; a voice model's CFG swaps the speaker for the null prefix, keeps
    the text and its layout, and the pairs store that layout so DPO scores the frames as they were generated."""
    import soundfile as sf

    from duet.train.gepard_pairs import clip_prefix

    loaded = load_gepard(write_tiny_gepard(tmp_path, voice=True, aligned=True))
    model, tok = loaded.model, loaded.tokenizer
    codec = load_codec(loaded.codec["name"])
    wav = tmp_path / "ref.wav"
    sf.write(str(wav), 0.1 * np.random.default_rng(2).standard_normal(4000), codec.sample_rate)
    prefix = clip_prefix(model, codec)(wav)  # (1, K, D)
    ids = gepard_prompt(TEXTS[0], tok)
    text = torch.tensor([ids])
    durations = model.duration.predict(text, torch.tensor([len(ids)]))
    gp = GepardPrompt(text, prefix=prefix, durations=durations)
    uncond = model.unconditional(gp)
    assert torch.equal(uncond.text_ids, text) and torch.equal(uncond.durations, durations)
    torch.testing.assert_close(uncond.prefix, model.voice_prefix(batch_size=1))
    with pytest.raises(DuetError, match="no text-dropped unconditional path"):
        gp.unconditional()

    store = PairStore(tmp_path / "pairs", {})
    cfg = PairsConfig(cfg_scale=3.0, temperature=1.0, top_k=0, max_frames=8)
    make_pairs(model, codec, tok, [PairPrompt("a", TEXTS[0], prompt_wav=str(wav))], store, FakeScorer(), cfg,
               voice_prefix=clip_prefix(model, codec), progress=False)
    record = store.records[0]
    torch.testing.assert_close(store.tensor(record, "durations"), durations[0])
    chosen = generate(model, gp, params=replace(cfg.sampling(record["seed"]), cfg_scale=3.0), bound=cfg.bound(),
                      uncond_prompt=uncond)
    t = int(chosen.lengths[0])
    assert torch.equal(store.tensor(record, "chosen"), _fold(chosen.codes[0, :, :t]))
    train, _ = DPOData.split(store, 0, DPODataConfig())
    batch = train.make_batch([0])
    assert batch.gepard.durations.shape == (2, len(ids))
    with torch.no_grad():
        ref = trajectory_logprob(model.audio_logits(batch.gepard), batch.gepard.codes, batch.gepard.audio_lengths,
                                 batch.stopped).total
    torch.testing.assert_close(ref.double(), batch.ref_logp, rtol=1e-5, atol=1e-4)
    with pytest.raises(DuetError, match="no unconditional path"):
        load_gepard(write_tiny_gepard(tmp_path / "plain", aligned=True)).model.unconditional(GepardPrompt(text))
