"""meta.lst: parsing with bad lines (each reported with its line number), round trip, and set building."""

import json

import numpy as np
import pytest
import soundfile as sf

from duet.errors import DuetError
from duet.eval.testset import BuildConfig, TestItem, build_set, impostor_prompts, read_meta, read_speakers, write_meta


def _wav(path, seconds=0.5, sr=16_000):
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    sf.write(str(path), 0.3 * np.sin(2 * np.pi * 220 * t), sr)
    return path


def test_bad_lines_are_reported_with_line_numbers_and_skipped(tmp_path):
    _wav(tmp_path / "p.wav")
    _wav(tmp_path / "wavs" / "g.wav")
    (tmp_path / "meta.lst").write_text(
        "\n".join([
            "u1|hello there|p.wav|good morning",  # 1: fine, 4 fields
            "u2|hello there|p.wav|good evening|wavs/g.wav",  # 2: fine, 5 fields
            "u3|only three|p.wav",  # 3: too few fields
            "",  # blank: ignored, not a problem
            "u1|hello there|p.wav|again",  # 5: repeated utt
            "../evil|hello|p.wav|escape",  # 6: not a file name
            "u4|hello there|p.wav|   ",  # 7: empty target
            "u5|hello there||half a prompt",  # 8: prompt text without wav
            "u6|hello there|missing.wav|no prompt file",  # 9: missing wav
            "u7|hello there|p.wav|no gt file|wavs/nope.wav",  # 10: missing gt wav
            "u8|||no prompt at all",  # 11: fine: no prompt
            "a|b|c|d|e|f",  # 12: too many fields
        ]) + "\n", encoding="utf-8")
    ts = read_meta(tmp_path)  # a directory holding meta.lst is accepted too
    assert [it.utt for it in ts.items] == ["u1", "u2", "u8"]
    assert [it.line for it in ts.items] == [1, 2, 11]
    assert {p.line: p.stage for p in ts.problems} == {n: "parse" for n in (3, 5, 6, 7, 8, 9, 10, 12)}
    msgs = {p.line: p.message for p in ts.problems}
    assert "got 3" in msgs[3] and "repeats" in msgs[5] and "file name" in msgs[6] and "empty target" in msgs[7]
    assert "no prompt wav" in msgs[8] and "prompt wav is missing" in msgs[9] and "gt wav is missing" in msgs[10]
    assert ts.lines == 11 and ts.name == tmp_path.name
    u2 = ts.items[1]
    assert u2.prompt_wav == tmp_path / "p.wav" and u2.gt_wav == tmp_path / "wavs" / "g.wav"
    assert ts.items[2].prompt_wav is None and ts.items[2].prompt_text == ""
    assert ts.problems[0].describe() == "meta.lst:3: parse: " + msgs[3]


def test_missing_meta_lst_is_one_error(tmp_path):
    with pytest.raises(DuetError, match="test set not found"):
        read_meta(tmp_path / "nope.lst")


def test_write_then_read_round_trip_with_relative_paths(tmp_path):
    p, g = _wav(tmp_path / "audio" / "p.wav"), _wav(tmp_path / "audio" / "g.wav")
    items = [TestItem("a", "prompt words here", p, "target one", g, 1),
             TestItem("b", "", None, "target two", None, 2)]
    path = write_meta(tmp_path / "set" / "meta.lst", items)
    assert path.read_text().splitlines()[0] == "a|prompt words here|../audio/p.wav|target one|../audio/g.wav"
    back = read_meta(path)
    assert not back.problems
    assert [(i.utt, i.prompt_text, i.target_text) for i in back.items] == [(i.utt, i.prompt_text, i.target_text)
                                                                          for i in items]
    assert back.items[0].prompt_wav.resolve() == p.resolve() and back.items[0].gt_wav.resolve() == g.resolve()
    with pytest.raises(DuetError, match="cannot hold"):
        write_meta(tmp_path / "x.lst", [TestItem("c", "", None, "a|b", None, 1)])


def _corpus(tmp_path):
    rows = []

    def add(i, text, speaker, split, duration=3.0):
        path = f"wavs/{speaker}/u{i}.wav"
        _wav(tmp_path / path, 0.2)
        rows.append({"id": f"u{i}", "text": text, "language": "en", "speaker": speaker, "path": path,
                     "duration": duration, "source": "festival", "split": split})

    add(0, "The first test sentence here.", "kal", "test")
    add(1, "Another test sentence for kal.", "kal", "test")
    add(2, "Hello.", "kal", "test")  # short register
    add(3, "Good morning!", "kal", "test")  # short register (2 words)
    add(4, "A long training sentence for kal.", "kal", "train")
    add(5, "The only test sentence of slt.", "slt", "test")
    add(6, "A training sentence of slt here.", "slt", "train")
    add(7, "Too short a prompt.", "slt", "train", duration=1.0)  # below min_prompt_s
    add(8, "Nobody else speaks like me.", "lonely", "test")  # no prompt by the same speaker
    rows.append({**rows[0], "id": "fr0", "language": "fr", "speaker": "kal"})  # other language: ignored
    m = tmp_path / "manifest.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return m


def test_build_clone_and_short_sets(tmp_path):
    m = _corpus(tmp_path)
    clone = build_set(m, tmp_path / "clone", BuildConfig(kind="clone"))
    assert clone.items == 3 and clone.skipped == {"no prompt by the same speaker": 1}
    items = {it.utt: it for it in read_meta(clone.path).items}
    assert set(items) == {"u0", "u1", "u5"}
    # same speaker, another sentence; from the test split when there is one (u0 <-> u1), else any split (u5 <- u6)
    assert items["u0"].prompt_wav.name == "u1.wav" and items["u1"].prompt_wav.name == "u0.wav"
    assert items["u5"].prompt_wav.name == "u6.wav" and items["u5"].prompt_text == "A training sentence of slt here."
    assert items["u0"].gt_wav.name == "u0.wav"
    assert read_speakers(read_meta(clone.path)) == {"u0": "kal", "u1": "kal", "u5": "slt"}

    short = build_set(m, tmp_path / "short", BuildConfig(kind="short"))
    s_items = read_meta(short.path).items
    assert [it.utt for it in s_items] == ["u2", "u3"]
    assert all(it.prompt_wav.parent.name == "kal" and it.prompt_wav.name in ("u0.wav", "u1.wav") for it in s_items)
    # deterministic: building again gives the same file
    again = build_set(m, tmp_path / "short2", BuildConfig(kind="short"))
    assert again.path.read_text() == short.path.read_text()
    with pytest.raises(DuetError, match="no entries in split 'dev'"):
        build_set(m, tmp_path / "x", BuildConfig(split="dev"))
    with pytest.raises(DuetError, match="kind"):
        BuildConfig(kind="long")


def test_build_set_of_some_speakers_from_every_split(tmp_path):
    """Voices held out of training: all their utterances are targets, a few per speaker."""
    m = _corpus(tmp_path)
    built = build_set(m, tmp_path / "slt", BuildConfig(kind="clone", split="all", speakers=("slt",)))
    items = read_meta(built.path).items
    assert [it.utt for it in items] == ["u5", "u6", "u7"]  # u7 is too short to prompt, not to be a target
    assert [it.prompt_wav.name for it in items] == ["u6.wav", "u5.wav", "u6.wav"]  # u7: its own split's u6
    capped = build_set(m, tmp_path / "cap", BuildConfig(kind="clone", split="all", per_speaker=1))
    assert read_speakers(read_meta(capped.path)) == {"u0": "kal", "u5": "slt"}
    with pytest.raises(DuetError, match="no entries of speakers nobody"):
        build_set(m, tmp_path / "x", BuildConfig(speakers=("nobody",)))
    with pytest.raises(DuetError, match="per_speaker"):
        BuildConfig(per_speaker=0)


def test_impostor_prompts_are_other_speakers_prompts(tmp_path):
    p = {name: tmp_path / f"{name}.wav" for name in ("a1", "a2", "b1", "c1")}
    items = [TestItem("x", "t", p["a1"], "one", None, 1), TestItem("y", "t", p["a2"], "two", None, 2),
             TestItem("z", "t", p["b1"], "three", None, 3), TestItem("w", "t", p["c1"], "four", None, 4),
             TestItem("n", "", None, "five", None, 5)]
    speakers = {"x": "A", "y": "A", "z": "B", "w": "C", "n": "D"}
    got = impostor_prompts(items, speakers)
    assert {k: sorted(v) for k, v in got.items()} == {
        "x": [p["b1"], p["c1"]], "y": [p["b1"], p["c1"]], "z": sorted([p["a1"], p["a2"], p["c1"]]),
        "w": sorted([p["a1"], p["a2"], p["b1"]]), "n": sorted(p.values())}
    assert all(len(v) == 1 for v in impostor_prompts(items, speakers, limit=1).values())
    assert impostor_prompts(items, {}) == {}
    (tmp_path / "set").mkdir()
    meta = write_meta(tmp_path / "set" / "meta.lst", [TestItem("x", "", None, "one", None, 1)])
    assert read_speakers(read_meta(meta)) == {}  # a Seed-TTS-eval set has no speakers.json
    (meta.parent / "speakers.json").write_text("[1, 2]")
    with pytest.raises(DuetError, match="must map"):
        read_speakers(read_meta(meta))


def test_word_set_draws_plain_one_and_two_word_prompts(tmp_path):
    from duet.eval.testset import build_word_set

    words = tmp_path / "words"
    plain = [f"w{c}ord" for c in "abcdefghijklmnopqrstuvwxyz"]
    words.write_text("\n".join(["Alice", "dog's", "ab", "x" * 11, *plain]) + "\n")
    built = build_word_set(tmp_path / "set", count=10, words=words, two_word_share=0.3, seed=1)
    items = read_meta(built.path).items
    assert built.items == len(items) == 10
    texts = [it.target_text for it in items]
    assert [len(t.split()) for t in texts] == [1] * 7 + [2] * 3
    used = [w for t in texts for w in t.split()]
    assert len(set(used)) == 13 and set(used) <= set(plain)  # no names, possessives, too short or too long words
    assert all(it.prompt_wav is None and it.gt_wav is None for it in items)
    again = build_word_set(tmp_path / "again", count=10, words=words, two_word_share=0.3, seed=1)
    assert again.path.read_text() == built.path.read_text()
    with pytest.raises(DuetError, match="plain words"):
        build_word_set(tmp_path / "x", count=30, words=words)
    with pytest.raises(DuetError, match="cannot read the word list"):
        build_word_set(tmp_path / "x", words=tmp_path / "missing")


def test_corpus_words_are_the_manifests_common_plain_words(tmp_path):
    from duet.eval.testset import corpus_words

    rows = [{"id": f"u{i}", "text": text, "language": lang, "speaker": "s", "path": f"u{i}.wav", "duration": 1.0,
             "source": "festival", "split": "train"}
            for i, (text, lang) in enumerate([("The garden gate, the garden!", "en"), ("Garden party at noon.", "en"),
                                              ("Le garden gate.", "fr"), ("Gate garden of Eden", "en")])]
    m = tmp_path / "manifest.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sorted(corpus_words(m)) == ["garden"]  # 4 English uses; "gate" has 2, "the" 2
    assert sorted(corpus_words(m, min_count=2)) == ["garden", "gate", "the"]


def test_word_set_with_a_reference_voice_has_recordings_of_each_target(tmp_path):
    import soundfile as sf

    from duet.data.presets import synth_speaker
    from duet.eval.testset import build_word_set

    plain = ["apple", "river", "garden", "window", "yellow", "basket"]
    built = build_word_set(tmp_path / "set", count=4, words=plain, two_word_share=0.25, seed=0,
                           reference=synth_speaker("espeak-en-us-p50-s175"))
    items = read_meta(built.path).items
    assert len(items) == 4
    for it in items:
        audio, rate = sf.read(it.gt_wav)
        seconds = len(audio) / rate
        assert it.gt_wav.parent == tmp_path / "set" / "gt" and 0.2 < seconds < 3.0
    one, two = [len(sf.read(it.gt_wav)[0]) for it in items if len(it.target_text.split()) == 1], \
        [len(sf.read(it.gt_wav)[0]) for it in items if len(it.target_text.split()) == 2]
    assert min(two) > min(one)  # two words take longer to say than the shortest single word
    with pytest.raises(DuetError, match="no corpus voice"):
        synth_speaker("piper-nobody")
