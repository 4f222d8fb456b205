"""The Gepard recipe on a fake corpus encoded into real shards: data, batching, augmentation, training, resume,
export and the command line."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from gepard_train_testing import MISSING, UTTERANCES, small_config, write_corpus

from corpus_testing import timed_copy
from duet.config_io import from_dict, to_dict
from duet.errors import DuetError
from duet.gepard.checkpoint import load_gepard
from duet.gepard.config import PRESETS, with_aligned_input
from duet.gepard.data import GepardData, GepardDataConfig, train_tokenizer
from duet.gepard.model import GepardModel, GepardPrompt
from duet.text import get_tokenizer
from duet.text.tokens import service_ids
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.loop import LoopConfig
from duet.train.metrics import read_metrics
from duet.train.recipe import read_run_config
from duet.train.recipes.gepard import GepardTrainConfig, main, recipe, train_gepard
from duet.train.recipes.gepard_export import export_gepard
from duet.train.recipes.gepard_export import main as export_main

SHORT = {"slt-003", "slt-004", "kal-001", "kal-005"}  # "Yes.", "Hello there!", "No.", "Thank you.": 1-2 words
DATA = GepardDataConfig(batch_frames=200, max_frames=100, max_batch_size=6, val_items=4)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    manifest, shards = write_corpus(root)
    tokenizer = train_tokenizer(manifest, root / "tokenizer.json", DATA, vocab_size=300)
    return manifest, shards, tokenizer


def _data(corpus, split="train", **cfg) -> GepardData:
    manifest, shards, tokenizer = corpus
    return GepardData.from_shards(shards, manifest, get_tokenizer(tokenizer), replace(DATA, **cfg), split,
                                  limit=DATA.val_items if split == "val" else None)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_recipe_that_round_trips_json(name):
    cfg = recipe(name, shards="codes", manifest="manifest.jsonl")
    assert cfg.model.name == name
    assert from_dict(GepardTrainConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg


def test_items_selection_and_text_normalisation(corpus):
    data = _data(corpus)
    expected = {u[0] for u in UTTERANCES if u[3] == "train" and u[4] <= 100}
    assert {it.id for it in data.items} == expected  # no val/test, not the unencoded one, not the 120-frame one
    assert MISSING[0] not in expected and data.dropped == {"no_codes": 1, "too_long": 1, "empty_text": 0}
    text = {it.id: it.text for it in data.items}
    assert text["slt-002"] == "I have three cats and two dogs."  # English: normalised
    assert text["slt-006"] == "Doctor Smith paid four dollars and fifty cents for coffee."
    assert text["esp-002"] == "Tengo 3 gatos."  # Spanish: left as written (the normaliser is English-only)
    only_en = _data(corpus, languages=("en",))
    assert {it.id for it in only_en.items} == {i for i in expected if not i.startswith("esp")}


def test_batches_respect_the_budget_and_cover_each_epoch_once(corpus):
    data = _data(corpus)
    for epoch in range(3):
        plan = data.plan(epoch)
        assert sorted(i for b in plan for i in b) == list(range(len(data)))
        for b in plan:
            assert len(b) <= DATA.max_batch_size
            assert len(b) * max(data.items[i].positions for i in b) <= DATA.batch_frames
    assert data.plan(0) == _data(corpus).plan(0)  # a pure function of (seed, epoch): any process, any rank
    assert data.plan(0) != data.plan(1)  # reshuffled per epoch


def test_a_batch_holds_wrapped_text_and_unfolded_codes(corpus):
    manifest, shards, tokenizer = corpus
    data = _data(corpus)
    service = service_ids(get_tokenizer(tokenizer))
    batch = data.epoch(0)[0]
    ids = [data.items[i].id for i in data.plan(0)[0]]
    from duet.data.shards import CodeShards

    packed = CodeShards(shards)
    bases, levels = [1, 8, 56, 336], [8, 7, 6, 6]  # Gepard §2.3 mixed radix, first dimension least significant
    for row, uid in enumerate(ids):
        s, t = int(batch.text_lengths[row]), int(batch.audio_lengths[row])
        text = batch.text_ids[row, :s].tolist()
        assert text[0] == service.sot and text[-2:] == [service.eot, service.sos]
        assert all(x == service.pad for x in batch.text_ids[row, s:].tolist())
        codes = packed[uid]  # (8, T)
        assert t == codes.shape[1]
        for g in range(8):
            for d in range(4):
                want = (codes[g] // bases[d]) % levels[d]
                assert torch.equal(batch.codes[row, 4 * g + d, :t], want), (uid, g, d)


def test_short_register_repetition_in_training_only(corpus):
    data = _data(corpus)
    tok = data.tokenizer
    seen: Counter = Counter()
    for epoch in range(12):
        for i, batch in enumerate(data.epoch(epoch)):
            for row, item_index in enumerate(data.plan(epoch)[i]):
                item = data.items[item_index]
                s = int(batch.text_lengths[row])
                text = tok.decode(batch.text_ids[row, 1 : s - 2].tolist())
                if item.id in SHORT:
                    copies = text.count(item.text)
                    assert 1 <= copies <= 4 and text == " ".join([item.text] * copies)
                    seen[copies] += 1
                else:
                    assert text == item.text  # longer texts are never repeated
    assert seen[1] > 0 and sum(seen[c] for c in (2, 3, 4)) > 0  # prob 0.5: some plain, some repeated
    assert data.epoch(3)[0].text_ids.tolist() == data.epoch(3)[0].text_ids.tolist()  # seeded by (epoch, batch)
    val = _data(corpus, "val")
    for batch in val.batches():
        for row in range(batch.text_ids.shape[0]):
            s = int(batch.text_lengths[row])
            assert tok.decode(batch.text_ids[row, 1 : s - 2].tolist()) in {"Please call me back later.", "Okay."}
    plain = _data(corpus, augment=False)
    for epoch in range(4):
        for i, batch in enumerate(plain.epoch(epoch)):
            for row, item_index in enumerate(plain.plan(epoch)[i]):
                s = int(batch.text_lengths[row])
                assert tok.decode(batch.text_ids[row, 1 : s - 2].tolist()) == plain.items[item_index].text


def _recipe(corpus, **loop) -> GepardTrainConfig:
    manifest, shards, _ = corpus
    base = dict(max_steps=8, lr=3e-3, warmup_steps=2, log_every=1, val_every=3, diag_every=4, checkpoint_every=0)
    return GepardTrainConfig(model=small_config(), shards=str(shards), manifest=str(manifest), data=DATA,
                             loop=LoopConfig(**{**base, **loop}), bpe_vocab=300)


def test_train_resume_export_load(corpus, tmp_path):
    """Resumed mid-epoch (augmentation, reshuffled epochs): the same losses to the bit as an uninterrupted run."""
    cfg = _recipe(corpus)
    a = train_gepard(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    train_gepard(cfg, tmp_path / "b", tokenizer="train-bpe", stop_at_step=4, progress=False)
    torch.manual_seed(123)
    b = train_gepard(None, tmp_path / "b", resume=True, progress=False)  # config and tokenizer from the run
    assert a.step == b.step == 8 and a.skipped_steps == 0
    la = [(r["step"], r.get("loss"), r.get("val_loss")) for r in read_metrics(tmp_path / "a" / "metrics.jsonl")]
    lb = [(r["step"], r.get("loss"), r.get("val_loss")) for r in read_metrics(tmp_path / "b" / "metrics.jsonl")]
    assert la == lb and len(la) > 8
    state = read_state(latest_checkpoint(tmp_path / "a"))
    assert state["extra"]["epoch"] >= 2  # the run crossed epoch boundaries
    assert state["extra"]["codec"] == {"name": "hash-fsq", "frame_rate": 40.0}
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()
    for png in ("loss.png", "ranks.png"):
        assert (tmp_path / "a" / png).is_file()

    out = export_gepard(tmp_path / "a", tmp_path / "export")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    loaded = load_gepard(out)
    best = latest_checkpoint(tmp_path / "a" / "best")
    trained = load_weights(best, "model")
    got = loaded.model.state_dict()
    assert got.keys() == trained.keys()
    assert all(torch.equal(got[k], trained[k].half().float()) for k in got)  # fp16 on disk, float32 back
    assert loaded.codec["name"] == "hash-fsq" and loaded.info["step"] == read_state(best)["step"]
    assert loaded.tokenizer.encode("Thank you.") == get_tokenizer(tmp_path / "a" / "tokenizer.json").encode(
        "Thank you.")
    logits, _ = loaded.model.prefill(GepardPrompt(torch.tensor([[1, 2, 3]])))
    assert logits.codes.shape == (1, 1, 216) and torch.isfinite(logits.codes).all()


def test_resume_refuses_a_changed_recipe(corpus, tmp_path):
    cfg = _recipe(corpus, max_steps=2, val_every=0)
    train_gepard(cfg, tmp_path, tokenizer="train-bpe", progress=False)
    longer = train_gepard(replace(cfg, loop=replace(cfg.loop, max_steps=3)), tmp_path, resume=True, progress=False)
    assert longer.step == 3  # max_steps may grow on resume
    with pytest.raises(DuetError, match="different loop.lr"):
        train_gepard(replace(cfg, loop=replace(cfg.loop, lr=1.0)), tmp_path, resume=True, progress=False)


def test_tokenizer_too_large_for_the_model_is_refused(corpus, tmp_path):
    cfg = replace(_recipe(corpus, max_steps=1), model=small_config(vocab_size=300))
    with pytest.raises(DuetError, match="text embedding only 300 rows"):
        train_gepard(cfg, tmp_path, tokenizer=str(corpus[2]), progress=False)


def test_command_line_trains_gepard_tiny_and_exports(corpus, tmp_path, capsys):
    manifest, shards, _ = corpus
    run = tmp_path / "run"
    argv = ["gepard", "--preset", "gepard-tiny", "--shards", str(shards), "--manifest", str(manifest),
            "--out", str(run), "--steps", "2", "--batch-frames", "200", "--accum", "2", "--lr", "1e-3",
            "--bf16", "--val-every", "0", "--bpe-vocab", "300", "--quiet"]
    assert main(argv) == 0
    cfg = read_run_config(run, GepardTrainConfig)
    assert cfg.model.name == "gepard-tiny" and cfg.loop.max_steps == 2 and cfg.loop.accum_steps == 2
    assert cfg.loop.bf16 and cfg.loop.lr == 1e-3 and cfg.data.batch_frames == 200 and cfg.bpe_vocab == 300
    assert "step 2 (end)" in capsys.readouterr().out
    assert main(["gepard", "--out", str(run), "--resume", "--steps", "3", "--quiet"]) == 0
    assert read_state(latest_checkpoint(run))["step"] == 3
    assert main(["gepard", "--out", str(run), "--resume", "--lr", "0.5", "--quiet"]) == 2  # not a resume any more
    assert export_main(["gepard-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    loaded = load_gepard(tmp_path / "ship")
    assert isinstance(loaded.model, GepardModel) and loaded.model.config == cfg.model
    assert loaded.info["step"] == 3


def test_a_fresh_run_refuses_a_directory_that_holds_one(corpus, tmp_path):
    cfg = _recipe(corpus, max_steps=1, val_every=0)
    train_gepard(cfg, tmp_path, tokenizer="train-bpe", progress=False)
    with pytest.raises(DuetError, match="already holds a run"):
        train_gepard(cfg, tmp_path, tokenizer="train-bpe", progress=False)


def test_init_from_a_shipped_model_starts_from_its_weights_and_tokenizer(corpus, tmp_path):
    """Warm start on another machine: a new run begins at the export's (fp16) weights with its tokenizer."""
    cfg = _recipe(corpus, max_steps=3)
    train_gepard(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    shipped = export_gepard(tmp_path / "a", tmp_path / "shipped", best=False)
    # A vanishing learning rate (and no weight decay) leaves the weights where the warm start put them.
    zero = replace(cfg, loop=replace(cfg.loop, lr=1e-30, warmup_steps=0, weight_decay=0.0))
    train_gepard(zero, tmp_path / "b", stop_at_step=1, progress=False, init_from=shipped)
    warm = load_weights(latest_checkpoint(tmp_path / "b"), "model")
    want = load_gepard(shipped).model.state_dict()
    for k in want:
        torch.testing.assert_close(warm[k], want[k], rtol=0, atol=1e-20)
    assert (tmp_path / "b" / "tokenizer.json").read_bytes() == (shipped / "tokenizer.json").read_bytes()
    other = replace(cfg, model=replace(cfg.model, name="other", audio_embed_dim=4))
    with pytest.raises(DuetError, match="cannot warm-start"):
        train_gepard(other, tmp_path / "c", progress=False, init_from=shipped)


def test_warm_start_may_add_the_voice_compressor_and_text_dropout():
    """A single-voice export continues as a cloning model: same network, a fresh compressor, another dropout rate."""
    from duet.gepard.config import with_voice_prefix
    from duet.train.recipes.gepard import warm_startable

    base = PRESETS["gepard-tiny"]()
    cloning = replace(with_voice_prefix(base), text_dropout_prob=0.1)
    assert warm_startable(base, base) and warm_startable(base, cloning)
    assert warm_startable(cloning, cloning)
    assert not warm_startable(cloning, base)  # a trained compressor is never dropped silently
    assert not warm_startable(base, replace(cloning, audio_embed_dim=4))
    # the compressor's training knobs are not its network: a cloning export continues under others
    retuned = replace(cloning, voice=replace(cloning.voice, lr_multiplier=1.0, supcon_weight=0.0))
    assert warm_startable(cloning, retuned)
    assert not warm_startable(cloning, replace(cloning, voice=replace(cloning.voice, num_queries=4)))


def test_init_from_a_single_voice_export_adds_a_fresh_voice_compressor(corpus, tmp_path):
    from duet.gepard.config import with_voice_prefix

    cfg = _recipe(corpus, max_steps=2, val_every=0)
    train_gepard(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    shipped = export_gepard(tmp_path / "a", tmp_path / "shipped", best=False)
    cloning = replace(cfg, model=replace(with_voice_prefix(cfg.model), text_dropout_prob=0.2),
                      loop=replace(cfg.loop, lr=1e-30, warmup_steps=0, weight_decay=0.0))
    train_gepard(cloning, tmp_path / "b", stop_at_step=1, progress=False, init_from=shipped)
    warm = load_weights(latest_checkpoint(tmp_path / "b"), "model")
    want = load_gepard(shipped).model.state_dict()
    for k in want:  # every shipped weight carried over; the compressor is new
        torch.testing.assert_close(warm[k], want[k], rtol=0, atol=1e-20)
    assert sorted(set(warm) - set(want)) and all(k.startswith("qformer.") for k in set(warm) - set(want))


def test_held_out_speakers_are_in_no_split(corpus):
    manifest, _, _ = corpus
    from duet.data.manifest import read_manifest

    assert {"kal", "slt"} <= {u.speaker for u in read_manifest(manifest)}
    for split in ("train", "val"):
        assert "kal" in {it.speaker for it in _data(corpus, split).items}
        kept = {it.speaker for it in _data(corpus, split, held_out_speakers=("kal",)).items}
        assert "kal" not in kept and "slt" in kept


def test_guided_attention_and_text_dropout_from_the_command_line(corpus, tmp_path, capsys):
    manifest, shards, _ = corpus
    run = tmp_path / "run"
    argv = ["gepard", "--preset", "gepard-tiny", "--shards", str(shards), "--manifest", str(manifest),
            "--out", str(run), "--steps", "2", "--batch-frames", "200", "--val-every", "2", "--bpe-vocab", "300",
            "--guided-attention", "0.5", "--text-dropout", "0.1", "--quiet"]
    assert main(argv) == 0
    cfg = read_run_config(run, GepardTrainConfig)
    assert cfg.guided.weight == 0.5 and cfg.guided.enabled
    assert cfg.model.text_dropout_prob == 0.1
    # the model's training settings are fixed per run
    assert main(["gepard", "--out", str(run), "--resume", "--text-dropout", "0.2", "--quiet"]) != 0
    assert "trained with a different model" in capsys.readouterr().err
    records = read_metrics(run / "metrics.jsonl")
    assert any("guided" in r for r in records) and any("val_guided" in r for r in records)
    val = next(r for r in records if "val_loss" in r)
    assert val["val_loss"] == pytest.approx(val["val_ce"] + val["val_stop_bce"] * 2, rel=1e-4)  # no guided term


def test_aligned_data_reads_timing_and_lays_out_every_frame(corpus, tmp_path):
    manifest, shards, tokenizer = corpus
    timed = {"slt-001", "slt-002", "kal-002"}
    root = timed_copy(manifest, tmp_path / "corpus", timed).parent
    model = with_aligned_input(small_config(), window=1, duration_layers=1)
    with pytest.raises(DuetError, match="phoneme tokenizer"):  # a text BPE would read IPA in training only
        GepardData.from_shards(root / "codes", root / "manifest.jsonl", get_tokenizer(tokenizer), DATA, "train",
                               model=model)
    ipa = train_tokenizer(root / "manifest.jsonl", tmp_path / "ipa.json", DATA, vocab_size=300, phonemes="en-us")
    data = GepardData.from_shards(root / "codes", root / "manifest.jsonl", get_tokenizer(ipa), DATA, "train",
                                  model=model)
    assert {it.id for it in data.items} == timed and data.dropped["no_timing"] > 0
    for it in data.items:
        assert it.text == "ðə kwˈɪk." and len(it.durations) == len(it.ids) + 3
        assert sum(it.durations) == pytest.approx(it.frames)  # every frame is laid out, silence included
        assert it.durations[0] == pytest.approx(0.1 * 40.0) and it.durations[-1] == 0.0  # SOT = leading silence
    batch = data.epoch(0)[0]
    assert batch.durations is not None and batch.durations.shape == batch.text_ids.shape
    out = GepardModel(model)(batch)
    assert torch.isfinite(out["loss"]) and out["duration"] > 0


def train_on_timed_copy(corpus, tmp_path, *flags: str) -> Path:
    """Two steps of gepard-tiny with ``flags`` on a copy of the fake corpus that has timing files -> the run dir."""
    manifest, _, _ = corpus
    root = timed_copy(manifest, tmp_path / "corpus", {u[0] for u in UTTERANCES}).parent
    run = tmp_path / "run"
    assert main(["gepard", "--preset", "gepard-tiny", "--shards", str(root / "codes"), "--manifest",
                 str(root / "manifest.jsonl"), "--out", str(run), "--steps", "2", *flags, "--batch-frames", "200",
                 "--val-every", "0", "--tokenizer", "train-phoneme-bpe", "--bpe-vocab", "300", "--quiet"]) == 0
    return run


def test_aligned_flag_trains_and_exports(corpus, tmp_path):
    run = train_on_timed_copy(corpus, tmp_path, "--aligned", "1")
    cfg = read_run_config(run, GepardTrainConfig)
    assert cfg.model.aligned is not None and cfg.model.aligned.window == 1
    assert any("duration" in r for r in read_metrics(run / "metrics.jsonl"))
    assert export_main(["gepard-export", str(run), "--out", str(tmp_path / "export"), "--temperature", "0",
                 "--top-k", "0"]) == 0
    loaded = load_gepard(tmp_path / "export")
    assert loaded.model.is_aligned and loaded.sampling == {"temperature": 0.0, "top_k": 0}
    from duet.tts.gepard import load_gepard_runtime
    from duet.tts.speaker import Speaker

    speaker = Speaker(load_gepard_runtime(tmp_path / "export", codec="duet-fsq"))  # the model's own defaults
    params = speaker.runtime.default_params
    assert (params.temperature, params.top_k) == (0.0, 0)
    with pytest.raises(DuetError, match="speed must be a positive"):  # an aligned model takes a speed, if positive
        speaker.speak("the quick", speed=0.0)
    # a bad default is refused with one line (exit 2), nothing written
    assert export_main(["gepard-export", str(run), "--out", str(tmp_path / "bad"), "--temperature", "-1"]) == 2
    assert not (tmp_path / "bad").exists()


def test_attention_supervision_flag_trains_a_stock_model_on_the_timing(corpus, tmp_path):
    run = train_on_timed_copy(corpus, tmp_path, "--guided-attention", "2", "--guided-target", "aligned")
    cfg = read_run_config(run, GepardTrainConfig)
    assert cfg.model.aligned is None  # the architecture stays stock
    assert (cfg.guided.target, cfg.guided.weight) == ("aligned", 2.0)
    logged = [r["guided"] for r in read_metrics(run / "metrics.jsonl") if "guided" in r]
    assert logged and all(0 < g < 1 for g in logged)
    assert export_main(["gepard-export", str(run), "--out", str(tmp_path / "export")]) == 0
    assert not load_gepard(tmp_path / "export").model.is_aligned
