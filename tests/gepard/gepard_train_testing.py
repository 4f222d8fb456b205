"""A fake corpus for the Gepard recipe tests (``tests/corpus_testing.py``), encoded by a fake FSQ codec with the
GroupFSQ shape (8 groups of 2016 codes, Gepard §2.3) at 40 frames per second."""

from __future__ import annotations

from pathlib import Path

from corpus_testing import MISSING, UTTERANCES, HashCodec
from corpus_testing import write_corpus as write_any_corpus
from duet.gepard.config import GepardConfig
from duet.nn.backbone import BackboneConfig

__all__ = ["MISSING", "UTTERANCES", "small_config", "write_corpus"]


def write_corpus(root: Path) -> tuple[Path, Path]:
    """-> (manifest path, shards dir). The ``MISSING`` utterance is in the manifest but has no codes."""
    return write_any_corpus(root, HashCodec((2016,) * 8, samples_per_frame=200), "hash-fsq")


def small_config(vocab_size: int = 512) -> GepardConfig:
    """Width 64 (32 channels x m 2), 2 layers; a vocabulary large enough for a BPE trained on a few sentences."""
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=vocab_size, rope_theta=10_000.0, max_positions=512)
    return GepardConfig(name="small", backbone=backbone, audio_embed_dim=2)
