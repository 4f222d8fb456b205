"""A fake corpus with Luna's code shape (8 RVQ codebooks x 2048 at 25 Hz; ``tests/corpus_testing.py``) and a micro
Luna recipe that trains in well under a second per step."""

from __future__ import annotations

from pathlib import Path

from corpus_testing import HashCodec, write_corpus
from duet.luna.config import LunaConfig
from duet.luna.duration import DurationConfig
from duet.nn.backbone import BackboneConfig

Q, K = 8, 2048


def write_rvq_corpus(root: Path) -> tuple[Path, Path]:
    """-> (manifest path, shards dir), codes (8, T) in 0..2047 at 25 frames per second."""
    return write_corpus(root, HashCodec((K,) * Q, samples_per_frame=320), "hash-rvq")


def micro_backbone(vocab_size: int = 512, width: int = 32) -> BackboneConfig:
    return BackboneConfig(num_layers=2, width=width, num_heads=4, num_kv_heads=2, head_dim=8, mlp_width=2 * width,
                          vocab_size=vocab_size, rope_theta=10_000.0, max_positions=512)


def micro_configs(vocab_size: int = 512, q: int = Q, k: int = K) -> tuple[LunaConfig, DurationConfig]:
    """A 2-layer acoustic model over q x k codes and a 2-layer duration predictor with 16 bins."""
    return (LunaConfig(backbone=micro_backbone(vocab_size), num_codebooks=q, codebook_size=k),
            DurationConfig(backbone=micro_backbone(vocab_size, width=16), num_bins=16))
