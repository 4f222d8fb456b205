"""Shipped-format checkpoints with random weights, for tests of loading, speaking and serving (no training)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from duet.codecs.registry import build, save_pretrained
from duet.gepard.checkpoint import save_gepard
from duet.gepard.config import GepardConfig, with_aligned_input, with_voice_prefix
from duet.gepard.model import GepardModel
from duet.luna.bundle import LunaBundle, RealtimeBundle
from duet.luna.config import LunaConfig
from duet.luna.duration import DurationConfig
from duet.luna.realtime import RealtimeConfig
from duet.luna.shipped import save_luna, save_luna_realtime
from duet.nn.backbone import BackboneConfig
from duet.text.bpe import BPEConfig, save_bpe, train_bpe
from duet.train.codec_config import preset

TEXTS = ["Hello there, how are you?", "The quick brown fox jumps over the lazy dog.", "Good morning."]


def write_tiny_gepard(root: Path, seed: int = 0, text_dropout_prob: float = 0.0, voice: bool = False,
                      aligned: bool = False) -> Path:
    """A 2-layer Gepard (BPE tokenizer trained on TEXTS) whose config names a random fsq-tiny codec in root/codec;
    ``voice`` adds the voice compressor, ``aligned`` aligned text input (a 1-layer duration predictor). Returns the
    model directory, root/gepard-test."""
    torch.manual_seed(seed)
    save_pretrained(build("duet-fsq", preset("fsq-tiny").model).eval(), root / "codec")
    tokenizer = save_bpe(train_bpe(TEXTS * 3, BPEConfig(vocab_size=300)), root / "tokenizer.json")
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=512, rope_theta=10_000.0, max_positions=512)
    config = GepardConfig(name="test", backbone=backbone, audio_embed_dim=2, text_dropout_prob=text_dropout_prob)
    if aligned:
        config = with_aligned_input(config, window=1, duration_layers=1)
    model = GepardModel(with_voice_prefix(config, max_reference_frames=256) if voice else config).eval()
    return save_gepard(model, tokenizer, root / "gepard-test", codec={"name": str(root / "codec")})


def write_tiny_luna(root: Path, seed: int = 0, num_bins: int = 16, fsq: bool = False, aligned: bool = False) -> Path:
    """A 2-layer Luna (4 codebooks x 64, the rvq-tiny codec's grid; ``fsq``: the FSQ channel grid of a random fsq-tiny
    codec, 32 digits) with a 2-layer duration predictor, whose config names that random codec in root/codec;
    ``aligned`` adds aligned text input (window 1). Returns the model directory, root/luna-test.

    With random weights the predictor's expected duration is about (num_bins - 1) / 2 frames per token."""
    torch.manual_seed(seed)
    tokenizer = _codec_and_tokenizer(root, fsq)
    bundle = LunaBundle(*_luna_tiny_configs(num_bins, fsq, aligned)).eval()
    return save_luna(bundle, tokenizer, root / "luna-test", codec={"name": str(root / "codec")})


def write_tiny_luna_realtime(root: Path, seed: int = 0, block_size: int = 4, end_bias: float | None = None,
                             fsq: bool = False, aligned: bool = False) -> Path:
    """``write_tiny_luna``'s shapes as a Luna Realtime model (blocks of ``block_size`` frames) in root/realtime-test.
    ``end_bias`` (if given) sets the end head's bias: -20 never ends (every piece runs to its bound), +20 ends at
    once. Its config names a random rvq-tiny codec (``fsq``: fsq-tiny) in root/codec."""
    torch.manual_seed(seed)
    tokenizer = _codec_and_tokenizer(root, fsq)
    luna, duration = _luna_tiny_configs(16, fsq, aligned)
    bundle = RealtimeBundle(RealtimeConfig(luna=luna, block_size=block_size), duration).eval()
    if end_bias is not None:
        with torch.no_grad():
            bundle.acoustic.end_head.bias.fill_(end_bias)
    return save_luna_realtime(bundle, tokenizer, root / "realtime-test", codec={"name": str(root / "codec")})


def write_tiny_rvq_codec(root: Path) -> Path:
    """A random rvq-tiny codec (4 codebooks x 64, 25 Hz, causal, streams per frame) in root/codec."""
    save_pretrained(build("duet-rvq", preset("rvq-tiny").model).eval(), root / "codec")
    return root / "codec"


def _codec_and_tokenizer(root: Path, fsq: bool) -> Path:
    if fsq:
        save_pretrained(build("duet-fsq", preset("fsq-tiny").model).eval(), root / "codec")
    else:
        write_tiny_rvq_codec(root)
    return save_bpe(train_bpe(TEXTS * 3, BPEConfig(vocab_size=300)), root / "tokenizer.json")


def _luna_tiny_configs(num_bins: int, fsq: bool = False, aligned: bool = False) -> tuple[LunaConfig, DurationConfig]:
    def backbone(width: int) -> BackboneConfig:
        return BackboneConfig(num_layers=2, width=width, num_heads=4, num_kv_heads=2, head_dim=8,
                              mlp_width=2 * width, vocab_size=512, rope_theta=10_000.0, max_positions=512)

    grid = dict(num_codebooks=32, codebook_size=8, fsq_levels=(8, 7, 6, 6)) if fsq else dict(num_codebooks=4,
                                                                                             codebook_size=64)
    return (LunaConfig(backbone=backbone(32), aligned_window=1 if aligned else None, **grid),
            DurationConfig(backbone=backbone(16), num_bins=num_bins))


def never_stops(speaker):
    """A random stop head may fire at once: with it off, a Gepard piece runs to its bound, past its layout."""
    runtime = speaker.runtime
    runtime.config = replace(runtime.config, params=replace(runtime.config.params, stop_threshold=0.999999))
    return speaker
