"""Speaker similarity: cosine between Resemblyzer (GE2E d-vector) embeddings.

Resemblyzer (Wan et al. 2018, "Generalized End-to-End Loss for Speaker Verification") is a 3-layer LSTM over
40-band mel frames of 16 kHz audio; its wheel ships the weights (``resemblyzer/pretrained.pt``), so nothing is
downloaded. An utterance embedding is the L2-normalised mean of embeddings of 1.6 s windows; the model ends in a
ReLU, so every component is >= 0 and the cosine of two embeddings lies in [0, 1].

Divergence from the reports: Seed-TTS-eval's SIM uses a WavLM-large speaker-verification model. Resemblyzer is
much smaller and scores in a different range (unrelated voices often reach 0.5-0.7), so our SIM is only for
comparing duet systems with each other.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import types
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.audio import check_audio, load_audio, resample, to_mono
from duet.errors import MissingDependency

SPEAKER_SAMPLE_RATE = 16_000  # Resemblyzer's mel front end is fixed at 16 kHz
_EXTRA_HINT = "pip install 'duet[eval]'"


@dataclass(frozen=True)
class SpeakerConfig:
    device: str = "cpu"
    # Resemblyzer's own preprocessing: raise quiet audio to -30 dBFS and cut pauses longer than ~180 ms
    # (webrtcvad), so leading/trailing silence of TTS output does not dilute the embedding.
    preprocess: bool = True


def _import_resemblyzer():
    """Import resemblyzer, working around webrtcvad 2.0.10's ``import pkg_resources``.

    webrtcvad (a resemblyzer dependency) reads its own version through ``pkg_resources``, which recent
    setuptools no longer ships. If it is missing we lend webrtcvad a one-function stand-in for the duration of
    its import and remove it again, so nothing else ever sees a fake ``pkg_resources``.
    """
    try:
        importlib.import_module("webrtcvad")
    except ModuleNotFoundError as err:
        if err.name == "webrtcvad":
            raise MissingDependency("webrtcvad (needed by resemblyzer)", _EXTRA_HINT) from err
        if err.name != "pkg_resources":
            raise
        shim = types.ModuleType("pkg_resources")
        shim.get_distribution = lambda name: types.SimpleNamespace(version=importlib.metadata.version(name))
        sys.modules["pkg_resources"] = shim
        try:
            importlib.import_module("webrtcvad")
        finally:
            del sys.modules["pkg_resources"]
    try:
        with warnings.catch_warnings():  # resemblyzer imports scipy.ndimage.morphology, deprecated in SciPy 1.x
            warnings.simplefilter("ignore", DeprecationWarning)
            import resemblyzer
    except ModuleNotFoundError as err:
        raise MissingDependency("resemblyzer", _EXTRA_HINT) from err
    return resemblyzer


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of two embedding vectors (they need not be unit length)."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


class SpeakerEncoder:
    """Resemblyzer voice encoder, loaded once on first use."""

    embedding_size = 256

    def __init__(self, config: SpeakerConfig = SpeakerConfig()):
        self.config = config
        self._encoder = None
        self._resemblyzer = None

    @property
    def encoder(self):
        if self._encoder is None:
            self._resemblyzer = _import_resemblyzer()
            self._encoder = self._resemblyzer.VoiceEncoder(device=self.config.device, verbose=False)
        return self._encoder

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """Audio at any rate -> (256,) float32 unit vector."""
        encoder = self.encoder
        # Resample with duet's polyphase filter rather than letting resemblyzer call librosa.resample.
        wav = check_audio(resample(to_mono(audio), sample_rate, SPEAKER_SAMPLE_RATE))
        if self.config.preprocess:
            wav = check_audio(self._resemblyzer.preprocess_wav(wav), what="audio after silence trimming")
        return encoder.embed_utterance(wav).astype(np.float32)

    def embed_path(self, path: str | Path) -> np.ndarray:
        audio, sr = load_audio(path)
        return self.embed(audio, sr)

    def similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        """Cosine similarity of two embeddings from :meth:`embed`."""
        return cosine_similarity(a, b)
