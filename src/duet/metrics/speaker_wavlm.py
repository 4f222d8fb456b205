"""Speaker similarity with a WavLM x-vector model (transformers ``WavLMForXVector``), from a local checkpoint only.

Seed-TTS-eval's SIM uses a WavLM-large speaker-verification model. We cannot ship one, so this backend is for users
who have such a checkpoint on disk (e.g. a ``microsoft/wavlm-base-plus-sv`` snapshot): ``--speaker wavlm:DIR``.
The directory must hold ``config.json`` and safetensors weights (a ``pytorch_model.bin`` is refused: loading it
would unpickle); nothing is fetched (``local_files_only``).

Input: 16 kHz mono, normalised to zero mean and unit variance per utterance (``Wav2Vec2FeatureExtractor`` with
``do_normalize=True``, which is how the speaker-verification checkpoints were trained); a
``preprocessor_config.json`` in the directory overrides that. Output: the x-vector (``.embeddings``), compared by
cosine, in [-1, 1] (Resemblyzer's are non-negative, so the two backends' numbers are not interchangeable).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from duet.audio import check_audio, load_audio, resample, to_mono
from duet.errors import DuetError
from duet.metrics.speaker import cosine_similarity

WAVLM_SAMPLE_RATE = 16_000


class WavLMSpeakerEncoder:
    def __init__(self, path: str | Path, device: str = "cpu"):
        self.path = Path(path)
        self.device = device
        self._model = None
        self._extractor = None

    def _load(self):
        if not (self.path / "config.json").is_file():
            raise DuetError(f"WavLM speaker model directory {self.path} has no config.json")
        if not any(self.path.glob("*.safetensors")):  # a pytorch_model.bin would go through torch.load (pickle)
            raise DuetError(f"WavLM speaker model directory {self.path} has no .safetensors weights; duet never "
                            "unpickles a .bin (convert it to safetensors where you trust it)")
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import Wav2Vec2FeatureExtractor, WavLMForXVector

        try:
            model = WavLMForXVector.from_pretrained(str(self.path), local_files_only=True, use_safetensors=True)
        except (OSError, ValueError) as err:
            raise DuetError(f"cannot load a WavLMForXVector from {self.path}: {err}") from err
        if (self.path / "preprocessor_config.json").is_file():
            extractor = Wav2Vec2FeatureExtractor.from_pretrained(str(self.path), local_files_only=True)
        else:
            extractor = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=WAVLM_SAMPLE_RATE, padding_value=0.0,
                                                 do_normalize=True, return_attention_mask=True)
        self._model, self._extractor = model.to(self.device).eval(), extractor

    @property
    def model(self):
        if self._model is None:
            self._load()
        return self._model

    def embed(self, audio: np.ndarray, sample_rate: int) -> np.ndarray:
        """Audio at any rate -> the x-vector (float32)."""
        import torch

        model = self.model
        wav = check_audio(resample(to_mono(audio), sample_rate, WAVLM_SAMPLE_RATE))
        inputs = self._extractor(wav, sampling_rate=WAVLM_SAMPLE_RATE, return_tensors="pt")
        with torch.inference_mode():
            out = model(input_values=inputs["input_values"].to(self.device))
        return out.embeddings[0].float().cpu().numpy()

    def embed_path(self, path: str | Path) -> np.ndarray:
        audio, sr = load_audio(path)
        return self.embed(audio, sr)

    def similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        return cosine_similarity(a, b)
