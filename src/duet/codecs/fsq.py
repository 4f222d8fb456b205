"""Group finite scalar quantisation, bit-exact with NVIDIA NeMo's NanoCodec quantiser.

Mentzer et al., "Finite Scalar Quantization: VQ-VAE Made Simple" (arXiv:2309.15505); the grouping follows
NeMo's ``GroupFiniteScalarQuantizer`` (HiFi-Codec style groups). Formulas in DESIGN.md §A.

Shape legend: B batch, T frames, G groups (8), D dimensions per group (4), C = G * D channels (32).

Three views of one frame, all exact inverses of each other:
- ``dequantised`` (B, C, T) float: per-channel values in [-1, 1), what the codec decoder reads;
- ``channel codes`` (B, C, T) int64: per-channel digits 0 .. L_k - 1, what Gepard's 32 heads predict;
- ``packed`` (B, G, T) int64: one mixed-radix index per group, 0 .. prod(L) - 1 (2016), what NeMo's
  ``AudioCodecModel.encode`` returns as tokens; first dimension least significant, bases [1, 8, 56, 336].

Group g owns latent channels [D*g, D*g + D). Arithmetic is float32 in NeMo's order of operations, which is what
makes the indices bit-exact (``tests/codecs/test_fsq.py`` compares with NeMo where it is importable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class FSQConfig:
    num_groups: int = 8
    levels: tuple[int, ...] = (8, 7, 6, 6)  # per dimension of a group (NanoCodec 22 kHz, 2016 codes per group)
    eps: float = 1e-3  # NeMo scales the bound down by (1 - eps) so that rounding never reaches L

    @property
    def dims_per_group(self) -> int:
        return len(self.levels)

    @property
    def num_channels(self) -> int:
        return self.num_groups * self.dims_per_group

    @property
    def codebook_size(self) -> int:
        """Codes per group (the packed alphabet)."""
        size = 1
        for level in self.levels:
            size *= level
        return size

    @property
    def channel_levels(self) -> tuple[int, ...]:
        """Alphabet of each of the C channels: ``levels`` repeated per group ([8,7,6,6] x 8)."""
        return self.levels * self.num_groups


def round_ste(x: torch.Tensor) -> torch.Tensor:
    """Round to the nearest integer, gradient of the identity (straight-through estimator)."""
    return x + (torch.round(x) - x).detach()


class GroupFSQ(nn.Module):
    """Quantise a (B, C, T) latent group-wise; no learnable parameters, only constant buffers."""

    def __init__(self, config: FSQConfig = FSQConfig()):
        super().__init__()
        self.config = config
        levels = torch.tensor(config.levels, dtype=torch.int32)
        # Mixed-radix bases: first dimension least significant -> [1, 8, 56, 336] for [8, 7, 6, 6].
        bases = torch.cumprod(torch.tensor((1,) + config.levels[:-1]), dim=0, dtype=torch.int32)
        # (1, D, 1) so they broadcast over (B, D, T), exactly as NeMo shapes them.
        self.register_buffer("levels", levels.view(1, -1, 1), persistent=False)
        self.register_buffer("bases", bases.view(1, -1, 1), persistent=False)

    # ---- per-group maths (inputs (B, D, T)) -------------------------------------------------------------------
    def compress(self, x: torch.Tensor) -> torch.Tensor:
        """Bounded tanh: (B, D, T) -> values in (-L/2, L/2) shifted so that even L rounds to L levels."""
        output_scale = (self.levels - 1) / 2 * (1 - self.config.eps)
        output_offset = torch.where(self.levels % 2 == 0, 0.5, 0.0)
        input_shift = (output_offset / output_scale).tan()
        return output_scale * (x + input_shift).tanh() - output_offset

    def _group_codes(self, x: torch.Tensor) -> torch.Tensor:
        """(B, D, T) latent -> (B, D, T) dequantised codes in [-1, 1], with straight-through gradients."""
        return round_ste(self.compress(x)) / (self.levels // 2)

    def _codes_to_nonneg(self, codes: torch.Tensor) -> torch.Tensor:
        half = self.levels // 2
        return half * codes + half

    def _nonneg_to_codes(self, nonneg: torch.Tensor) -> torch.Tensor:
        half = self.levels // 2
        return (nonneg - half) / half

    # ---- public API over all groups (B, C, T) -------------------------------------------------------------------
    def forward(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """latent (B, C, T) -> (dequantised (B, C, T) float, packed indices (B, G, T) int64)."""
        self._check_channels(latent)
        dequantised, packed = [], []
        for group in latent.chunk(self.config.num_groups, dim=1):  # each (B, D, T)
            codes = self._group_codes(group)
            dequantised.append(codes)
            nonneg = self._codes_to_nonneg(codes)
            packed.append(torch.sum(nonneg * self.bases, dim=1).to(torch.int32))  # (B, T)
        return torch.cat(dequantised, dim=1), torch.stack(packed, dim=1).long()

    def encode(self, latent: torch.Tensor) -> torch.Tensor:
        """latent (B, C, T) -> packed indices (B, G, T)."""
        return self.forward(latent)[1]

    def decode(self, packed: torch.Tensor) -> torch.Tensor:
        """packed indices (B, G, T) -> dequantised (B, C, T)."""
        return self.channels_to_dequantised(self.unfold(packed))

    # ---- the three views ----------------------------------------------------------------------------------------
    def unfold(self, packed: torch.Tensor) -> torch.Tensor:
        """packed (B, G, T) -> channel codes (B, C, T); channel D*g + d is digit d of group g."""
        self._check_packed(packed)
        b, g, t = packed.shape
        digits = (packed.unsqueeze(2) // self.bases.unsqueeze(1)) % self.levels.unsqueeze(1)  # (B, G, D, T)
        return digits.reshape(b, g * self.config.dims_per_group, t).long()  # (B, C, T)

    def fold(self, channels: torch.Tensor) -> torch.Tensor:
        """channel codes (B, C, T) -> packed (B, G, T); the inverse of :meth:`unfold`."""
        self._check_channels(channels)
        b, c, t = channels.shape
        digits = channels.reshape(b, self.config.num_groups, self.config.dims_per_group, t)  # (B, G, D, T)
        return (digits * self.bases.unsqueeze(1)).sum(dim=2).long()  # (B, G, T)

    def channels_to_dequantised(self, channels: torch.Tensor) -> torch.Tensor:
        """channel codes (B, C, T) int -> dequantised (B, C, T) float, group by group as NeMo decodes."""
        self._check_channels(channels)
        groups = channels.chunk(self.config.num_groups, dim=1)
        return torch.cat([self._nonneg_to_codes(g) for g in groups], dim=1).float()

    def dequantised_to_channels(self, dequantised: torch.Tensor) -> torch.Tensor:
        """dequantised (B, C, T) -> channel codes (B, C, T) int64."""
        self._check_channels(dequantised)
        groups = dequantised.chunk(self.config.num_groups, dim=1)
        return torch.cat([self._codes_to_nonneg(g) for g in groups], dim=1).round().long()

    # ---- checks -------------------------------------------------------------------------------------------------
    def _check_channels(self, x: torch.Tensor) -> None:
        if x.dim() != 3 or x.shape[1] != self.config.num_channels:
            raise ValueError(f"expected (B, {self.config.num_channels}, T), got {tuple(x.shape)}")

    def _check_packed(self, packed: torch.Tensor) -> None:
        if packed.dim() != 3 or packed.shape[1] != self.config.num_groups:
            raise ValueError(f"expected packed indices (B, {self.config.num_groups}, T), got {tuple(packed.shape)}")
        if packed.numel() and (packed.min() < 0 or packed.max() >= self.config.codebook_size):
            raise ValueError(f"packed indices must lie in [0, {self.config.codebook_size}), "
                             f"got [{int(packed.min())}, {int(packed.max())}]")
