"""Luna-TTS training data: (text ids, RVQ grid, per-token duration targets) from code shards + the manifest's
text, in length-bucketed batches.

One utterance::

    manifest text --normalise (English)--> tokenizer (ids + character offsets) --> [SOT, ids..., EOT]   (S = n + 2)
    shard codes (Q_c, T) --duet.luna.grid--> target grid (T, Q): a transpose of 8 x 2048 RVQ codes (Luna-Codec),
    or duet-fsq's 8 packed groups unfolded into 32 ordinal digits (the FSQ grid)
    characters of each token --spread_frames--> durations (S,): 0 for SOT and EOT, the rest add up to T
    or, with an alignment file (``duet data align``): the forced alignment's durations (S,), SOT and EOT included

Expressive rows (Luna-TTS §2.3): a manifest row with an ``emotion`` gets that emotion token in the instruction
context, after SOT (``[SOT, E, ids..., EOT]``, as ``duet.text.prompts.luna_prompt(..., emotion=)`` wraps a request):
its id goes in front of the row's text ids with weight 0 and duration target 0, like SOT's (:func:`with_instruction`),
so the spread, an alignment's targets and the row's length all count it. Inline event tags in the text
(``[laughter]``) are read by the tokenizer as one service id each, in their places. Rows without an emotion are
exactly as before (same ids, same targets).

Text is prepared exactly as for Gepard (``duet.data.utterances``: English normalisation for ``en*`` manifest
languages, others as written) and wrapped in SOT/EOT; no SOS, because nothing autoregressive follows (the target's
own embeddings mark where audio starts). Inference wraps the same way (``duet.text.prompts.luna_prompt``).

Duration targets. The report supervises the duration predictor with forced-alignment durations. With
``LunaDataConfig.alignments`` (a file from ``duet data align``, ``duet.data.align``: a monotonic alignment search
under a flat-start model of the corpus itself, made with the run's tokenizer) each utterance's targets are its
alignment: a frame count per token of [SOT, tokens..., EOT], SOT and EOT holding the leading and trailing silence.
Without one, or for an utterance the file lacks, an approximation stands in: the true frame count T spread over the
text tokens in proportion to their non-space characters (``token_weights``, then ``spread_frames``),
0 for SOT and EOT, rounded cumulatively so the targets add up to T exactly (pauses, stress and silence are smeared
over all tokens). Either way the predictor's total, the only thing decoding uses (T = sum of expected durations),
is supervised exactly. Which utterances and their targets are the data layer's rows (``duet.data.token_rows``), which
the forced aligner reads too.

Prompts are not cut here: batches hold whole utterances and the objective cuts each row's prompt off its own grid
(``diffusion.split_prompt``) with its seeded generator, so every epoch sees fresh splits.

Batches (``duet.data.buckets``): each utterance costs S + T positions; a batch pads to B x max(S_b + T_b), kept at
most ``batch_frames`` (and B at most ``max_batch_size``). The plan is a pure function of (seed, epoch), so the
training loop's data position is (epoch, batch) and resuming needs no loader state. Grids stay in memory as int16
(T, Q): 16 bytes per frame on the RVQ grid (about 14 MB for the 10-hour ``base`` corpus at 25 Hz), 64 on the
FSQ grid.

Shape legend: B batch, S text ids (with SOT/EOT), T frames, Q codebooks, K codes per codebook.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch

from duet.data.buckets import LazyBatches, plan_batches
from duet.data.manifest import Utterance
from duet.data.shards import CodeShards
from duet.data.token_rows import LunaDataConfig, TokenRow, codebook_size, select_rows
from duet.data.utterances import SplitFacts
from duet.errors import DuetError
from duet.luna.bundle import LunaBatch
from duet.luna.config import LunaConfig
from duet.luna.grid import check_codec, grid_from_codes
from duet.luna.model import collate, pad_right
from duet.text.prompts import instruction_ids, wrap_ids
from duet.text.tokens import EMOTIONS, ServiceIds, service_ids


def with_instruction(row: TokenRow, instruction: Sequence[int]) -> TokenRow:
    """``row`` with the instruction context's ids (``instruction_ids``) in front of its text ids, each with weight 0
    and duration target 0 (after SOT's), so the spread and an alignment hold them as they hold SOT."""
    if not instruction:
        return row
    n = len(instruction)
    durations = row.durations
    if durations is not None:  # [SOT, E..., ids..., EOT]: int counts or float frames, kept in their type
        durations = (durations[0], *(type(durations[0])(0),) * n, *durations[1:])  # type: ignore[assignment]
    return replace(row, ids=(*instruction, *row.ids), weights=(0,) * n + row.weights, durations=durations)


def expressive_rows(rows: Sequence[TokenRow], service: ServiceIds) -> list[TokenRow]:
    """``rows`` with each one's manifest ``emotion`` in its instruction context (:func:`with_instruction`); rows
    without one are returned as they are."""
    for row in rows:
        if row.emotion and row.emotion not in EMOTIONS:
            raise DuetError(f"utterance {row.id}: emotion {row.emotion!r} is not one of {', '.join(EMOTIONS)}")
    return [with_instruction(row, instruction_ids(service, row.emotion or None)) if row.emotion else row
            for row in rows]


class LunaData(SplitFacts):
    """One split's utterances with their codes in memory; ``epoch(e)`` is the loop's :class:`BatchSource`."""

    def __init__(self, items: Sequence[TokenRow], grids: dict[str, torch.Tensor], tokenizer, cfg: LunaDataConfig,
                 mask_id: int, train: bool, frame_rate: float | None = None,
                 dropped: dict[str, int] | None = None):
        if not items:
            raise DuetError("no utterances left for Luna training (check the split, languages and lengths)")
        self.items = list(items)
        self.grids = grids  # uid -> (T, Q) int16, the model's grid (``duet.luna.grid``)
        self.tokenizer = tokenizer
        self.service = service_ids(tokenizer)
        self.cfg = cfg
        self.mask_id = mask_id  # the grid's padding value (the model ignores padding either way)
        self.train = train
        self.frame_rate = frame_rate
        self.dropped = dropped or {}
        self.unaligned: int | None = None  # utterances an alignment file did not cover (spread targets)

    def summary(self) -> str:
        text = super().summary()
        return text if self.unaligned is None else f"{text}; {self.unaligned} without an alignment (spread targets)"

    # ---- building ------------------------------------------------------------------------------------------------
    @classmethod
    def from_shards(cls, shards: str | Path | CodeShards, manifest: str | Path | Sequence[Utterance], tokenizer,
                    cfg: LunaDataConfig, split: str = "train", model: LunaConfig | None = None,
                    limit: int | None = None, alignments: Mapping[str, Sequence[int]] | None = None) -> "LunaData":
        """Utterances of ``split`` that have codes in ``shards``; ``limit`` keeps a fixed subset (validation).

        With ``model`` given, codes must be its Q codebooks of K entries and rows fit its ``max_positions``.
        ``alignments`` (id -> durations of the wrapped text, ``duet.data.align.read_alignments``) replace the
        character spread where they fit the utterance (one per token, adding up to its frames); the others are
        counted in ``unaligned`` (kept, with the spread; None without alignments).
        """
        shards = shards if isinstance(shards, CodeShards) else CodeShards(shards)
        if model is not None:
            check_codec(model, tuple(shards.codebook_sizes), f"the codes in {shards.root}")
        mask_id = model.mask_id if model is not None else codebook_size(shards)
        max_positions = min(cfg.batch_frames, model.backbone.max_positions if model else cfg.batch_frames)
        items, dropped, unaligned = select_rows(shards, manifest, tokenizer, cfg, split, max_positions,
                                                timed=model is not None and model.is_aligned, limit=limit,
                                                alignments=alignments)
        items = expressive_rows(items, service_ids(tokenizer))
        fits = [it for it in items if it.positions <= max_positions]  # the emotion token is one position more
        dropped["too_long"] += len(items) - len(fits)
        items = fits
        wanted = {it.id for it in items}
        to_grid = (lambda c: c.long().T) if model is None else (lambda c: grid_from_codes(model, c))
        grids = {uid: to_grid(c).to(torch.int16) for uid, c in shards if uid in wanted}  # (T, Q) each
        data = cls(items, grids, tokenizer, cfg, mask_id=mask_id, train=split == "train",
                   frame_rate=shards.frame_rate, dropped=dropped)
        data.unaligned = unaligned if alignments is not None else None
        return data

    # ---- batches -------------------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[list[int]]:
        """Item indices of every batch of ``epoch``, in training order (shuffled only for the training split)."""
        rng = random.Random(f"luna-plan:{self.cfg.seed}:{epoch}") if self.train else None
        return plan_batches([it.positions for it in self.items], self.cfg.batch_frames, self.cfg.max_batch_size,
                            self.cfg.bucket_width, rng)

    def grid(self, uid: str) -> torch.Tensor:
        """(T, Q) grid of one utterance, frame-major as ``LunaInputs`` wants it."""
        return self.grids[uid].long()

    def make_batch(self, indices: Iterable[int]) -> LunaBatch:
        texts, grids, durations = [], [], []
        for i in indices:
            item = self.items[i]
            texts.append(torch.tensor(wrap_ids(item.ids, self.service, start_of_speech=False), dtype=torch.long))  # (S_i,)
            grids.append(self.grid(item.id))  # (T_i, Q)
            durations.append(torch.tensor(item.targets()))  # (S_i,) int64 counts, or float timing
        timed = all(d.dtype.is_floating_point for d in durations)
        if not timed:
            durations = [d.long() for d in durations]
        inputs = collate(texts, grids, text_pad_id=self.service.pad, mask_id=self.mask_id,
                         durations=durations if timed else None)
        return LunaBatch(inputs, pad_right(durations, 0)[0])  # durations (B, S)

    def epoch(self, epoch: int) -> Sequence[LunaBatch]:
        return LazyBatches(self.plan(epoch), lambda i, indices: self.make_batch(indices))

    def batches(self) -> list[LunaBatch]:
        """Every batch of the split in length order (validation)."""
        return [self.make_batch(b) for b in self.plan(0)]
