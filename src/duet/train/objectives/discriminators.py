"""Small GAN discriminators for codec training on a CPU: multi-period (HiFi-GAN, arXiv:2010.05646 §2.2) and
multi-resolution STFT (UnivNet, arXiv:2106.07889 §2.2).

Shape legend: B batch, S samples, P period, N frequency bins, F STFT frames.

Divergence from the papers, so that a discriminator step costs about as much as a generator step on 2 cores:
channel widths are 4-8x smaller (16-128 instead of 32-1024), the STFT discriminator strides in frequency from its
first layer, and the adversarial losses see short sub-crops of part of the batch (``DiscriminatorConfig``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm


@dataclass(frozen=True)
class DiscriminatorConfig:
    periods: tuple[int, ...] = (2, 3, 5, 7, 11)
    period_channels: tuple[int, ...] = (16, 32, 64, 128)
    resolutions: tuple[tuple[int, int], ...] = ((512, 128), (1024, 256), (2048, 512))
    stft_channels: int = 16
    # The adversarial terms see the first ``batch`` items, first ``seconds`` of each (HiFi-GAN trains on 0.37 s
    # segments): the discriminators then cost about as much as the generator step instead of 5x more.
    batch: int = 8
    seconds: float = 0.5


class PeriodDiscriminator(nn.Module):
    def __init__(self, period: int, channels: tuple[int, ...]):
        super().__init__()
        self.period = period
        widths = (1,) + channels
        self.convs = nn.ModuleList([
            weight_norm(nn.Conv2d(a, b, (5, 1), (3, 1), padding=(2, 0))) for a, b in zip(widths[:-1], widths[1:])])
        self.convs.append(weight_norm(nn.Conv2d(channels[-1], channels[-1], (5, 1), 1, padding=(2, 0))))
        self.out = weight_norm(nn.Conv2d(channels[-1], 1, (3, 1), 1, padding=(1, 0)))

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b, s = y.shape
        pad = (-s) % self.period
        x = F.pad(y, (0, pad), mode="reflect" if pad < s else "constant")
        x = x.view(b, 1, (s + pad) // self.period, self.period)  # (B, 1, S/P, P)
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        x = self.out(x)
        feats.append(x)
        return x.flatten(1), feats


class STFTDiscriminator(nn.Module):
    def __init__(self, n_fft: int, hop: int, channels: int):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        # UnivNet's first layer keeps full frequency resolution; here it already strides by 2 (4x cheaper on CPU).
        self.convs = nn.ModuleList([
            *[weight_norm(nn.Conv2d(1 if i == 0 else channels, channels, (3, 9), (1, 2), padding=(1, 4)))
              for i in range(4)],
            weight_norm(nn.Conv2d(channels, channels, (3, 3), padding=(1, 1))),
        ])
        self.out = weight_norm(nn.Conv2d(channels, 1, (3, 3), padding=(1, 1)))

    def forward(self, y: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        mag = torch.stft(y, self.n_fft, self.hop, window=self.window, return_complex=True).abs()  # (B, N, F)
        x = mag.transpose(1, 2).unsqueeze(1)  # (B, 1, F, N): strides run along frequency
        feats = []
        for conv in self.convs:
            x = F.leaky_relu(conv(x), 0.1)
            feats.append(x)
        x = self.out(x)
        feats.append(x)
        return x.flatten(1), feats


class CodecDiscriminator(nn.Module):
    """All sub-discriminators: y (B, S) -> (logits per sub-discriminator, features per sub-discriminator)."""

    def __init__(self, cfg: DiscriminatorConfig = DiscriminatorConfig()):
        super().__init__()
        self.discs = nn.ModuleList(
            [PeriodDiscriminator(p, cfg.period_channels) for p in cfg.periods]
            + [STFTDiscriminator(n, h, cfg.stft_channels) for n, h in cfg.resolutions])

    def forward(self, y: torch.Tensor) -> tuple[list[torch.Tensor], list[list[torch.Tensor]]]:
        outs = [d(y) for d in self.discs]
        return [o[0] for o in outs], [o[1] for o in outs]
