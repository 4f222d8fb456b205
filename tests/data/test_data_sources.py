"""Sources: transcript cleaning, text filters, missing binaries, broken source files."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest
import soundfile as sf

from duet.data.build import build_corpus
from duet.data.manifest import read_manifest
from duet.data.plan import CorpusPreset, SpeakerQuota
from duet.data.presets import espeak, festival
from duet.data.sources import festival as festival_source
from duet.data.sources.asterisk import AsteriskPrompts, clean_prompt, list_prompts
from duet.data.sources.festival import FestivalSpeaker
from duet.data.sources.pocketsphinx import PocketsphinxTestdata, list_recordings
from duet.data.text_sources import clean_sentences, fortune_sentences, short_utterances, template_sentences
from duet.errors import MissingDependency


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("Please enter your password followed by the pound key.",) * 2,
        ("at [@]", "at"),
        ('IAX (note: does not say "2")', "IAX"),
        ("...has joined the conference.", "has joined the conference."),
        ("Agent login.  Please enter your number.", "Agent login. Please enter your number."),
        ("“Pour quitter, appuyez sur 8.”", "Pour quitter, appuyez sur 8."),
        ("[this is a simple beep tone]", None),
        ("<beep ascending>", None),
        ("(10 seconds of silence)", None),
        ("press * to toggle pause, press # to enter", None),
        ("appuyez sur dièse.vm-review-nonurgent: Pour enlever ce message", None),
    ],
)
def test_clean_prompt(raw, clean):
    assert clean_prompt(raw) == clean


def test_installed_english_asterisk_prompts():
    prompts, dropped = list_prompts(AsteriskPrompts())
    assert len(prompts) > 500  # of 568 prompts, only markup-only and symbol prompts are dropped
    assert dropped["not speakable"] >= 10
    by_name = {p.name: p for p in prompts}
    assert by_name["digits/7"].text == "seven"
    assert "beep" not in by_name and "silence/1" not in by_name
    assert all(p.path.is_file() and not re.search(r"[\[\]<>*#]", p.text) for p in prompts)


def test_pocketsphinx_recordings():
    recs = list_recordings(PocketsphinxTestdata())
    texts = {r.name: r.text for r in recs}
    assert texts["goforward"] == "go forward ten meters"
    assert texts["cards-001"] == "ten of clubs"
    assert texts["librivox-sense_and_sensibility_01_austen_64kb-0880"] == "he was not an ill disposed young man"
    assert all(r.path.is_file() for r in recs)


def test_english_fortune_sentences_are_clean():
    sentences = fortune_sentences("en")
    assert len(sentences) > 5000
    assert len(set(sentences)) == len(sentences)
    for s in sentences:
        assert s.isascii() and 3 <= len(s.split()) <= 25 and s[0].isupper() and s[-1] in ".!?"
        assert not re.search(r"[\"()\[\]<>/@#*_=]|--", s)


def test_clean_sentences_filters():
    fortunes = [
        "Too short.",
        "This one is a perfectly fine sentence. And here is another good one!\n\t\t-- Somebody Famous",
        "A line of code:\n\tx = y + 1;",
        'She said "hello" to the cat.',
        "It was a fuck of a day, really.",
        "Café au lait is very tasty indeed.",
    ]
    kept = clean_sentences(fortunes, "en")
    assert kept == ["And here is another good one!", "This one is a perfectly fine sentence."]
    assert clean_sentences(["¿Dónde está la biblioteca pública?"], "es") == ["¿Dónde está la biblioteca pública?"]


def test_short_utterances_and_templates():
    short = short_utterances(300, seed=1)
    assert len(short) == 300 and short == short_utterances(300, seed=1)
    assert all(1 <= len(s.split()) <= 2 for s in short)
    assert not any("'" in s for s in short)  # no possessives
    en = template_sentences("en", 200, seed=0)
    assert len(en) == 200 and sum(bool(re.search(r"\d", s)) for s in en) == 200
    assert template_sentences("ky", 50, seed=0) == template_sentences("ky", 50, seed=0)


def _preset(*quotas, **kw) -> CorpusPreset:
    return CorpusPreset(name="test", voices=tuple(quotas), en_templates=20, short_pool=20, **kw)


def test_missing_festival_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no binaries at all
    with pytest.raises(MissingDependency) as err:
        build_corpus(_preset(SpeakerQuota(festival("kal_diphone"), 2)), tmp_path / "c", workers=1, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "apt-get install festival" in msg
    assert not (tmp_path / "c" / "manifest.jsonl").exists()


def test_missing_espeak_is_one_line(tmp_path, monkeypatch):
    from duet.data.sources import espeak_library

    monkeypatch.setattr(espeak_library, "SONAME", "libespeak-ng-missing.so.0")
    espeak_library.close_library()  # a reader started by an earlier test: the next one loads the library again
    with pytest.raises(MissingDependency) as err:
        build_corpus(_preset(SpeakerQuota(espeak("en-us"), 2)), tmp_path / "c", workers=1, progress=False)
    assert "\n" not in str(err.value) and "apt-get install espeak-ng" in str(err.value)


def test_missing_festival_voice_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(festival_source, "VOICE_ROOT", tmp_path)  # a Festival with no voices installed
    with pytest.raises(MissingDependency, match="apt-get install festvox-kallpc16k$"):
        FestivalSpeaker("festival-kal", "kal_diphone").check()
    with pytest.raises(MissingDependency, match="apt-cache search festvox"):
        FestivalSpeaker("festival-x", "no_such_diphone").check()


def test_broken_source_file_is_skipped_and_counted(tmp_path):
    sounds = tmp_path / "sounds"
    sounds.mkdir()
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(8000) / 16000)
    sf.write(str(sounds / "good.wav"), tone, 16000, subtype="PCM_16")
    (sounds / "broken.wav").write_bytes(b"RIFF this is not really a wave file")
    sf.write(str(sounds / "quiet.wav"), np.zeros(8000), 16000, subtype="PCM_16")
    transcripts = tmp_path / "core-sounds-xx.txt.gz"
    lines = [
        "; test prompts",
        "good: A good prompt.",
        "broken: A broken prompt.",
        "quiet: Silence here.",
        "beep: [a beep]",
        "absent: No file for this one.",
    ]
    transcripts.write_bytes(gzip.compress("\n".join(lines).encode()))
    cfg = AsteriskPrompts(language="en", speaker="asterisk-test", sound_dir=sounds, transcripts=transcripts)
    report = build_corpus(_preset(asterisk=(cfg,)), tmp_path / "c", workers=1, progress=False)

    utts = read_manifest(tmp_path / "c" / "manifest.jsonl")
    assert [u.text for u in utts] == ["A good prompt."]
    assert abs(utts[0].duration - 0.5) < 1e-6
    assert report.skipped == 2 and report.rendered == 1
    summary = json.loads((tmp_path / "c" / "summary.json").read_text())
    assert summary["skipped"]["asterisk"] == {"unreadable source file": 1, "silent audio": 1}
    assert summary["dropped"]["asterisk"] == {"not speakable": 1, "no audio file": 1}
    assert "unreadable source file" in (tmp_path / "c" / "summary.md").read_text()
