"""The Luna recipe on a fake corpus encoded into real shards (8 x 2048 RVQ codes at 25 Hz): data and duration
targets, batching, training, bit-exact resume, export, loading, warm start and the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from luna_train_testing import K, Q, micro_configs, write_rvq_corpus

from corpus_testing import MISSING, UTTERANCES, timed_copy
from duet.config_io import from_dict, to_dict
from duet.data.shards import CodeShards
from duet.data.token_rows import LunaDataConfig, token_weights
from duet.data.utterances import train_tokenizer
from duet.errors import DuetError
from duet.luna.config import PRESETS
from duet.luna.data import LunaData
from duet.luna.model import LunaInputs
from duet.luna.shipped import load_luna
from duet.text import get_tokenizer
from duet.text.prompts import luna_prompt
from duet.text.tokens import service_ids
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.loop import LoopConfig
from duet.train.metrics import read_metrics
from duet.train.recipe import read_run_config
from duet.train.recipes.luna import (
    LunaTrainConfig,
    export_luna,
    main,
    recipe,
    train_luna,
)

DATA = LunaDataConfig(batch_frames=200, max_frames=100, max_batch_size=6, val_items=4)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    manifest, shards = write_rvq_corpus(root)
    tokenizer = train_tokenizer(manifest, root / "tokenizer.json", DATA, vocab_size=300)
    return manifest, shards, tokenizer


def _data(corpus, split="train", **cfg) -> LunaData:
    manifest, shards, tokenizer = corpus
    model, _ = micro_configs()
    return LunaData.from_shards(shards, manifest, get_tokenizer(tokenizer), replace(DATA, **cfg), split, model=model,
                                limit=DATA.val_items if split == "val" else None)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_recipe_that_round_trips_json(name):
    cfg = recipe(name, shards="codes", manifest="manifest.jsonl")
    assert cfg.name == name and cfg.model.backbone.vocab_size == cfg.duration.backbone.vocab_size
    assert cfg.diffusion.text_drop_prob == 0.1  # Luna §2.5: CFG text dropout
    assert from_dict(LunaTrainConfig, json.loads(json.dumps(to_dict(cfg)))) == cfg
    if name == "luna-tiny":  # duet's aids for the CPU model: the first codebook weighted up, heads tied to tables
        weights = cfg.diffusion.codebook_weights
        assert len(weights) == cfg.model.num_codebooks and weights[0] == max(weights) and cfg.model.tie_heads
    elif name in ("luna-tiny-fsq", "luna-tiny-rvq4"):  # the learnable grids: every cell alike, heads tied
        assert cfg.diffusion.codebook_weights == () and cfg.model.tie_heads
        assert bool(cfg.model.fsq_levels) == (name == "luna-tiny-fsq")
    else:
        assert cfg.diffusion.codebook_weights == () and not cfg.model.tie_heads


def test_items_text_and_duration_targets(corpus):
    data = _data(corpus)
    expected = {u[0] for u in UTTERANCES if u[3] == "train" and u[4] <= 100}
    assert {it.id for it in data.items} == expected and MISSING[0] not in expected
    assert data.dropped == {"no_codes": 1, "too_long": 1, "empty_text": 0}
    text = {it.id: it.text for it in data.items}
    assert text["slt-002"] == "I have three cats and two dogs."  # English normalised, as for Gepard
    assert text["esp-002"] == "Tengo 3 gatos."
    frames = {u[0]: u[4] for u in UTTERANCES}
    for item in data.items:
        assert item.frames == frames[item.id]
        assert sum(item.weights) == sum(not c.isspace() for c in item.text)  # every character counted once
    batch = data.make_batch(range(len(data)))
    for row, item in enumerate(data.items):
        s = int(batch.inputs.text_lengths[row])
        d = batch.durations[row, :s].tolist()
        assert d[0] == d[-1] == 0 and sum(d) == item.frames  # SOT/EOT carry nothing; the rest add up to T exactly
        assert all(x == 0 for x in batch.durations[row, s:].tolist())
        # Proportional to characters: each token within one frame of its exact share.
        share = [item.frames * w / sum(item.weights) for w in item.weights]
        assert all(abs(a - b) <= 1 for a, b in zip(d[1:-1], share))


def test_token_weights_count_non_space_characters():
    assert token_weights(" the cat.", [(0, 4), (4, 8), (8, 9)]) == [3, 3, 1]
    assert token_weights("a  b", [(0, 1), (1, 3), (3, 4)]) == [1, 0, 1]


def test_a_batch_holds_wrapped_text_and_frame_major_grids(corpus):
    manifest, shards, tokenizer = corpus
    data = _data(corpus)
    tok = get_tokenizer(tokenizer)
    service = service_ids(tok)
    codes = CodeShards(shards)
    for e in range(2):
        for i, batch in enumerate(data.epoch(e)):
            inputs: LunaInputs = batch.inputs
            assert inputs.prompt is None and inputs.target.shape[-1] == Q
            for row, index in enumerate(data.plan(e)[i]):
                item = data.items[index]
                s, t = int(inputs.text_lengths[row]), int(inputs.target_lengths[row])
                ids = inputs.text_ids[row, :s].tolist()
                assert ids == luna_prompt(item.text, tok, normalize=False)  # inference wraps the same way
                assert ids[0] == service.sot and ids[-1] == service.eot
                assert torch.equal(inputs.target[row, :t], codes[item.id].long().T)  # (T, Q)
                assert bool((inputs.target[row, t:] == K).all())  # padding holds the mask id


def test_batches_respect_the_budget_and_cover_each_epoch_once(corpus):
    data = _data(corpus)
    for epoch in range(3):
        plan = data.plan(epoch)
        assert sorted(i for b in plan for i in b) == list(range(len(data)))
        for b in plan:
            assert len(b) <= DATA.max_batch_size
            assert len(b) * max(data.items[i].positions for i in b) <= DATA.batch_frames
    assert data.plan(0) == _data(corpus).plan(0) and data.plan(0) != data.plan(1)
    with pytest.raises(DuetError, match="needs 8 of 64"):
        LunaData.from_shards(corpus[1], corpus[0], get_tokenizer(corpus[2]), DATA, model=micro_configs(k=64)[0])


def _recipe(corpus, **loop) -> LunaTrainConfig:
    manifest, shards, _ = corpus
    model, duration = micro_configs()
    base = dict(max_steps=8, lr=3e-3, warmup_steps=2, log_every=1, val_every=3, diag_every=0, checkpoint_every=0)
    return LunaTrainConfig(name="micro", model=model, duration=duration, shards=str(shards), manifest=str(manifest),
                           data=DATA, loop=LoopConfig(**{**base, **loop}), bpe_vocab=300)


def test_train_resume_export_load(corpus, tmp_path):
    """Resumed mid-epoch: the same losses to the bit as an uninterrupted run (noise, masks, prompt cuts and text
    dropout all come from the objective's generator, saved in every checkpoint)."""
    cfg = _recipe(corpus)
    a = train_luna(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    train_luna(cfg, tmp_path / "b", tokenizer="train-bpe", stop_at_step=4, progress=False)
    torch.manual_seed(123)
    b = train_luna(None, tmp_path / "b", resume=True, progress=False)  # config and tokenizer from the run
    assert a.step == b.step == 8 and a.skipped_steps == 0
    keys = ("loss", "diffusion", "duration_ce", "length_err", "first_ce", "val_loss", "val_length_err",
            "val_first_ce")
    la = [tuple(r.get(k) for k in ("step",) + keys) for r in read_metrics(tmp_path / "a" / "metrics.jsonl")]
    lb = [tuple(r.get(k) for k in ("step",) + keys) for r in read_metrics(tmp_path / "b" / "metrics.jsonl")]
    assert la == lb and len(la) > 8
    records = read_metrics(tmp_path / "a" / "metrics.jsonl")
    train_rows, val_rows = [r for r in records if "loss" in r], [r for r in records if "val_loss" in r]
    assert train_rows[-1]["duration_ce"] < train_rows[0]["duration_ce"]  # it learns something in 8 steps
    assert val_rows[-1]["val_loss"] < val_rows[0]["val_loss"]  # validation draws are fixed: comparable over steps
    state = read_state(latest_checkpoint(tmp_path / "a"))
    assert state["extra"]["epoch"] >= 2 and state["extra"]["codec"] == {"name": "hash-rvq", "frame_rate": 25.0}

    out = export_luna(tmp_path / "a", tmp_path / "export")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    meta = json.loads((out / "config.json").read_text())
    assert meta["type"] == "luna" and meta["dtype"] == "float16" and meta["codec"]["name"] == "hash-rvq"
    loaded = load_luna(out)
    best = latest_checkpoint(tmp_path / "a" / "best")
    trained = load_weights(best, "model")
    got = loaded.bundle.state_dict()
    assert got.keys() == trained.keys() and any(k.startswith("duration.") for k in got)
    assert all(torch.equal(got[k], trained[k].half().float()) for k in got)  # fp16 on disk, float32 back
    assert loaded.info["step"] == read_state(best)["step"] and loaded.info["preset"] == "micro"
    ids = luna_prompt("Thank you.", loaded.tokenizer)
    text, lengths = torch.tensor([ids]), torch.tensor([len(ids)])
    assert int(loaded.bundle.duration.predict_frames(text, lengths)[0]) >= 1
    grid = torch.full((1, 5, Q), K)
    logits = loaded.bundle.acoustic(LunaInputs(text, lengths, grid, torch.tensor([5])))
    assert logits.shape == (1, 5, Q, K) and torch.isfinite(logits).all()


def test_resume_refuses_a_changed_recipe_and_a_fresh_run_an_old_directory(corpus, tmp_path):
    cfg = _recipe(corpus, max_steps=2, val_every=0)
    train_luna(cfg, tmp_path, tokenizer="train-bpe", progress=False)
    with pytest.raises(DuetError, match="already holds a run"):
        train_luna(cfg, tmp_path, tokenizer="train-bpe", progress=False)
    assert train_luna(replace(cfg, loop=replace(cfg.loop, max_steps=3)), tmp_path, resume=True,
                      progress=False).step == 3
    with pytest.raises(DuetError, match="different duration_weight"):
        train_luna(replace(cfg, duration_weight=2.0), tmp_path, resume=True, progress=False)


def test_init_from_a_shipped_model_starts_from_its_weights_and_tokenizer(corpus, tmp_path):
    cfg = _recipe(corpus, max_steps=3, val_every=0)
    train_luna(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    shipped = export_luna(tmp_path / "a", tmp_path / "shipped", best=False)
    # A vanishing learning rate (and no weight decay) leaves the weights where the warm start put them.
    zero = replace(cfg, loop=replace(cfg.loop, lr=1e-30, warmup_steps=0, weight_decay=0.0))
    train_luna(zero, tmp_path / "b", stop_at_step=1, progress=False, init_from=shipped)
    warm = load_weights(latest_checkpoint(tmp_path / "b"), "model")
    want = load_luna(shipped).bundle.state_dict()
    assert warm.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(warm[k], want[k], rtol=0, atol=1e-20)
    assert (tmp_path / "b" / "tokenizer.json").read_bytes() == (shipped / "tokenizer.json").read_bytes()
    other = replace(cfg, duration=replace(cfg.duration, num_bins=8))
    with pytest.raises(DuetError, match="cannot warm-start"):
        train_luna(other, tmp_path / "c", progress=False, init_from=shipped)


def test_command_line_trains_luna_tiny_and_exports(corpus, tmp_path, capsys):
    manifest, shards, _ = corpus
    run = tmp_path / "run"
    argv = ["luna", "--preset", "luna-tiny", "--shards", str(shards), "--manifest", str(manifest), "--out", str(run),
            "--steps", "1", "--batch-frames", "120", "--max-batch", "4", "--val-every", "0", "--bpe-vocab", "300",
            "--quiet"]
    assert main([*argv[:-1], "--codebook-weights", "4,2", "--quiet"]) == 2  # 2 weights for 8 codebooks
    assert "2 weights for 8 codebooks" in capsys.readouterr().err
    assert main([*argv, "--codebook-weights", "8,4,2,1,1,1,1,1", "--no-tie-heads"]) == 0  # flags beat the preset
    cfg = read_run_config(run, LunaTrainConfig)
    assert cfg.name == "luna-tiny" and cfg.loop.max_steps == 1 and cfg.data.batch_frames == 120
    assert cfg.diffusion.codebook_weights == (8.0, 4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0) and not cfg.model.tie_heads
    assert "step 1 (end)" in capsys.readouterr().out
    assert main(["luna", "--out", str(run), "--resume", "--lr", "0.5", "--quiet"]) == 2  # not a resume any more
    assert main(["luna-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    loaded = load_luna(tmp_path / "ship")
    assert loaded.bundle.acoustic.config == cfg.model and loaded.bundle.duration.config == cfg.duration
    assert main(["luna", "--out", str(tmp_path / "none")]) == 2  # no preset and nothing to resume


def test_alignments_replace_the_spread_where_they_fit(corpus):
    plain = _data(corpus)
    first, second = plain.items[0], plain.items[1]
    S = len(first.ids) + 2
    mine = [1] * (S - 1) + [first.frames - (S - 1)]  # one frame per token, the rest to EOT
    alignments = {first.id: mine, second.id: [second.frames]}  # the second's count of tokens is wrong
    manifest, shards, tokenizer = corpus
    data = LunaData.from_shards(shards, manifest, get_tokenizer(tokenizer), DATA, "train", model=micro_configs()[0],
                                alignments=alignments)
    assert data.unaligned == len(data) - 1 and "without an alignment" in data.summary()
    assert plain.unaligned is None and "alignment" not in plain.summary()
    batch = data.make_batch([0, 1])
    assert batch.durations[0, :S].tolist() == mine
    s = int(batch.inputs.text_lengths[1])
    assert batch.durations[1, :s].tolist() == plain.make_batch([1]).durations[0, :s].tolist()  # the spread


def test_duration_only_trains_the_predictor_alone(corpus, tmp_path):
    cfg = _recipe(corpus, max_steps=2, val_every=2)
    train_luna(cfg, tmp_path / "a", tokenizer="train-bpe", progress=False)
    shipped = load_luna(export_luna(tmp_path / "a", tmp_path / "shipped", best=False)).bundle.state_dict()
    train_luna(replace(cfg, duration_only=True), tmp_path / "b", progress=False, init_from=tmp_path / "shipped")
    after = load_weights(latest_checkpoint(tmp_path / "b"), "model")
    assert all(torch.equal(after[k], shipped[k]) for k in shipped if k.startswith("acoustic."))
    assert any(not torch.equal(after[k], shipped[k]) for k in shipped if k.startswith("duration."))
    rows = read_metrics(tmp_path / "b" / "metrics.jsonl")
    train_rows = [r for r in rows if "loss" in r]
    assert train_rows and all("diffusion" not in r and r["loss"] == r["duration_ce"] for r in train_rows)
    assert any("val_duration_ce" in r for r in rows)


def test_data_align_writes_alignments_that_training_reads(corpus, tmp_path, capsys):
    from duet.cli import main as duet_main
    from duet.data.align import read_alignments

    manifest, shards, tokenizer = corpus
    out = tmp_path / "align.jsonl"
    argv = ["data", "align", "--manifest", str(manifest), "--shards", str(shards), "--tokenizer", str(tokenizer),
            "--out", str(out), "--iterations", "2", "--quiet"]
    assert duet_main(argv) == 0
    assert "kept the spread" in capsys.readouterr().out
    alignments = read_alignments(out, tokenizer)
    items = _data(corpus).items + _data(corpus, "val").items
    assert {it.id for it in items} <= set(alignments)
    for it in items:
        d = alignments[it.id]
        assert len(d) == len(it.ids) + 2 and sum(d) == it.frames
        assert min(d) >= 1 or it.frames < len(d)  # every token a frame, unless there are too few frames
    aligned = LunaData.from_shards(shards, manifest, get_tokenizer(tokenizer), DATA, "train",
                                   model=micro_configs()[0], alignments=alignments)
    assert aligned.unaligned == 0
    cfg = replace(_recipe(corpus, max_steps=1, val_every=0), data=replace(DATA, alignments=str(out)))
    assert train_luna(cfg, tmp_path / "run", tokenizer=str(tokenizer), progress=False).step == 1
    with pytest.raises(DuetError, match="another tokenizer"):  # a BPE of another size: other ids
        train_luna(replace(cfg, bpe_vocab=280), tmp_path / "other", tokenizer="train-bpe", progress=False)


def test_aligned_luna_reads_timing_trains_exports_and_speaks(corpus, tmp_path):
    from duet.tts.luna import load_luna_runtime
    from duet.tts.speaker import Speaker

    manifest, shards, tokenizer = corpus
    untimed = _data(corpus).items[0].id  # a training utterance without timing: left out, counted
    timed = {u[0] for u in UTTERANCES} - {untimed}
    root = timed_copy(manifest, tmp_path / "corpus", timed).parent
    model = replace(micro_configs()[0], aligned_window=1)
    with pytest.raises(DuetError, match="phoneme tokenizer"):  # a text BPE would read IPA in training only
        LunaData.from_shards(root / "codes", root / "manifest.jsonl", get_tokenizer(tokenizer), DATA, "train",
                             model=model)
    ipa = train_tokenizer(root / "manifest.jsonl", tmp_path / "ipa.json", DATA, vocab_size=300, phonemes="en-us")
    data = LunaData.from_shards(root / "codes", root / "manifest.jsonl", get_tokenizer(ipa), DATA, "train",
                                model=model)
    assert {it.id for it in data.items} <= timed and data.dropped["no_timing"] > 0
    for it in data.items:
        assert it.text == "ðə kwˈɪk." and len(it.durations) == len(it.ids) + 2  # SOT, tokens, EOT
        assert sum(it.durations) == pytest.approx(it.frames)  # every frame is laid out, silence included
        assert it.durations[0] == pytest.approx(0.1 * 25.0)  # SOT = the leading silence, at 25 Hz
    batch = data.epoch(0)[0]
    assert batch.durations.dtype == torch.float32 and batch.inputs.durations.shape == batch.inputs.text_ids.shape

    run = tmp_path / "run"
    assert main(["luna", "--preset", "luna-tiny", "--shards", str(root / "codes"), "--manifest",
                 str(root / "manifest.jsonl"), "--out", str(run), "--steps", "2", "--aligned", "1",
                 "--batch-frames", "200", "--val-every", "0", "--tokenizer", "train-phoneme-bpe", "--bpe-vocab",
                 "300", "--quiet"]) == 0
    cfg = read_run_config(run, LunaTrainConfig)
    assert cfg.model.aligned_window == 1
    assert main(["luna", "--out", str(run), "--resume", "--aligned", "2", "--steps", "3", "--quiet"]) == 2
    assert main(["luna-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    speaker = Speaker(load_luna_runtime(tmp_path / "ship", codec="duet-rvq"))
    assert speaker.runtime.model.config.is_aligned
    ids = luna_prompt("the quick", speaker.runtime.tokenizer)
    layout = speaker.runtime.layout(ids, 30)  # the predictor's durations stretched over the 30 frames asked for
    assert layout.shape == (1, len(ids)) and float(layout.sum()) == pytest.approx(30.0, rel=1e-5)
    cloned = speaker.runtime.layout(ids, 30, prompt_tokens=2, prompt_frames=12)
    assert float(cloned[0, :2].sum()) == pytest.approx(12.0) and float(cloned[0, 2:].sum()) == pytest.approx(30.0)
    speech = speaker.speak("the quick", seed=0, steps=2)
    assert speech.audio.size > 0 and speech.sample_rate == speaker.sample_rate
    # cloning and editing lay the text out too: the infilled grid keeps every visible cell
    prompt = speaker.voice_prompt(speech.audio, "the quick")
    assert speaker.speak("quick", seed=0, steps=2, prompt=prompt).audio.size > 0
    edited = speaker.edit(speech.audio, "the quick", (0.2, 0.5), seed=0, steps=2)
    a, b = edited.span
    original = speaker.runtime.encode_grid(speech.audio)
    assert torch.equal(edited.grid[:a], original[:a]) and torch.equal(edited.grid[b:], original[b:])

    # Luna Realtime continues from the aligned Luna, reads the same timing and streams with the predicted layout
    from duet.train.recipes.luna_realtime import main as realtime_main
    from duet.tts.luna_realtime import load_realtime_runtime

    rt = tmp_path / "rt"
    assert realtime_main(["luna-realtime", "--init-from", str(tmp_path / "ship"), "--shards", str(root / "codes"),
                          "--manifest", str(root / "manifest.jsonl"), "--out", str(rt), "--block-size", "4",
                          "--steps", "1", "--batch-frames", "200", "--val-every", "0", "--quiet"]) == 0
    assert realtime_main(["luna-realtime-export", str(rt), "--out", str(tmp_path / "rt-ship"), "--latest"]) == 0
    streamer = Speaker(load_realtime_runtime(tmp_path / "rt-ship", codec="duet-rvq"))
    runtime = streamer.runtime
    assert runtime.model.config.luna.is_aligned and runtime.aligned_durations(ids).shape == (len(ids),)
    assert streamer.speak("the quick", seed=0, steps=2).audio.size > 0
