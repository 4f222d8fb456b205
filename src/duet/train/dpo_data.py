"""A stored pair set (``duet.train.gepard_pairs``) as the DPO stage's batches: which pairs train, with what weight.

Selection and weights (our reading of the report's "quality-normalized reward scaling", §1.4 item 3; its §5 is
past the end of our copy). Per pair the quality margin is m = q(chosen) - q(rejected), with an utterance's quality
q = 1 - min(WER, 1), + sim_weight x SIM when cloning (:func:`quality`; WER is capped at 1 so that a runaway's
insertions do not outweigh everything else, and a SIM that could not be computed counts 0, as far from the voice as
it gets):
- a pair with m < ``min_margin`` is left out: there the guided decoding did worse, and preferring it would teach
  the model that guidance's failures (default 0: ties stay, CFG is what is being distilled);
- a pair whose chosen side's WER is above the rejected side's by more than ``max_wer_loss`` is left out too
  (default 1: no such rule): when cloning, a guided side that gained SIM but lost words would otherwise teach the
  single pass to trade words for voice; 0 orders WER first, then SIM (as Luna's GRPO reward does);
- a kept pair weighs w = (m + ``margin_floor``) / mean over kept pairs of (m + ``margin_floor``): proportional to
  how much better CFG was, never zero for a tie, and 1 on average, so the loss keeps DPO's scale whatever the WER
  range of the model.
The weights are fixed once for the set, not per batch, so a pair's weight does not depend on its batch-mates.

Held-out pairs: the last ``val_pairs`` in id-hash order (the order ``duet.data.utterances.hash_order`` uses),
scored at each validation (the loop's ``val_loss`` picks the best adapters).

Batches: a pair costs 2 rows of max(S + T_chosen, S + T_rejected) (+ K prefix) positions; a batch of P pairs keeps
2P x its longest row within ``batch_frames`` and P within ``max_pairs``. Per epoch a seeded shuffle, length buckets,
a shuffle of the batches (``duet.data.buckets``): a pure function of (seed, epoch), as the loop's resume needs.

Shape legend: P pairs, C channels (32), G packed groups (8), T frames, K prefix vectors, D model width.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, replace
from typing import Sequence

import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.data.buckets import LazyBatches, plan_batches
from duet.errors import DuetError
from duet.finish import STOP
from duet.gepard.model import collate
from duet.train.gepard_pairs import SIDES, PairStore
from duet.train.objectives.gepard_dpo import DPOBatch


@dataclass(frozen=True)
class DPODataConfig:
    batch_frames: int = 4000  # padded positions of a batch: 2P x its longest row
    max_pairs: int = 16  # P at most
    bucket_width: int = 16
    min_margin: float = 0.0  # pairs whose chosen side scored worse than this margin are left out
    margin_floor: float = 0.1  # weight of a tie, before normalisation
    max_wer_loss: float = 1.0  # pairs whose chosen side's WER is higher than this above the rejected's are left out
    sim_weight: float = 1.0  # SIM's part in an utterance's quality (cloning)
    val_pairs: int = 0  # held out for validation
    seed: int = 0

    def __post_init__(self) -> None:
        if self.batch_frames < 2 or self.max_pairs < 1 or self.bucket_width < 1:
            raise DuetError("batch_frames must be at least 2, max_pairs and bucket_width at least 1")
        if self.margin_floor <= 0 or self.val_pairs < 0 or self.max_wer_loss < 0:
            raise DuetError("margin_floor must be positive, val_pairs and max_wer_loss >= 0")


@dataclass(frozen=True)
class Pair:
    """One training pair: text ids (wrapped), channel codes (C, T) per side, and what the loss needs of each."""

    id: str
    text_ids: tuple[int, ...]
    codes: tuple[torch.Tensor, torch.Tensor]  # chosen, rejected: (C, T_w), (C, T_l)
    stopped: tuple[bool, bool]
    ref_logp: tuple[float, float]
    margin: float
    weight: float = 1.0
    prefix: torch.Tensor | None = None  # (K, D)
    durations: tuple[float, ...] | None = None  # frames per wrapped token (aligned text input), both sides

    @property
    def positions(self) -> int:
        k = 0 if self.prefix is None else self.prefix.shape[0]
        return k + len(self.text_ids) + max(c.shape[1] for c in self.codes)


def quality(side: dict, sim_weight: float) -> float:
    """One side of a stored pair (its ``wer`` and ``sim``, ``duet.metrics.clip.ClipScore``'s) -> its quality q."""
    sim = side.get("sim")
    return 1.0 - min(side["wer"], 1.0) + (sim_weight * sim if sim is not None else 0.0)


def _layout(durations: torch.Tensor | None) -> tuple[float, ...] | None:
    return None if durations is None else tuple(durations.tolist())


def read_pairs(store: PairStore, cfg: DPODataConfig) -> tuple[list[Pair], dict[str, int]]:
    """The store's pairs that train (selection and weights: module docstring) and the counts left out."""
    fsq = GroupFSQ(FSQConfig())
    kept: list[Pair] = []
    dropped = {"worse_chosen": 0, "worse_wer": 0}
    for r in store.records:
        chosen, rejected = r["chosen"], r["rejected"]
        margin = quality(chosen, cfg.sim_weight) - quality(rejected, cfg.sim_weight)
        if margin < cfg.min_margin:
            dropped["worse_chosen"] += 1
            continue
        if min(chosen["wer"], 1.0) - min(rejected["wer"], 1.0) > cfg.max_wer_loss:
            dropped["worse_wer"] += 1
            continue
        codes = tuple(fsq.unfold(store.tensor(r, s).long()[None])[0] for s in SIDES)  # (C, T) each
        kept.append(Pair(r["id"], tuple(r["text_ids"]), codes,  # type: ignore[arg-type]
                         tuple(r[s]["ended"] == STOP for s in SIDES),  # type: ignore[arg-type]
                         tuple(float(r[s]["ref_logp"]) for s in SIDES),  # type: ignore[arg-type]
                         margin, prefix=store.tensor(r, "prefix"), durations=_layout(store.tensor(r, "durations"))))
    if not kept:
        raise DuetError(f"no pair of {store.root} trains: the guided side scored worse in all "
                        f"{dropped['worse_chosen']} (min_margin {cfg.min_margin})")
    if len({p.durations is None for p in kept}) > 1:
        raise DuetError(f"{store.root} mixes pairs with and without a text layout (aligned text input)")
    if len({p.prefix is None for p in kept}) > 1:
        raise DuetError(f"{store.root} mixes cloned and plain prompts; a batch needs a prefix in every row or none")
    mean = sum(p.margin + cfg.margin_floor for p in kept) / len(kept)
    return [replace(p, weight=(p.margin + cfg.margin_floor) / mean) for p in kept], dropped


class DPOData:
    """Pairs as the loop's :class:`duet.train.loop.BatchSource` of :class:`DPOBatch`es (``train``: shuffled)."""

    def __init__(self, pairs: Sequence[Pair], pad_id: int, cfg: DPODataConfig, train: bool,
                 dropped: dict[str, int] | None = None):
        if not pairs:
            raise DuetError("no pairs to train on")
        self.pairs, self.pad_id, self.cfg, self.train = list(pairs), pad_id, cfg, train
        self.dropped = dropped or {}

    @classmethod
    def split(cls, store: PairStore, pad_id: int, cfg: DPODataConfig) -> tuple["DPOData", "DPOData | None"]:
        """(training pairs, held-out pairs or None)."""
        pairs, dropped = read_pairs(store, cfg)
        if cfg.val_pairs == 0:
            return cls(pairs, pad_id, cfg, True, dropped), None
        if cfg.val_pairs >= len(pairs):
            raise DuetError(f"{cfg.val_pairs} held-out pairs leave none of {len(pairs)} to train on")
        ordered = sorted(pairs, key=lambda p: hashlib.sha1(p.id.encode()).hexdigest())
        held = {p.id for p in ordered[-cfg.val_pairs:]}
        return (cls([p for p in pairs if p.id not in held], pad_id, cfg, True, dropped),
                cls([p for p in pairs if p.id in held], pad_id, cfg, False))

    def __len__(self) -> int:
        return len(self.pairs)

    def summary(self) -> str:
        frames = sum(c.shape[1] for p in self.pairs for c in p.codes)
        left = ", ".join(f"{k} {v}" for k, v in self.dropped.items() if v)
        return f"{len(self.pairs)} pairs, {frames} frames" + (f" (left out: {left})" if left else "")

    def plan(self, epoch: int) -> list[list[int]]:
        rng = random.Random(f"gepard-dpo-plan:{self.cfg.seed}:{epoch}") if self.train else None
        return plan_batches([p.positions for p in self.pairs], self.cfg.batch_frames // 2, self.cfg.max_pairs,
                            self.cfg.bucket_width, rng)

    def make_batch(self, indices: Sequence[int]) -> DPOBatch:
        pairs = [self.pairs[i] for i in indices]
        rows = [(p.text_ids, p.codes[side]) for side in (0, 1) for p in pairs]  # chosen rows, then rejected rows
        layout = None if pairs[0].durations is None else [p.durations for _ in (0, 1) for p in pairs]
        gepard = collate(rows, pad_id=self.pad_id, durations=layout)
        if pairs[0].prefix is not None:
            gepard = replace(gepard, prefix=torch.stack([p.prefix for _ in (0, 1) for p in pairs]))  # (2P, K, D)
        return DPOBatch(gepard=gepard,
                        stopped=torch.tensor([p.stopped[side] for side in (0, 1) for p in pairs]),
                        ref_logp=torch.tensor([p.ref_logp[side] for side in (0, 1) for p in pairs],
                                              dtype=torch.float64),
                        weights=torch.tensor([p.weight for p in pairs], dtype=torch.float64))

    def epoch(self, epoch: int) -> Sequence[DPOBatch]:
        return LazyBatches(self.plan(epoch), lambda _, indices: self.make_batch(indices))

    def batches(self) -> list[DPOBatch]:
        """Every batch, in length order (validation)."""
        return [self.make_batch(b) for b in self.plan(0)]
