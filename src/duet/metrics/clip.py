"""How one in-memory clip scores: WER against its text and, when cloning, speaker similarity to a reference clip.
One result type (:class:`ClipScore`) and one protocol (:class:`ClipScoring`) for every reader: Gepard's DPO pairs
(``duet.train.gepard_pairs``), Luna's GRPO rewards (``duet.train.rewards``), ``duet speak --verify`` and the speech
API's ``verify`` (``duet.tts.verify``). These are ``duet eval run``'s ``wer`` and ``sim`` metrics
(``duet.eval.scoring``) for audio that never touches a file.

:class:`ClipScorer` reads the metric models of ``duet.metrics.models``, as duet eval does, so post-training,
verification and evaluation hear with the same Whisper and speaker encoder: Whisper (``duet.metrics.asr``, the
bundled tiny.en unless a CTranslate2 directory is named) transcribes, ``duet.metrics.wer.word_error`` scores the
transcript with Seed-TTS-eval normalisation (or Whisper's English normaliser: ``ClipScoreConfig.normalizer``), and the speaker encoder (``duet.metrics.speaker``, Resemblyzer, or WavLM
x-vectors with ``wavlm:DIR``) gives the cosine to the reference clip, whose embedding is cached by path.

A clip Whisper cannot read (no samples: the stop head fired at once; silent or non-finite audio) has the empty
transcript, so its WER is 1 (every word deleted). A SIM that cannot be computed (nothing left after silence
trimming, a reference that cannot be embedded) is None; so is the SIM of a clip scored without a reference. Each
reader decides what None means to it: a DPO pair's quality counts it 0, a GRPO reward ranks it below any measured SIM.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from duet.errors import DuetError, MissingDependency
from duet.metrics.models import MetricModels


@dataclass(frozen=True)
class ClipScore:
    wer: float  # against the target text (0 = perfect; may exceed 1)
    transcript: str = ""  # what the recogniser heard ("" for a clip it cannot read)
    sim: float | None = None  # to the reference clip; None without one, or when it cannot be computed


class ClipScoring(Protocol):
    def score(self, audio: np.ndarray, sample_rate: int, text: str, reference: Path | None = None) -> ClipScore:
        """Mono audio (S,) of one utterance that should say ``text`` (in the voice of ``reference``, if given)."""
        ...


@dataclass(frozen=True)
class ClipScoreConfig:
    asr_model: str | None = None  # CTranslate2 Whisper directory or "base"; None = the bundled tiny.en (as duet eval)
    language: str = "en"
    speaker: str = "resemblyzer"  # or "wavlm:DIR" (as duet eval)
    device: str = "cpu"
    normalizer: str = "duet"  # how WER reads text: "duet" (Seed-TTS-eval) or "whisper" (duet.metrics.wer)


class ClipScorer:
    """:class:`ClipScoring` with Whisper and a speaker encoder; the models load on first use."""

    def __init__(self, config: ClipScoreConfig = ClipScoreConfig()):
        self.config = config
        self.models = MetricModels(config.asr_model, config.language, config.speaker, config.device)
        self._references: dict[Path, np.ndarray] = {}

    def score(self, audio: np.ndarray, sample_rate: int, text: str, reference: Path | None = None) -> ClipScore:
        """Mono audio (S,) of one utterance that should say ``text`` (in the voice of ``reference``, if given)."""
        from duet.metrics.wer import word_error

        heard = self._transcribe(audio, sample_rate)
        sim = None if reference is None else self._similarity(audio, sample_rate, Path(reference))
        return ClipScore(wer=word_error(text, heard, self.config.normalizer).rate, transcript=heard, sim=sim)

    def _transcribe(self, audio: np.ndarray, sample_rate: int) -> str:
        asr = self.models.asr  # a bad model directory fails here: an error, not every clip heard as nothing
        if not audio.size:
            return ""
        try:
            return asr.transcribe(audio, sample_rate)
        except MissingDependency:  # nor is a missing eval extra
            raise
        except DuetError:  # audio Whisper cannot take (silent, non-finite): nothing was said
            return ""

    def _similarity(self, audio: np.ndarray, sample_rate: int, reference: Path) -> float | None:
        speaker = self.models.speaker
        try:
            if reference not in self._references:
                self._references[reference] = speaker.embed_path(reference)
            return speaker.similarity(speaker.embed(audio, sample_rate), self._references[reference])
        except DuetError:  # no speech left to embed
            return None
