"""Codec reconstruction and adversarial losses.

Shape legend: B batch, S samples, F STFT frames, N frequency bins, M mel bins.

- multi-resolution STFT loss: spectral convergence + log-magnitude L1 (Yamamoto et al., Parallel WaveGAN,
  arXiv:1910.11480 §2.3);
- multi-scale mel loss: L1 between log-mels at several window sizes (DAC, Kumar et al., arXiv:2306.06546 §3.4);
- least-squares GAN losses and feature matching (HiFi-GAN, Kong et al., arXiv:2010.05646 §2.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from duet.codecs.modules import LogMel


@dataclass(frozen=True)
class SpectralLossConfig:
    # (n_fft, hop) per STFT resolution; (n_fft, hop, n_mels) per mel scale.
    stft: tuple[tuple[int, int], ...] = ((512, 128), (1024, 256), (2048, 512))
    mel: tuple[tuple[int, int, int], ...] = ((512, 128, 40), (1024, 256, 80), (2048, 512, 128))
    mel_weight: float = 15.0  # HiFi-GAN weighs its mel L1 45 against a GAN loss of ~1; we have two spectral terms
    stft_weight: float = 1.0


class MultiResolutionSTFTLoss(nn.Module):
    def __init__(self, resolutions: tuple[tuple[int, int], ...]):
        super().__init__()
        self.resolutions = resolutions
        for n_fft, _ in resolutions:
            self.register_buffer(f"window_{n_fft}", torch.hann_window(n_fft), persistent=False)

    def forward(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y_hat, y (B, S) -> mean over resolutions of (spectral convergence + log-magnitude L1)."""
        total = y.new_zeros(())
        for n_fft, hop in self.resolutions:
            window = getattr(self, f"window_{n_fft}")
            mags = [torch.stft(a, n_fft, hop, window=window, return_complex=True).abs().clamp(min=1e-7)
                    for a in (y_hat, y)]  # (B, N, F) each
            sc = torch.linalg.norm(mags[1] - mags[0]) / torch.linalg.norm(mags[1]).clamp(min=1e-7)
            total = total + sc + F.l1_loss(mags[0].log(), mags[1].log())
        return total / len(self.resolutions)


class MultiScaleMelLoss(nn.Module):
    def __init__(self, sample_rate: int, scales: tuple[tuple[int, int, int], ...]):
        super().__init__()
        self.mels = nn.ModuleList([LogMel(sample_rate, n_fft, hop, n_mels) for n_fft, hop, n_mels in scales])

    def forward(self, y_hat: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y_hat, y (B, S) -> mean over scales of the L1 distance between log-mels (B, M, F)."""
        return sum(F.l1_loss(mel(y_hat), mel(y)) for mel in self.mels) / len(self.mels)


class SpectralLoss(nn.Module):
    """The reconstruction objective: weighted multi-scale mel + multi-resolution STFT."""

    def __init__(self, sample_rate: int, cfg: SpectralLossConfig = SpectralLossConfig()):
        super().__init__()
        self.cfg = cfg
        self.mel = MultiScaleMelLoss(sample_rate, cfg.mel)
        self.stft = MultiResolutionSTFTLoss(cfg.stft)

    def forward(self, y_hat: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
        mel, stft = self.mel(y_hat, y), self.stft(y_hat, y)
        return {"mel": mel, "stft": stft, "spectral": self.cfg.mel_weight * mel + self.cfg.stft_weight * stft}


# ---- adversarial ----------------------------------------------------------------------------------------------------


def discriminator_loss(real: list[torch.Tensor], fake: list[torch.Tensor]) -> torch.Tensor:
    """Least-squares GAN: real logits -> 1, fake logits -> 0, summed over sub-discriminators."""
    return sum(torch.mean((1 - r) ** 2) + torch.mean(f**2) for r, f in zip(real, fake))


def generator_loss(fake: list[torch.Tensor]) -> torch.Tensor:
    return sum(torch.mean((1 - f) ** 2) for f in fake)


def feature_matching_loss(real_feats: list[list[torch.Tensor]], fake_feats: list[list[torch.Tensor]]) -> torch.Tensor:
    """Mean L1 between the discriminators' hidden activations on real (detached) and generated audio."""
    losses = [F.l1_loss(f, r.detach()) for rs, fs in zip(real_feats, fake_feats) for r, f in zip(rs, fs)]
    return sum(losses) / len(losses)
