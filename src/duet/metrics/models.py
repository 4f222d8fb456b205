"""The metric models, each loaded on first use: Whisper (``asr``), a speaker encoder (``speaker``: Resemblyzer, or
WavLM x-vectors from a local checkpoint with ``"wavlm:DIR"``) and DNSMOS (``dnsmos``). One holder for every reader:
``duet eval``'s scorer (``duet.eval.scoring.Scorer``) and the clip scorer post-training and ``--verify`` hear with
(``duet.metrics.clip.ClipScorer``), so both read the same models.
"""

from __future__ import annotations

from typing import Any

from duet.errors import DuetError


def check_speaker_model(speaker: str) -> None:
    if speaker != "resemblyzer" and not speaker.startswith("wavlm:"):
        raise DuetError(f"speaker model must be 'resemblyzer' or 'wavlm:DIR', got {speaker!r}")


class MetricModels:
    """``asr_model``: a CTranslate2 Whisper directory or a shipped name (None: the bundled tiny.en; "base":
    ``duet.metrics.asr``); ``speaker``: "resemblyzer" or "wavlm:DIR"."""

    def __init__(self, asr_model: str | None = None, language: str = "en", speaker: str = "resemblyzer",
                 device: str = "cpu"):
        check_speaker_model(speaker)
        self.asr_model, self.language, self.speaker_model, self.device = asr_model, language, speaker, device
        self._asr: Any = None
        self._speaker: Any = None
        self._dnsmos: Any = None

    @property
    def asr(self):
        if self._asr is None:
            from duet.metrics.asr import ASRConfig, Transcriber

            asr = Transcriber(ASRConfig(model_path=self.asr_model, language=self.language))
            _ = asr.model_path  # a bad --asr-model fails before any audio is read (and on every later use)
            self._asr = asr
        return self._asr

    @property
    def speaker(self):
        if self._speaker is None:
            if self.speaker_model.startswith("wavlm:"):
                from duet.metrics.speaker_wavlm import WavLMSpeakerEncoder

                self._speaker = WavLMSpeakerEncoder(self.speaker_model.removeprefix("wavlm:"), self.device)
            else:
                from duet.metrics.speaker import SpeakerConfig, SpeakerEncoder

                self._speaker = SpeakerEncoder(SpeakerConfig(device=self.device))
        return self._speaker

    @property
    def dnsmos(self):
        if self._dnsmos is None:
            from duet.metrics.dnsmos import DNSMOS

            self._dnsmos = DNSMOS()
        return self._dnsmos
