"""Shipped-format checkpoints with random weights, for tests of loading, speaking and serving (no training)."""

from __future__ import annotations

from pathlib import Path

import torch

from duet.codecs.registry import build, save_pretrained
from duet.gepard.checkpoint import save_gepard
from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardModel
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
