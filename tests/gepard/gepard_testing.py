"""A micro Gepard config for tests (seconds on CPU) and a helper to make random utterances."""

from __future__ import annotations

import torch

from duet.gepard.config import GepardConfig
from duet.nn.backbone import BackboneConfig

SOT, EOT, SOS = 61, 62, 63  # test-only ids inside the micro vocabulary (real ids come from duet.text.tokens)


def micro_config(**overrides) -> GepardConfig:
    """Width 64 = 32 channels x m 2; 2 layers; 64 text ids."""
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=64, rope_theta=10_000.0, max_positions=512)
    return GepardConfig(name="micro", backbone=backbone, audio_embed_dim=2, **overrides)


def random_codes(config: GepardConfig, frames: int, generator: torch.Generator) -> torch.Tensor:
    """(C, T) channel codes, channel k uniform over 0 .. L_k - 1."""
    levels = torch.tensor(config.channel_levels)[:, None]
    return (torch.rand((len(config.channel_levels), frames), generator=generator) * levels).long()


def wrapped(text: list[int]) -> list[int]:
    return [SOT, *text, EOT, SOS]
