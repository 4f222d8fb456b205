"""The tiny corpus end to end: manifest contents, measured durations, text-disjoint splits, resume."""

from __future__ import annotations

import json
import shutil
from collections import defaultdict

import soundfile as sf

from duet.data.build import build_corpus
from duet.data.manifest import SPLITS, read_manifest, split_key
from duet.data.presets import tiny


def test_tiny_manifest_matches_audio(tiny_corpus):
    root = tiny_corpus.out_dir
    utts = read_manifest(root / "manifest.jsonl")
    assert len(utts) == tiny_corpus.utterances >= 40
    assert len({u.id for u in utts}) == len(utts)
    for u in utts:
        path = root / u.path
        assert not u.path.startswith("/") and path.is_file()
        info = sf.info(str(path))
        assert info.channels == 1 and info.subtype == "PCM_16"
        assert abs(info.frames / info.samplerate - u.duration) < 0.010, u.id
        assert u.split in SPLITS and u.text.strip() and u.language in {"en", "es"}
    assert len({u.speaker for u in utts}) >= 3
    assert {"festival", "espeak", "asterisk"} <= {u.source for u in utts}
    # Both Festival voices are in, at their native rates (slt 32 kHz, kal 16 kHz).
    rates = {u.speaker: sf.info(str(root / u.path)).samplerate for u in utts if u.source == "festival"}
    assert rates["festival-slt"] == 32000 and rates["festival-kal"] == 16000


def test_tiny_splits_are_disjoint_by_text(tiny_corpus):
    utts = read_manifest(tiny_corpus.out_dir / "manifest.jsonl")
    splits_of = defaultdict(set)
    for u in utts:
        splits_of[split_key(u.text)].add(u.split)
    assert all(len(s) == 1 for s in splits_of.values())
    assert {u.split for u in utts} >= {"train"}


def test_tiny_summary_agrees_with_manifest(tiny_corpus):
    root = tiny_corpus.out_dir
    utts = read_manifest(root / "manifest.jsonl")
    summary = json.loads((root / "summary.json").read_text())
    assert summary["utterances"] == len(utts)
    assert abs(summary["hours"] - sum(u.duration for u in utts) / 3600) < 1e-3
    for group in ("source", "speaker", "language", "split"):
        assert sum(r["utterances"] for r in summary["by"][group].values()) == len(utts)
    assert summary["by"]["speaker"]["festival-slt"]["utterances"] == sum(u.speaker == "festival-slt" for u in utts)
    assert "| speaker |" in (root / "summary.md").read_text()


def test_rerun_renders_nothing(tiny_corpus):
    root = tiny_corpus.out_dir
    before = {p: p.stat().st_mtime_ns for p in (root / "wavs").rglob("*.wav")}
    manifest_before = (root / "manifest.jsonl").read_text()
    report = build_corpus(tiny(), root, workers=2, seed=0, progress=False)
    assert report.rendered == 0 and report.reused == tiny_corpus.utterances
    assert {p: p.stat().st_mtime_ns for p in (root / "wavs").rglob("*.wav")} == before
    assert (root / "manifest.jsonl").read_text() == manifest_before


def test_rerun_renders_only_missing_or_broken(tiny_corpus, tmp_path):
    root = tmp_path / "corpus"
    shutil.copytree(tiny_corpus.out_dir, root)
    utts = read_manifest(root / "manifest.jsonl")
    festival_utt = next(u for u in utts if u.source == "festival")
    (root / festival_utt.path).unlink()
    asterisk_utt = next(u for u in utts if u.source == "asterisk")
    (root / asterisk_utt.path).write_bytes(b"RIFF\x00\x00")  # a truncated file is not a finished one
    report = build_corpus(tiny(), root, workers=1, seed=0, progress=False)
    assert report.rendered == 2 and report.reused == len(utts) - 2
    again = {u.id: u for u in read_manifest(root / "manifest.jsonl")}
    assert abs(again[festival_utt.id].duration - festival_utt.duration) < 1e-3  # deterministic synthesis
    assert abs(again[asterisk_utt.id].duration - asterisk_utt.duration) < 1e-3


def test_partial_build_then_finish_then_reuse(tmp_path):
    """``max_hours`` stops early with a manifest of what is finished; a rerun completes it; another corpus with the
    same speaker links the finished files (audio and timing) instead of rendering them."""
    from duet.data.plan import CorpusPreset, SpeakerQuota
    from duet.data.presets import espeak

    preset = CorpusPreset(name="mini", voices=(SpeakerQuota(espeak("en-us"), sentences=8),), batch_size=2,
                          en_templates=20, val_fraction=0.0, test_fraction=0.0)
    first = build_corpus(preset, tmp_path / "a", workers=1, progress=False, max_hours=1e-6)
    assert 0 < first.utterances < 8 and first.summary["build"]["planned"] == 8
    assert len(read_manifest(tmp_path / "a" / "manifest.jsonl")) == first.utterances
    done = build_corpus(preset, tmp_path / "a", workers=1, progress=False)
    assert done.utterances == 8 and done.reused == first.utterances
    other = build_corpus(preset, tmp_path / "b", workers=1, progress=False, reuse=[tmp_path / "a"])
    assert other.rendered == 0 and other.reused == 8
    a, b = (read_manifest(tmp_path / d / "manifest.jsonl") for d in "ab")
    assert a == b
    u = b[0]
    assert (tmp_path / "b" / u.path).samefile(tmp_path / "a" / u.path)  # linked, not rendered again


def test_synthesisers_read_the_text_as_inference_prepares_it(tmp_path, monkeypatch):
    """A synthesiser is handed the manifest text normalised as every model reads it (numbers, money and titles
    written out), so the audio, its timing and a model's tokens say the same words; the manifest keeps the text."""
    import duet.data.build as build
    from duet.data.plan import CorpusPreset, SpeakerQuota
    from duet.data.presets import espeak
    from duet.text.prompts import prepare_input

    seen: dict[str, str] = {}
    render = build.render_batch

    def spy(renderer, items):
        seen.update((item.id, item.text) for item in items)
        return render(renderer, items)

    monkeypatch.setattr(build, "render_batch", spy)
    preset = CorpusPreset(name="mini", voices=(SpeakerQuota(espeak("en-us"), sentences=6),), batch_size=3,
                          en_templates=20, val_fraction=0.0, test_fraction=0.0)
    build_corpus(preset, tmp_path, workers=1, progress=False)
    rows = read_manifest(tmp_path / "manifest.jsonl")
    assert rows and {u.id for u in rows} == set(seen)
    assert all(seen[u.id] == prepare_input(u.text, u.language) for u in rows)
    assert prepare_input("Dr. Lee paid $5 in 1990.") == "Doctor Lee paid five dollars in nineteen ninety."
