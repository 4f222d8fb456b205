"""Training references for the voice prefix (``duet.gepard.voice``, ``GepardData``) on the fake corpus: each row's
reference is a window of another utterance of its speaker, singletons and speaker-less rows are flagged, the K
prefix positions count in the budget, and every draw is a pure function of the seed."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest
import torch
from gepard_train_testing import small_config, write_corpus

from duet.gepard.config import with_voice_prefix
from duet.gepard.data import GepardData, GepardDataConfig, train_tokenizer
from duet.gepard.model import GepardModel
from duet.gepard.voice import NO_SPEAKER_ID, ReferencePicker
from duet.text import get_tokenizer

DATA = GepardDataConfig(batch_frames=200, max_frames=100, max_batch_size=6, val_items=4, max_reference_frames=6)
MODEL = with_voice_prefix(small_config(), max_reference_frames=32)
K = MODEL.voice.num_queries


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    manifest, shards = write_corpus(root)
    tokenizer = train_tokenizer(manifest, root / "tokenizer.json", DATA, vocab_size=300)
    return manifest, shards, get_tokenizer(tokenizer)


def data(corpus, split: str = "train", **cfg) -> GepardData:
    manifest, shards, tokenizer = corpus
    return GepardData.from_shards(shards, manifest, tokenizer, replace(DATA, **cfg), split, model=MODEL,
                                  limit=DATA.val_items if split == "val" else None)


def source_of(window: torch.Tensor, d: GepardData) -> list[tuple[str, int]]:
    """Every (utterance id, start) whose channel codes hold ``window`` (C, R) exactly."""
    found = []
    for item in d.items:
        codes = d.channels(item.id)  # (C, T)
        for start in range(codes.shape[1] - window.shape[1] + 1):
            if torch.equal(codes[:, start: start + window.shape[1]], window):
                found.append((item.id, start))
    return found


def test_each_reference_is_a_window_of_another_utterance_of_the_same_speaker(corpus):
    d = data(corpus)
    speakers = {it.id: it.speaker for it in d.items}
    counts = Counter(speakers.values())
    seen_rows = 0
    for batch_index, batch in enumerate(d.epoch(0)):
        rows = d.plan(0)[batch_index]
        assert batch.reference.shape[:2] == (len(rows), 32) and batch.reference_mask.shape[0] == len(rows)
        for b, i in enumerate(rows):
            item = d.items[i]
            length = int(batch.reference_mask[b].sum())
            assert bool(batch.reference_mask[b, :length].all())  # real frames first, then padding
            if counts[item.speaker] < 2:
                assert batch.no_speaker[b] and length == 0 and batch.speaker_ids[b] == NO_SPEAKER_ID
                continue
            assert not batch.no_speaker[b] and 1 <= length <= DATA.max_reference_frames
            sources = source_of(batch.reference[b, :, :length], d)
            assert sources and all(uid != item.id and speakers[uid] == item.speaker for uid, _ in sources), sources
            same = [int(batch.speaker_ids[c]) for c, j in enumerate(rows) if d.items[j].speaker == item.speaker]
            assert set(same) == {int(batch.speaker_ids[b])}
            seen_rows += 1
    assert seen_rows == sum(n for n in counts.values() if n > 1)


def test_singletons_in_a_split_are_flagged_null_sentinels(corpus):
    val = data(corpus, "val")  # slt-101 and kal-101: one utterance per speaker
    (batch,) = val.batches()
    assert batch.no_speaker.all() and not batch.reference_mask.any()
    assert (batch.speaker_ids == NO_SPEAKER_ID).all()


def references_by_item(d: GepardData, epoch: int) -> dict[str, torch.Tensor]:
    """Utterance id -> the reference codes (C, R) its row got in ``epoch`` (rows with none left out)."""
    out = {}
    for rows, batch in zip(d.plan(epoch), d.epoch(epoch)):
        for b, i in enumerate(rows):
            if batch.reference_mask[b].any():
                out[d.items[i].id] = batch.reference[b, :, : int(batch.reference_mask[b].sum())]
    return out


def test_references_are_a_pure_function_of_seed_and_epoch(corpus):
    a, b = references_by_item(data(corpus), 1), references_by_item(data(corpus), 1)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for other in (references_by_item(data(corpus), 2), references_by_item(data(corpus, seed=7), 1)):
        assert other.keys() == a.keys() and any(not torch.equal(a[k], other[k]) for k in a)


def test_the_prefix_positions_count_in_the_budget(corpus):
    d = data(corpus)
    assert d.prefix == K
    for batch in d.epoch(0):
        b = batch.text_ids.shape[0]
        assert b * (K + int((batch.text_lengths + batch.audio_lengths).max())) <= DATA.batch_frames


def test_a_voice_model_trains_on_these_batches(corpus):
    torch.manual_seed(0)
    model = GepardModel(MODEL).train()
    out = model(next(iter(data(corpus).epoch(0))))
    assert torch.isfinite(out["loss"]) and out["supcon"].item() >= 0.0


def test_picker_skips_the_item_itself_and_marks_speakerless_and_singletons():
    picker = ReferencePicker(["a", "a", "a", "", "b", "  "], [10, 3, 8, 5, 4, 6], max_frames=5)
    rng = random.Random(0)
    picks = Counter()
    for _ in range(600):
        w = picker.pick(0, rng)
        assert w is not None and w.item in (1, 2) and w.length == min(picker.frames[w.item], 5)
        assert 0 <= w.start <= picker.frames[w.item] - w.length
        picks[w.item] += 1
    assert abs(picks[1] - 300) < 60  # uniform over the speaker's other utterances
    for item in (3, 4, 5):  # speaker-less, singleton "b", blank
        assert picker.pick(item, rng) is None and picker.speaker_id(item) == NO_SPEAKER_ID
    assert picker.speaker_id(0) == picker.speaker_id(2) == 0


def test_voice_prefix_flag_trains_logs_its_terms_and_exports(corpus, tmp_path):
    from duet.gepard.checkpoint import load_gepard
    from duet.train.metrics import read_metrics
    from duet.train.recipe import read_run_config
    from duet.train.recipes.gepard import GepardTrainConfig, main
    from duet.train.recipes.gepard_export import main as export_main

    manifest, shards, _ = corpus
    run = tmp_path / "run"
    argv = ["gepard", "--preset", "gepard-tiny", "--shards", str(shards), "--manifest", str(manifest), "--out",
            str(run), "--steps", "2", "--batch-frames", "200", "--val-every", "0", "--bpe-vocab", "300",
            "--voice-prefix", "--voice-lr-multiplier", "1", "--max-reference-frames", "6",
            "--hold-out-speakers", "nobody", "--quiet"]
    assert main(argv) == 0
    cfg = read_run_config(run, GepardTrainConfig)
    assert cfg.model.voice is not None and cfg.model.voice.width == 256 and cfg.data.max_reference_frames == 6
    assert cfg.model.voice.lr_multiplier == 1.0 and cfg.data.held_out_speakers == ("nobody",)
    logged = [r for r in read_metrics(run / "metrics.jsonl") if "div" in r]
    assert logged and all(r["div"] >= 0 and r["supcon"] >= 0 for r in logged)
    assert export_main(["gepard-export", str(run), "--out", str(tmp_path / "ship"), "--latest"]) == 0
    shipped = load_gepard(tmp_path / "ship").model
    assert shipped.has_voice and shipped.config == cfg.model
