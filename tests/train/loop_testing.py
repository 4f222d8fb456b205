"""Helpers for the shared-loop tests: a micro Gepard model and fixed batches of random codes.

Also imported by ``ddp_worker.py`` (run under torchrun), so everything here is deterministic given its seeds.
"""

from __future__ import annotations

import random

import numpy as np
import torch

from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardBatch, collate
from duet.nn.backbone import BackboneConfig
from duet.train.loop import LoopConfig
from duet.train.objectives.gepard import GepardPretrain

SOT, EOT, SOS, PAD = 60, 61, 62, 63  # test-only ids inside the micro vocabulary


def micro_config(**overrides) -> GepardConfig:
    """Width 64 = 32 channels x m 2; 2 layers; 64 text ids (seconds per test on CPU)."""
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=64, rope_theta=10_000.0, max_positions=512)
    return GepardConfig(name="micro", backbone=backbone, audio_embed_dim=2, **overrides)


def rows(seed: int, n: int, frames: int, config: GepardConfig | None = None) -> list[tuple[list[int], torch.Tensor]]:
    """n utterances: texts of 2-6 random ids, ``frames`` frames each of uniform random channel codes (C, T)."""
    config = config or micro_config()
    g = torch.Generator().manual_seed(seed)
    levels = torch.tensor(config.channel_levels)[:, None]
    out = []
    for _ in range(n):
        length = int(torch.randint(2, 7, (1,), generator=g))
        text = torch.randint(0, SOT, (length,), generator=g).tolist()
        codes = (torch.rand((len(config.channel_levels), frames), generator=g) * levels).long()
        out.append(([SOT, *text, EOT, SOS], codes))
    return out


def make_batch(items) -> GepardBatch:
    return collate(items, pad_id=PAD)


def batches(seed: int, count: int, rows_per_batch: int = 2, frames: int = 8) -> list[GepardBatch]:
    return [make_batch(rows(seed * 1000 + i, rows_per_batch, frames)) for i in range(count)]


class NoisyPretrain(GepardPretrain):
    """The Gepard objective plus a logged-only term drawn from numpy, Python's ``random`` and its own generator.

    The term has no gradient, so training is unchanged, but the logged loss now depends on all three RNG streams:
    a resume that failed to restore any one of them shows up as a different logged loss.
    """

    def __init__(self):
        super().__init__()
        self.gen = torch.Generator()

    def generators(self):
        return {"noise": self.gen}

    def loss(self, model, batch):
        loss, metrics = super().loss(model, batch)
        noise = float(np.random.rand()) + random.random() + float(torch.rand((), generator=self.gen))
        return loss + 1e-3 * noise, {**metrics, "noise": noise}


def sgd_like_loop(steps: int, **overrides) -> LoopConfig:
    """AdamW with eps = 1, so that an update is ~ lr * gradient (gradients here are << 1 after clipping).

    With the usual eps = 1e-8 the first Adam step is ~ lr * sign(g): a gradient entry that is 1e-9 in one run and
    -1e-9 in another (float summation order) moves a weight by 2 lr. Equal-gradient tests need the update to be
    continuous in the gradient, so their parameters agree to rounding when the gradients do.
    """
    base = dict(max_steps=steps, lr=0.1, warmup_steps=1, eps=1.0, log_every=1, val_every=0, diag_every=0,
                checkpoint_every=0, checkpoint_minutes=1e9)
    return LoopConfig(**{**base, **overrides})


def ddp_case(steps: int):
    """(config, per-rank batches [A, B], the concatenated batch [A + B], loop config) for the DDP test.

    A and B hold the same number of frames per row, so each carries as many scored labels as the other, and
    DDP's mean of per-rank mean losses equals the mean loss of the concatenated batch.
    """
    a, b = rows(11, 2, 8), rows(12, 2, 8)
    return micro_config(), [make_batch(a), make_batch(b)], [make_batch(a + b)], sgd_like_loop(steps)
