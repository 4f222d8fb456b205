"""Shipped-format checkpoints with random weights, for tests of loading, speaking and serving (no training)."""

from __future__ import annotations

from pathlib import Path

import torch

from duet.codecs.registry import build, save_pretrained
from duet.gepard.checkpoint import save_gepard
from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardModel
from duet.luna.bundle import LunaBundle
from duet.luna.config import LunaConfig
from duet.luna.duration import DurationConfig
from duet.luna.shipped import save_luna
from duet.nn.backbone import BackboneConfig
from duet.text.bpe import BPEConfig, save_bpe, train_bpe
from duet.train.codec_config import preset

TEXTS = ["Hello there, how are you?", "The quick brown fox jumps over the lazy dog.", "Good morning."]


def write_tiny_gepard(root: Path, seed: int = 0) -> Path:
    """A 2-layer Gepard (BPE tokenizer trained on TEXTS) whose config names a random fsq-tiny codec in root/codec.
    Returns the model directory, root/gepard-test."""
    torch.manual_seed(seed)
    save_pretrained(build("duet-fsq", preset("fsq-tiny").model).eval(), root / "codec")
    tokenizer = save_bpe(train_bpe(TEXTS * 3, BPEConfig(vocab_size=300)), root / "tokenizer.json")
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=512, rope_theta=10_000.0, max_positions=512)
    model = GepardModel(GepardConfig(name="test", backbone=backbone, audio_embed_dim=2)).eval()
    return save_gepard(model, tokenizer, root / "gepard-test", codec={"name": str(root / "codec")})


def write_tiny_luna(root: Path, seed: int = 0, num_bins: int = 16) -> Path:
    """A 2-layer Luna (4 codebooks x 64, the rvq-tiny codec's grid) with a 2-layer duration predictor, whose config
    names a random rvq-tiny codec in root/codec. Returns the model directory, root/luna-test.

    With random weights the predictor's expected duration is about (num_bins - 1) / 2 frames per token."""
    torch.manual_seed(seed)
    save_pretrained(build("duet-rvq", preset("rvq-tiny").model).eval(), root / "codec")
    tokenizer = save_bpe(train_bpe(TEXTS * 3, BPEConfig(vocab_size=300)), root / "tokenizer.json")

    def backbone(width: int) -> BackboneConfig:
        return BackboneConfig(num_layers=2, width=width, num_heads=4, num_kv_heads=2, head_dim=8,
                              mlp_width=2 * width, vocab_size=512, rope_theta=10_000.0, max_positions=512)

    bundle = LunaBundle(LunaConfig(backbone=backbone(32), num_codebooks=4, codebook_size=64),
                        DurationConfig(backbone=backbone(16), num_bins=num_bins)).eval()
    return save_luna(bundle, tokenizer, root / "luna-test", codec={"name": str(root / "codec")})
