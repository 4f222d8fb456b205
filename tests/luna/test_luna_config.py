"""Every Luna preset builds; luna-0.6b has Qwen3-0.6B's exact shape."""

from __future__ import annotations

import pytest
import torch

from duet.errors import DuetError
from duet.luna.config import PRESETS, LunaConfig, luna_preset, with_vocab
from duet.luna.model import LunaInputs, LunaModel
from duet.text.tokens import SERVICE_TOKENS


def test_luna_0_6b_builds_on_meta_with_qwen3_0_6b_shape():
    cfg = luna_preset("luna-0.6b")
    with torch.device("meta"):
        model = LunaModel(cfg)
    qc = model.model.config
    assert (qc.hidden_size, qc.num_hidden_layers, qc.num_attention_heads, qc.num_key_value_heads) == (1024, 28, 16, 8)
    assert (qc.head_dim, qc.intermediate_size, qc.vocab_size) == (128, 3072, 151_936)
    assert qc.rope_parameters["rope_theta"] == 1_000_000.0 and qc.tie_word_embeddings and not qc.is_causal
    # Qwen3-0.6B without its tied LM head, by hand: per layer q 1024x2048, k and v 1024x1024, o 2048x1024,
    # q/k norms 2x128, MLP 3x1024x3072, two RMSNorms 2x1024; plus embedding and final norm.
    layer = 1024 * 2048 * 2 + 1024 * 1024 * 2 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    expected = 28 * layer + 151_936 * 1024 + 1024
    assert expected == 596_049_920
    assert sum(p.numel() for p in model.model.parameters()) == expected == cfg.backbone.parameter_count()["total"]
    audio = 8 * 2049 * 1024 + (1024 * 8 * 2048 + 8 * 2048)
    assert sum(p.numel() for p in model.parameters()) == expected + audio


def test_luna_tiny_builds_and_runs():
    cfg = luna_preset("luna-tiny")
    assert 256 <= cfg.backbone.width <= 384 and 6 <= cfg.backbone.num_layers <= 8
    assert 2048 <= cfg.backbone.vocab_size <= 4096
    assert cfg.backbone.vocab_size == 2048 + len(SERVICE_TOKENS)
    torch.manual_seed(0)
    model = LunaModel(cfg).eval()
    inputs = LunaInputs(
        text_ids=torch.randint(0, cfg.backbone.vocab_size, (1, 6)),
        text_lengths=torch.tensor([6]),
        target=torch.full((1, 5, 8), cfg.mask_id),
        target_lengths=torch.tensor([5]),
    )
    with torch.no_grad():
        assert model(inputs).shape == (1, 5, 8, 2048)


def test_every_preset_is_listed_and_unknown_is_refused():
    assert set(PRESETS) == {"luna-0.6b", "luna-tiny", "luna-tiny-fsq", "luna-tiny-rvq4"}
    with pytest.raises(DuetError, match="unknown Luna preset"):
        luna_preset("luna-7b")


def test_config_round_trips_through_dict_and_vocab_override():
    cfg = luna_preset("luna-tiny")
    assert LunaConfig.from_dict(cfg.to_dict()) == cfg
    assert with_vocab(cfg, 1500).backbone.vocab_size == 1500
    assert cfg.mask_id == cfg.codebook_size
