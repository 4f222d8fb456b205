"""Luna-TTS model configuration and named presets.

Luna-TTS report §2.1-§2.4 (DESIGN.md §B): a Qwen3-0.6B backbone with bidirectional attention, one sequence position
per acoustic frame whose input is the sum of Q codebook embeddings, Q parallel heads over K codes each. The codec
grid is Q = 8 codebooks x K = 2048 entries at 25 Hz (Luna-Codec §2.2; duet's RVQ codec has the same shape).

Presets (``luna_preset(name)``; a test builds each one):

``luna-0.6b``  Qwen3-0.6B's published shape: D 1024, 28 layers, 16 query / 8 key-value heads of 128, MLP 3072,
               vocabulary 151,936 (duet's service tokens sit in its padded rows, see ``duet.text.qwen``), tied
               embeddings, RoPE theta 1e6. Backbone 596,049,920 parameters (155,582,464 of them the embedding);
               audio tables 8 x 2049 x 1024 and heads 1024 -> 8 x 2048 add 33.6M.
``luna-tiny``  a CPU-sized model for the shipped checkpoint, gepard-tiny's backbone shape: room for duet's small
               BPE (2048 bytes + merges, then the service tokens; the shipped model reads a phoneme BPE), D 256,
               6 layers, 4 query / 2 key-value heads of 64, MLP 768, RoPE theta 1e4 (sequences stay under ~1k
               positions; divergence from the 0.6b's 1e6, which is sized for 40k), heads tied to the code tables
               (``tie_heads``). About 5.3M backbone + 4.2M audio parameters with the full 8 x 2048 grid: a training
               step costs about half that of the first shipped luna-tiny's D 384 / 8 layers, whose fp16 export
               was 44 MB. When the trained BPE comes out smaller than requested, rebuild the config with
               ``with_vocab(cfg, len(tokenizer))``.
``luna-tiny-fsq``  luna-tiny's backbone on duet-fsq's channel grid (``fsq_levels``): 32 ordinal cells of 6-8 codes
               per frame at 21.5 Hz instead of 8 x 2048 RVQ codes at 25 Hz. A tiny model predicts a near-correct
               FSQ digit far more easily than a 2048-way residual code (DESIGN.md §F: 33% WER after 38 minutes of
               one core where the RVQ grid is at 75%); the audio tables shrink to 32 x 9 rows.
``luna-tiny-rvq4``  luna-tiny on the first 4 of a residual codec's 8 codebooks (the report's grid, cut to the
               codebooks a tiny model can learn): meant for a duet-rvq whose codebook 0 is semantically anchored
               (codec preset ``rvq-semantic``), whose 4-codebook round trip equals the 8.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from duet.config_io import from_dict, pick_preset, to_dict
from duet.errors import DuetError
from duet.nn.backbone import BackboneConfig
from duet.text.tokens import SERVICE_TOKENS


@dataclass(frozen=True)
class LunaConfig:
    backbone: BackboneConfig
    num_codebooks: int = 8  # Q
    codebook_size: int = 2048  # K; the mask token of every codebook is id K (one extra embedding row per table)
    head_bias: bool = True
    # Tie head q to codebook q's embedding table (its K code rows; the mask row has no logit), as language models
    # tie their output layer to the token embedding. Duet's option, not the report's: it drops Q x K x D head
    # weights (12.6M parameters, 25 MB in fp16 for luna-tiny) and makes a code's input and output vectors one.
    tie_heads: bool = False
    # Aligned text input (``duet.nn.aligned``; a divergence from the report, for small compute): every prompt and
    # target frame also receives the embedding of the text token it belongs to and of ``aligned_window`` tokens
    # either side, laid out by per-token durations (corpus timing in training, the duration predictor at
    # inference). None: off, the report's model.
    aligned_window: int | None = None
    # The FSQ channel grid (``duet.luna.grid``; a divergence from the report, for small compute): each cell is one
    # digit of an FSQ codec's group, so the grid has Q = groups x len(fsq_levels) ordinal cells per frame and cell q
    # takes fsq_levels[q % len(fsq_levels)] codes (duet-fsq: [8, 7, 6, 6] x 8 = 32 cells of 6-8 codes). K is the
    # largest level; codes a cell cannot take get no probability (``LunaModel.code_logits``). None: the report's
    # grid of Q codebooks of K codes each (an RVQ codec).
    fsq_levels: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.num_codebooks <= 0 or self.codebook_size <= 1:
            raise DuetError(f"need Q >= 1 codebooks of K >= 2 codes, got Q={self.num_codebooks} K={self.codebook_size}")
        if self.aligned_window is not None and self.aligned_window < 0:
            raise DuetError(f"aligned_window must be >= 0 (or None: off), got {self.aligned_window}")
        if self.fsq_levels is not None:
            levels = self.fsq_levels
            if not levels or min(levels) < 2 or self.num_codebooks % len(levels):
                raise DuetError(f"fsq_levels {list(levels)} must be levels >= 2 that divide the "
                                f"{self.num_codebooks} cells of a frame into whole groups")
            if self.codebook_size != max(levels):
                raise DuetError(f"an FSQ grid's K is its largest level {max(levels)}, got {self.codebook_size}")

    @property
    def is_aligned(self) -> bool:
        return self.aligned_window is not None

    @property
    def cell_levels(self) -> tuple[int, ...]:
        """The codes each of the Q cells of a frame can take: K each, or the FSQ grid's levels group by group."""
        if self.fsq_levels is None:
            return (self.codebook_size,) * self.num_codebooks
        return self.fsq_levels * (self.num_codebooks // len(self.fsq_levels))

    @property
    def codec_codebook_sizes(self) -> tuple[int, ...]:
        """The ``codebook_sizes`` of the codec whose codes this grid reads: Q codebooks of K (RVQ), or one packed
        alphabet of prod(fsq_levels) codes per FSQ group."""
        if self.fsq_levels is None:
            return self.cell_levels
        return (math.prod(self.fsq_levels),) * (self.num_codebooks // len(self.fsq_levels))

    @property
    def mask_id(self) -> int:
        """The absorbing-state mask token in the grid: one past the last code (Luna §2.3 "mask token m")."""
        return self.codebook_size

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "LunaConfig":
        return from_dict(cls, d)


QWEN3_0_6B = BackboneConfig(
    num_layers=28,
    width=1024,
    num_heads=16,
    num_kv_heads=8,
    head_dim=128,
    mlp_width=3072,
    vocab_size=151_936,
    rope_theta=1_000_000.0,
    max_positions=40_960,
    rms_norm_eps=1e-6,
)

TINY_BPE_SIZE = 2048  # bytes + merges asked of duet.text.bpe for luna-tiny; service tokens come on top

TINY = BackboneConfig(
    num_layers=6,
    width=256,
    num_heads=4,
    num_kv_heads=2,
    head_dim=64,
    mlp_width=768,
    vocab_size=TINY_BPE_SIZE + len(SERVICE_TOKENS),
    rope_theta=10_000.0,
    max_positions=4096,
)

DUET_FSQ_LEVELS = (8, 7, 6, 6)  # duet-fsq's and NanoCodec's levels per group (8 groups: 32 channels)

PRESETS: dict[str, Callable[[], LunaConfig]] = {
    "luna-0.6b": lambda: LunaConfig(backbone=QWEN3_0_6B),
    "luna-tiny": lambda: LunaConfig(backbone=TINY, tie_heads=True),
    "luna-tiny-fsq": lambda: LunaConfig(backbone=TINY, num_codebooks=32, codebook_size=8, tie_heads=True,
                                        fsq_levels=DUET_FSQ_LEVELS),
    "luna-tiny-rvq4": lambda: LunaConfig(backbone=TINY, num_codebooks=4, tie_heads=True),
}


def luna_preset(name: str) -> LunaConfig:
    return pick_preset(PRESETS, name, "Luna")


def with_vocab(cfg: LunaConfig, vocab_size: int) -> LunaConfig:
    """The same model with a text vocabulary of ``vocab_size`` rows (e.g. ``len(tokenizer)`` of a trained BPE)."""
    return replace(cfg, backbone=replace(cfg.backbone, vocab_size=vocab_size))
