"""Luna's training rows of an expressive corpus: a row's manifest emotion is the emotion token right after SOT (as
``luna_prompt(..., emotion=)`` wraps a request), with weight and duration target 0; inline event tags are one service
id each; rows without an emotion are exactly as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from luna_train_testing import micro_configs, write_rvq_corpus

from duet.data.manifest import read_manifest, write_manifest
from duet.data.token_rows import LunaDataConfig, TokenRow
from duet.data.utterances import train_tokenizer
from duet.errors import DuetError
from duet.luna.data import LunaData, with_instruction
from duet.text import get_tokenizer
from duet.text.prompts import luna_prompt
from duet.text.tokens import service_ids

DATA = LunaDataConfig(batch_frames=200, max_frames=100, max_batch_size=6, val_items=4)
EMOTIONS = {"slt-001": "happy", "slt-004": "whisper", "kal-002": "neutral"}
TAGGED = ("kal-003", "Good morning, [laugh] how are you today?")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(plain manifest, expressive manifest: emotions on some rows and a tag in one text, shards, tokenizer)."""
    root = tmp_path_factory.mktemp("corpus")
    manifest, shards = write_rvq_corpus(root)
    tokenizer = get_tokenizer(str(train_tokenizer(manifest, root / "tokenizer.json", DATA, vocab_size=300)))
    utts = [replace(u, emotion=EMOTIONS.get(u.id, ""), text=TAGGED[1] if u.id == TAGGED[0] else u.text)
            for u in read_manifest(manifest)]
    return manifest, write_manifest(root / "expressive.jsonl", utts), shards, tokenizer


def _data(corpus, manifest, **options) -> LunaData:
    return LunaData.from_shards(corpus[2], manifest, corpus[3], DATA, "train", model=micro_configs()[0], **options)


def test_an_emotion_row_reads_as_luna_prompt_with_that_emotion(corpus):
    plain, expressive = _data(corpus, corpus[0]), _data(corpus, corpus[1])
    tok, ids = corpus[3], service_ids(corpus[3])
    assert [it.id for it in plain.items] == [it.id for it in expressive.items]
    for i, (a, b) in enumerate(zip(plain.items, expressive.items)):
        texts = expressive.make_batch([i]).inputs.text_ids[0].tolist()
        emotion = EMOTIONS.get(b.id)
        assert texts == luna_prompt(b.text, tok, emotion=emotion, normalize=False)
        if emotion is not None:
            assert texts[:2] == [ids.sot, ids.emotion(emotion)] and b.ids[1:] == a.ids and b.positions == a.positions + 1
            durations = expressive.make_batch([i]).durations[0].tolist()
            assert durations[1] == 0 and durations[:1] + durations[2:] == plain.make_batch([i]).durations[0].tolist()
        elif b.id != TAGGED[0]:
            assert b == a  # untouched: same ids, weights and targets
    tagged = next(it for it in expressive.items if it.id == TAGGED[0])
    assert tagged.ids.count(ids.nonverbal("laughter")) == 1 and sum(i in ids.all for i in tagged.ids) == 1


def test_an_alignment_gets_a_zero_for_the_emotion_token(corpus):
    first = next(it for it in _data(corpus, corpus[0]).items if it.id in EMOTIONS)
    S = len(first.ids) + 2
    mine = [1] * (S - 1) + [first.frames - (S - 1)]
    data = _data(corpus, corpus[1], alignments={first.id: mine})
    row = next(it for it in data.items if it.id == first.id)
    assert row.targets() == [mine[0], 0, *mine[1:]] and sum(row.targets()) == row.frames


def test_with_instruction_keeps_float_timing_and_leaves_an_empty_instruction_alone():
    row = TokenRow("u", "hi", (5, 6), (1, 1), 4, (0.5, 1.5, 1.5, 0.5))
    assert with_instruction(row, []) is row
    put = with_instruction(row, [9])
    assert (put.ids, put.weights, put.durations) == ((9, 5, 6), (0, 1, 1), (0.5, 0.0, 1.5, 1.5, 0.5))


def test_an_unknown_emotion_in_the_manifest_is_refused(corpus, tmp_path):
    utts = [replace(u, emotion="bored" if u.id == "slt-001" else "") for u in read_manifest(corpus[0])]
    with pytest.raises(DuetError, match="slt-001: emotion 'bored'"):
        _data(corpus, write_manifest(tmp_path / "m.jsonl", utts))
