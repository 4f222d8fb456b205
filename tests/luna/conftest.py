"""Shared fixtures for the Luna tests: tiny configs that build in milliseconds."""

from __future__ import annotations

import pytest
import torch

from duet.luna.config import LunaConfig
from duet.luna.model import LunaInputs
from duet.nn.backbone import BackboneConfig


def tiny_backbone(vocab: int = 40, width: int = 32, layers: int = 2, attn: str = "sdpa") -> BackboneConfig:
    return BackboneConfig(
        num_layers=layers,
        width=width,
        num_heads=4,
        num_kv_heads=2,
        head_dim=8,
        mlp_width=2 * width,
        vocab_size=vocab,
        rope_theta=10_000.0,
        max_positions=256,
        attn_implementation=attn,
    )





@pytest.fixture
def make_backbone():
    return tiny_backbone


@pytest.fixture
def make_config():
    def make(q: int = 2, k: int = 16, **backbone) -> LunaConfig:
        return LunaConfig(backbone=tiny_backbone(**backbone), num_codebooks=q, codebook_size=k)

    return make


@pytest.fixture
def random_inputs():
    """A batch with ragged text, prompt and target lengths (padding filled with junk on purpose)."""

    def make(cfg: LunaConfig, text=(5, 3), prompt=(3, 0), target=(7, 4), seed: int = 0) -> LunaInputs:
        g = torch.Generator().manual_seed(seed)
        B, S, P, T = len(text), max(text), max(prompt), max(target)
        Q, K, V = cfg.num_codebooks, cfg.codebook_size, cfg.backbone.vocab_size
        return LunaInputs(
            text_ids=torch.randint(0, V, (B, S), generator=g),
            text_lengths=torch.tensor(text),
            target=torch.randint(0, K + 1, (B, T, Q), generator=g),
            target_lengths=torch.tensor(target),
            prompt=torch.randint(0, K, (B, P, Q), generator=g),
            prompt_lengths=torch.tensor(prompt),
        )

    return make
