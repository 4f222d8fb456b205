"""A WavLM teacher for semantic distillation of duet-rvq's first codebook (Luna report §2.2: "first codebook
distilled from a WavLM encoder"). Optional: needs ``transformers`` and a local WavLM checkpoint in safetensors.

Shape legend: B batch, S samples, T codec frames, H teacher width.

The teacher reads 16 kHz audio normalised to zero mean and unit variance per item (as WavLM's feature extractor
does for the large models), and its target is the average of all hidden layers (SpeechTokenizer's choice for a
HuBERT teacher, arXiv:2308.16692 §3.2), pooled from WavLM's 50 Hz to the codec's frame rate.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from duet.audio import resample
from duet.errors import DuetError, MissingDependency

TEACHER_RATE = 16_000


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
