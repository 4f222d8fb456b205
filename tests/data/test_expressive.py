"""Expressive corpora: styles, synthesised events spliced at tagged word boundaries, their times in the manifest."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf

from duet.data import cli
from duet.data.manifest import Utterance, read_manifest, split_key, write_manifest
from duet.data.nonverbal_sounds import RELATIVE_DB, SOUNDS, event_sound
from duet.data.splice import PAD, speech_rms, splice_events, timed_events
from duet.data.styles import STYLE_NAMES
from duet.data.timing import Timing, check_timing, read_timing
from duet.text.tags import split_tags

SR = 16000


def micro(preset):
    """The same recipe at one sentence per voice, reading the first corpus's small text pool."""
    return replace(preset, voices=(), text_sources={}, en_templates=20,
                   expressive=tuple(replace(q, sentences=1) for q in preset.expressive))


@pytest.fixture(scope="module")
def built(tmp_path_factory, monkeypatch_module):
    from duet.data import presets

    out = tmp_path_factory.mktemp("expressive")
    monkeypatch_module.setitem(presets.PRESETS, "expressive", lambda: micro(presets.expressive()))
    parser = argparse.ArgumentParser(prog="duet")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["data", "build", "--preset", "expressive", "--out", str(out), "--workers", "2",
                              "--quiet"])
    assert args.func(args) == 0
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_sounds_are_deterministic_and_distinct():
    for name in SOUNDS:
        a, b = event_sound(name, SR, seed=3), event_sound(name, SR, seed=3)
        assert np.array_equal(a, b) and abs(float(np.sqrt(np.mean(a**2))) - 1.0) < 1e-3
        assert 0.15 * SR < len(a) < 1.3 * SR and abs(a[0]) < 1e-3 and abs(a[-1]) < 1e-3
        assert not np.array_equal(a[: len(event_sound(name, SR, seed=4))], event_sound(name, SR, seed=4)[: len(a)])


def _toy(alphabet: str = "ipa"):
    """Three 0.3 s 'words' of tones with 0.1 s silent gaps, and their timing."""
    words, audio, phones, t = [], [], [], 0.1
    audio.append(np.zeros(int(0.1 * SR)))
    for i, w in enumerate(("ab", "cd", "ef")):
        tone = 0.3 * np.sin(2 * np.pi * (200 + 50 * i) * np.arange(int(0.3 * SR)) / SR)
        audio.append(tone)
        phones += [(w[0], t, t + 0.15), (w[1], t + 0.15, t + 0.3)]
        words.append((w, t, t + 0.3))
        t += 0.3
        if i < 2:
            audio.append(np.zeros(int(0.1 * SR)))
            phones.append((" " if alphabet == "ipa" else "pau", t, t + 0.1))
            t += 0.1
    audio.append(np.zeros(int(0.1 * SR)))
    units = [p[0] for p in phones]
    phonemes = "".join(units) if alphabet == "ipa" else " ".join(units)
    return np.concatenate(audio).astype(np.float32), Timing(phonemes, tuple(phones), tuple(words), alphabet)


@pytest.mark.parametrize("alphabet", ["ipa", "festival"])
def test_a_spliced_event_sits_where_its_timing_says(alphabet):
    audio, timing = _toy(alphabet)
    spliced = splice_events(audio, SR, timing, [("cough", 1), ("breath", 3)], seed=5)
    assert [e[0] for e in spliced.events] == ["cough", "breath"]
    assert not check_timing(spliced.timing, len(spliced.audio) / SR)
    assert timed_events(spliced.timing) == spliced.events
    (_, c0, c1), (_, b0, b1) = spliced.events
    level = speech_rms(audio, SR, timing)
    cough = event_sound("cough", SR, seed=5 * 1000 + 0) * level * 10 ** (RELATIVE_DB["cough"] / 20)
    i = round(c0 * SR)
    assert np.allclose(spliced.audio[i : i + len(cough)], cough, atol=1e-6)  # the very samples, at that time
    assert 0.4 - 1e-3 <= c0 - PAD <= 0.5 + 1e-3  # the cut is in the silent gap after word 1 (0.4-0.5 s)
    assert np.abs(spliced.audio[round((c0 - PAD) * SR) : i]).max() == 0.0  # silence before the sound
    words = [w for w, _, _ in spliced.timing.words]
    assert words == ["ab", "cough", "cd", "ef", "breath"]
    block = (c1 - c0) + 2 * PAD
    assert spliced.timing.words[2][1] == pytest.approx(timing.words[1][1] + block, abs=1e-4)  # later words moved
    assert spliced.timing.words[0] == timing.words[0]
    if alphabet == "ipa":
        assert spliced.timing.phonemes == "ab [cough] cd ef [breath]"
    assert b0 - PAD >= spliced.timing.words[3][2] - 1e-4 and b1 <= len(spliced.audio) / SR  # after the last word


def test_two_events_at_one_boundary_are_refused():
    audio, timing = _toy()
    with pytest.raises(Exception, match="one word boundary"):
        splice_events(audio, SR, timing, [("cough", 1), ("sigh", 1)])


def test_manifest_writes_the_new_fields_only_when_set(tmp_path):
    plain = Utterance("a", "Hi.", "en", "s", "wavs/s/a.wav", 1.0, "piper", "train", "fortunes")
    tagged = replace(plain, id="b", text="Hi [laughter].", emotion="happy", events=(("laughter", 0.5, 0.9),))
    path = write_manifest(tmp_path / "m.jsonl", [plain, tagged])
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert "emotion" not in lines[0] and "events" not in lines[0]
    assert lines[1]["events"] == [["laughter", 0.5, 0.9]]
    assert read_manifest(path) == [plain, tagged]


def test_expressive_build_labels_styles_and_times_events(built):
    rows = read_manifest(built / "manifest.jsonl")
    summary = json.loads((built / "summary.json").read_text())
    assert summary["build"]["skipped"] == 0
    assert {u.emotion for u in rows} == set(STYLE_NAMES)
    assert {u.source for u in rows} == {"piper", "festival", "flite", "espeak"}
    tagged = [u for u in rows if u.events]
    assert tagged and all(u.source != "espeak" for u in tagged)
    for u in rows:
        spoken = split_tags(u.text)
        assert len(u.events) == len(spoken.events) and [e[0] for e in u.events] == [n for n, _ in spoken.events]
        if not u.events:
            continue
        audio, sr = sf.read(str(built / u.path), dtype="float32")
        timing = read_timing(built / u.path)
        assert timed_events(timing) == u.events
        assert not check_timing(timing, len(audio) / sr)
        speech = speech_rms(audio, sr, timing)
        for name, start, end in u.events:
            inside = audio[int(start * sr) : int(end * sr)]
            before = audio[int((start - PAD + 0.01) * sr) : int((start - 0.01) * sr)]
            assert np.sqrt(np.mean(inside**2)) > 10 ** ((RELATIVE_DB[name] - 8) / 20) * speech
            assert np.abs(before).max() < 1e-3  # the spliced pad is silent
        words = [w for w, _, _ in timing.words]
        assert [w for w in words if w in SOUNDS] == [n for n, _ in spoken.events]


def test_styles_share_a_split_with_their_sentence(built):
    rows = read_manifest(built / "manifest.jsonl")
    by_sentence: dict[str, set[str]] = {}
    for u in rows:
        by_sentence.setdefault(split_key(split_tags(u.text).spoken), set()).add(u.split)
    assert all(len(s) == 1 for s in by_sentence.values())
    per_voice = {}
    for u in rows:
        per_voice.setdefault(u.speaker.rsplit("-", 1)[0], set()).add(split_tags(u.text).spoken)
    assert all(len(texts) == 1 for texts in per_voice.values())  # one sentence read in every style


def test_the_detector_finds_the_spliced_events(built):
    from duet.eval.expressive_manifest import event_report, labelled

    report = event_report(built / "manifest.jsonl", labelled(built / "manifest.jsonl", None))
    assert report.overall.references > 0
    assert report.overall.recall >= 0.8 and report.overall.f1 >= 0.7


def test_rerun_renders_nothing(built):
    from duet.data import presets
    from duet.data.build import build_corpus

    report = build_corpus(micro(presets.expressive()), built, workers=1, progress=False)
    assert report.rendered == 0 and report.utterances == len(read_manifest(built / "manifest.jsonl"))
