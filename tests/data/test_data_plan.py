"""Split assignment, planning determinism, presets, and the manifest format."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from duet.data.manifest import Utterance, assign_split, read_manifest, split_key, write_manifest
from duet.data.plan import plan_corpus
from duet.data.presets import PRESETS, get_preset, tiny
from duet.errors import DuetError


def test_split_key_ignores_case_punctuation_and_spacing():
    assert split_key("Hello,  World!") == split_key("hello world") == "hello world"
    assert split_key("Don't stop.") == split_key("don t stop")
    assert split_key("Ёлка") == split_key("ёлка")


def test_assign_split_is_deterministic_and_follows_fractions():
    texts = [f"sentence number {i}" for i in range(20000)]
    first = [assign_split(t, 7, 0.05, 0.1) for t in texts]
    assert first == [assign_split(t, 7, 0.05, 0.1) for t in texts]
    share = {s: first.count(s) / len(texts) for s in ("train", "val", "test")}
    # 20k draws: the standard error of a 5-10% share is about 0.2%; allow 5 of them.
    assert abs(share["test"] - 0.10) < 0.01 and abs(share["val"] - 0.05) < 0.01
    other_seed = [assign_split(t, 8, 0.05, 0.1) for t in texts]
    assert other_seed != first  # the seed reshuffles which sentences are held out
    assert assign_split("Good night.", 7, 0.05, 0.1) == assign_split("good NIGHT", 7, 0.05, 0.1)


def test_assign_split_rejects_bad_fractions():
    with pytest.raises(DuetError):
        assign_split("x", 0, 0.6, 0.5)


def test_plan_is_deterministic_and_split_ignores_speaker():
    a, b = plan_corpus(tiny(), seed=3), plan_corpus(tiny(), seed=3)

    def rows(plan):
        return [(u.id, u.text, u.split, u.path) for u in plan.utterances]

    assert rows(a) == rows(b)
    c = plan_corpus(tiny(), seed=4)
    assert [u.text for u in a.utterances] != [u.text for u in c.utterances]  # the seed picks other texts


def test_base_plan_sends_each_sentence_to_one_split_whoever_reads_it():
    plan = plan_corpus(get_preset("base"), seed=0)
    splits, speakers = defaultdict(set), defaultdict(set)
    for u in plan.utterances:
        splits[split_key(u.text)].add(u.split)
        speakers[split_key(u.text)].add(u.speaker)
    assert all(len(s) == 1 for s in splits.values())
    assert sum(len(s) > 1 for s in speakers.values()) > 100  # many sentences are read by several speakers
    assert {u.split for u in plan.utterances} == {"train", "val", "test"}


SOURCES = {
    "tiny": {"festival", "espeak", "asterisk", "pocketsphinx"},
    "base": {"festival", "espeak", "asterisk", "pocketsphinx"},
    "joe": {"piper"},
    "large": {"piper", "festival", "flite", "espeak", "asterisk", "pocketsphinx"},
    "expressive": {"piper", "festival", "flite", "espeak"},
    "voices": {"piper", "festival", "flite", "espeak"},
}


def test_every_preset_plans():
    for name in PRESETS:
        plan = plan_corpus(get_preset(name), seed=0)
        assert len({u.id for u in plan.utterances}) == len(plan.utterances) > 0
        assert {u.source for u in plan.utterances} == SOURCES[name]
        synthesised = [u for u in plan.utterances if u.source not in ("asterisk", "pocketsphinx")]
        assert all(u.text_source for u in synthesised)
    with pytest.raises(DuetError, match="unknown corpus preset"):
        get_preset("huge")


def test_base_plan_shape():
    plan = plan_corpus(get_preset("base"), seed=0)
    utts = plan.utterances
    assert len({u.speaker for u in utts}) >= 40
    assert {"en", "es", "pt-br", "nl", "ky", "fr"} == {u.language for u in utts}
    short = sum(len(u.text.split()) <= 2 for u in utts)
    assert 0.15 < short / len(utts) < 0.4  # ~10% of the hours: short items are ~4x shorter than sentences
    foreign = sum(u.language != "en" for u in utts)
    assert 0.05 < foreign / len(utts) < 0.15
    festival = [u for u in utts if u.speaker in ("festival-slt", "festival-kal")]
    assert len(festival) > 0.4 * len(utts)


def test_short_register_is_english_only():
    preset = tiny()
    es = preset.voices[-1]
    assert es.speaker.language == "es"
    bad = replace(preset, voices=(replace(es, short=3),))
    with pytest.raises(ValueError, match="English only"):
        plan_corpus(bad)


def test_manifest_round_trip(tmp_path):
    utts = [
        Utterance("a", "Hello.", "en", "s1", "wavs/s1/a.wav", 1.25, "festival", "train"),
        Utterance("b", "¿Qué tal?", "es", "s2", "wavs/s2/b.wav", 0.5, "espeak", "test"),
    ]
    path = write_manifest(tmp_path / "m.jsonl", utts)
    assert read_manifest(path) == utts
    assert not (tmp_path / "m.jsonl.tmp").exists()
    (tmp_path / "bad.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(DuetError, match="bad.jsonl:1"):
        read_manifest(tmp_path / "bad.jsonl")


def test_base_plan_is_what_it_was():
    """`base` is the shipped models' provenance: the same ids, splits and texts as when it was first built (the hash
    was taken from the planner before text sources were added)."""
    import hashlib

    plan = plan_corpus(get_preset("base"), seed=0)
    rows = "\n".join(sorted(f"{u.id}|{u.split}|{u.text}" for u in plan.utterances))
    assert len(plan.utterances) == 11306
    assert hashlib.sha1(rows.encode()).hexdigest() == "a286fa324f22a5bf8eb1967ceed8b2110a1e52b2"


def test_large_presets_read_ten_times_the_text_over_many_voices():
    from duet.data.presets import LARGE_TEXTS
    from duet.data.text_sources import sourced_pool

    pool = sourced_pool("en", LARGE_TEXTS, 0, 1500)
    assert len(pool) >= 80_000 and len({split_key(t) for t, _ in pool}) == len(pool)
    assert {s for _, s in pool} == set(LARGE_TEXTS)
    plan = plan_corpus(get_preset("large"), seed=0)
    english = [u for u in plan.utterances if u.language == "en"]
    assert len({u.speaker for u in english}) >= 8
    assert sum(u.source == "piper" for u in english) > 0.3 * len(english)
    splits = defaultdict(set)
    for u in plan.utterances:
        splits[split_key(u.text)].add(u.split)
    assert all(len(s) == 1 for s in splits.values())
    # `joe` is `large`'s Piper voice exactly, so a built `joe` is reused whole (`duet data build --reuse`)
    joe = {u.id for u in plan_corpus(get_preset("joe"), seed=0).utterances}
    assert joe <= {u.id for u in english}


def test_a_larger_quota_keeps_every_earlier_pick():
    from dataclasses import replace

    preset = get_preset("joe")
    small = replace(preset, voices=(replace(preset.voices[0], sentences=300, short=0, everyday=0),))
    big = replace(preset, voices=(replace(preset.voices[0], sentences=600, short=0, everyday=0),))
    texts_small = [u.text for u in plan_corpus(small).utterances]
    texts_big = [u.text for u in plan_corpus(big).utterances]
    assert texts_big[:300] == texts_small and len(set(texts_big)) == 600


def test_the_everyday_register_is_planned_after_everything_else_and_never_holds_a_probe():
    from dataclasses import replace

    from duet.data.everyday import PROBES, everyday_sentences

    preset = get_preset("joe")
    quota = preset.voices[0]
    assert quota.everyday > 0
    without = plan_corpus(replace(preset, voices=(replace(quota, everyday=0),))).utterances
    full = plan_corpus(preset).utterances
    assert [u.id for u in full[: len(without)]] == [u.id for u in without]  # nothing already rendered moves
    added = full[len(without):]
    assert {u.text_source for u in added} == {"everyday"} and len(added) <= quota.everyday
    assert not {u.text for u in full} & set(PROBES)
    assert sum("hello" in u.text.lower() for u in added) >= 20  # what the books never say
    assert everyday_sentences(50) == everyday_sentences(200)[:50]  # a quota grows without replanning
    es = tiny().voices[-1]
    with pytest.raises(ValueError, match="English only"):
        plan_corpus(replace(tiny(), voices=(replace(es, everyday=3),)))


def test_voices_preset_holds_its_unseen_voices_apart():
    from duet.data.presets import VOICES_HELD_OUT

    plan = plan_corpus(get_preset("voices"), seed=0)
    speakers = defaultdict(list)
    for u in plan.utterances:
        speakers[u.speaker].append(u)
    assert {u.language for u in plan.utterances} == {"en"} and len(speakers) >= 60
    # every held-out voice reads enough for a clone set (a target and another recording as its reference)
    assert all(len(speakers[name]) == 40 for name in VOICES_HELD_OUT)
    # no other speaker shares a held-out espeak-ng variant (f3, m4), Flite's rms or Festival's ked
    trained = set(speakers) - set(VOICES_HELD_OUT)
    assert not [s for s in trained if "-f3-" in s or "-m4-" in s or "rms" in s or "ked" in s]
    # the timbres are speakers of their own, each rendered by its engine: 14 of Piper, 8 of Flite, 6 of Festival
    for engine, count in (("piper", 14), ("flite", 8), ("festival", 6)):
        timbres = [s for s in trained if s.startswith(f"{engine}-") and "-t" in s]
        assert len(timbres) == count and all(u.source == engine for s in timbres for u in speakers[s])
