"""Gepard's training data: (text ids, channel codes) pairs from codec shards + the manifest's text, in
length-bucketed batches.

One utterance::

    manifest text --normalize (English)--> --[train: short-register repetition]--> tokenizer --> wrap_ids
                                                                                     [SOT, ids..., EOT, SOS]
    shard codes (G=8, T) packed --GroupFSQ.unfold--> (C=32, T) channel codes (Gepard §2.3: 2016 = 8*7*6*6)

Text normalisation (``duet.text.normalize``, applied by ``duet.data.utterances`` for every family) is English-only
and applied to manifest languages ``en*``; other languages pass through as written. Short-register repetition
(``duet.text.augment``, Gepard §1.2 / §1.4) rewrites a 1-2 word text as 2-4 copies of itself with probability 0.5
in training; the audio is left alone.

Batches. Each utterance costs ``S + T`` positions (wrapped text ids + frames); a batch of B rows pads to
``B x max(S_b + T_b)`` positions, kept at most ``batch_frames`` (and B at most ``max_batch_size``). Per epoch:
shuffle with a seeded RNG, stable-sort by length bucket (``bucket_width`` positions), cut greedily into batches
under the budget, shuffle the batches (``duet.data.buckets``). The plan and every augmentation draw are pure
functions of (seed, epoch, batch index), so the training loop's data position is (epoch, batch) and resuming needs
no loader state (``duet.train.loop``). Budgets use the un-augmented lengths: repetition adds at most
(max_copies - 1) copies of a two-word text to a row.

Aligned text input (``GepardConfig.aligned``). The model's text is then the IPA string that the voice read, as
its timing sidecar (``duet.data.timing``) records it, cut by the tokenizer's own BPE (no phonemisation on the way,
so the characters and their times correspond exactly), and each row carries frames per wrapped token
(``duet.data.token_timing``). Utterances without an IPA timing sidecar (Piper writes one) are left out (counted as ``no_timing``), and the
short-register repetition is off (it would change the text but not the audio).

Voice prefix (``GepardConfig.voice``). Each row then also carries a reference: a window of the codes of another
utterance of the same speaker, drawn by ``duet.gepard.voice.ReferencePicker`` with an RNG seeded by (seed, epoch,
batch index), at most ``max_reference_frames`` frames (default: the compressor's own bound); rows of speaker-less
or singleton speakers are flagged ``no_speaker`` and read the null prefix. The K prefix positions count in every
row's budget (they pass through the backbone; the reference only through the compressor).

All codes of the selected utterances are held in memory, packed (int16, 16 bytes per frame): about 17 MB for the
10-hour ``base`` corpus. A corpus of thousands of hours would want lazy per-shard loading instead.

Shape legend: B batch, S text ids (with SOT/EOT/SOS), T frames, G packed groups (8), C channels (32).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable, Sequence

import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.data.buckets import LazyBatches, plan_batches
from duet.data.manifest import Utterance
from duet.data.shards import CodeShards
from duet.data.token_timing import timed_texts
from duet.data.utterances import (
    SplitFacts,
    coded_texts,
    prepare_text,
    select_utterances,
    train_tokenizer,
    training_texts,
)
from duet.errors import DuetError
from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardBatch, collate
from duet.gepard.qformer import QFormerConfig
from duet.gepard.voice import ReferencePicker, collate_references
from duet.text.augment import RepetitionConfig, augment_text
from duet.text.prompts import wrap_ids
from duet.text.tokens import service_ids

__all__ = ["GepardData", "GepardDataConfig", "prepare_text", "select_utterances", "train_tokenizer", "training_texts"]


@dataclass(frozen=True)
class GepardDataConfig:
    batch_frames: int = 4000  # padded positions (text + audio) per batch: B x max(S_b + T_b)
    max_batch_size: int = 64
    max_frames: int = 860  # longer utterances are left out (the report's longest clip: 40 s at 21.5 Hz, §4.1.1)
    bucket_width: int = 16  # positions per length bucket; rows within a bucket are shuffled each epoch
    languages: tuple[str, ...] = ()  # keep only manifest languages starting with one of these; () = all
    held_out_speakers: tuple[str, ...] = ()  # speakers left out of every split (unseen voices for evaluation)
    normalize: bool = True  # English text normalisation (numbers, money, abbreviations -> words)
    augment: bool = True  # short-register repetition in training batches
    repetition: RepetitionConfig = field(default_factory=RepetitionConfig)
    val_items: int = 64  # held-out utterances scored at each validation (0 = no validation)
    seed: int = 0
    max_reference_frames: int = 0  # longest reference window of a voice-prefix model; 0: the compressor's bound

    def __post_init__(self) -> None:
        if self.batch_frames < 1 or self.max_batch_size < 1 or self.max_frames < 1 or self.bucket_width < 1:
            raise DuetError("batch_frames, max_batch_size, max_frames and bucket_width must be positive")
        if self.max_reference_frames < 0:
            raise DuetError(f"max_reference_frames must be >= 0, got {self.max_reference_frames}")


@dataclass(frozen=True)
class _Item:
    id: str
    text: str  # prepared (normalised) text
    ids: tuple[int, ...]  # its token ids, without service tokens
    frames: int
    durations: tuple[float, ...] | None = None  # frames per wrapped token (aligned text input)
    speaker: str = ""  # the manifest's speaker ("" = none)

    @property
    def positions(self) -> int:
        return len(self.ids) + 3 + self.frames  # SOT, EOT, SOS


class GepardData(SplitFacts):
    """One split's utterances with their codes in memory; ``epoch(e)`` is the loop's :class:`BatchSource`."""

    def __init__(self, items: Sequence[_Item], packed: dict[str, torch.Tensor], tokenizer, cfg: GepardDataConfig,
                 train: bool, frame_rate: float | None = None, dropped: dict[str, int] | None = None,
                 voice: QFormerConfig | None = None):
        if not items:
            raise DuetError("no utterances left for Gepard training (check the split, languages and lengths)")
        self.items = list(items)
        self.prefix = 0 if voice is None else voice.num_queries  # K positions before every row's text
        self.references = None
        if voice is not None:
            limit = cfg.max_reference_frames or voice.max_reference_frames
            if limit > voice.max_reference_frames:
                raise DuetError(f"max_reference_frames {limit} exceeds the compressor's {voice.max_reference_frames}")
            self.references = ReferencePicker([it.speaker for it in self.items], [it.frames for it in self.items],
                                              limit)
        self.packed = packed
        self.tokenizer = tokenizer
        self.service = service_ids(tokenizer)
        self.cfg = cfg
        self.train = train
        self.frame_rate = frame_rate
        self.dropped = dropped or {}
        self.fsq = GroupFSQ(FSQConfig())

    # ---- building ------------------------------------------------------------------------------------------------
    @classmethod
    def from_shards(cls, shards: str | Path | CodeShards, manifest: str | Path | Sequence[Utterance], tokenizer,
                    cfg: GepardDataConfig, split: str = "train", model: GepardConfig | None = None,
                    limit: int | None = None, timed: bool | None = None) -> "GepardData":
        """Utterances of ``split`` that have codes in ``shards``; ``limit`` keeps a fixed subset (validation).

        ``timed`` reads each utterance's timing file and gives every batch its durations (default: when ``model``
        has aligned text input; attention supervision asks for it too).

        With ``model`` given, codes must be the model's FSQ channels and rows fit its ``max_positions``.
        """
        shards = shards if isinstance(shards, CodeShards) else CodeShards(shards)
        fsq = FSQConfig()
        if shards.codebook_sizes != (fsq.codebook_size,) * fsq.num_groups:
            raise DuetError(f"codes in {shards.root} have codebook sizes {shards.codebook_sizes}; Gepard needs "
                            f"{fsq.num_groups} GroupFSQ groups of {fsq.codebook_size} (an FSQ codec)")
        if model is not None and tuple(model.channel_levels) != fsq.channel_levels:
            raise DuetError(f"model channel levels {model.channel_levels} are not the codec's {fsq.channel_levels}")
        max_positions = min(cfg.batch_frames, model.backbone.max_positions if model else cfg.batch_frames)

        # with a limit, a fixed subset spread over speakers: the first ``limit`` in id-hash order
        chosen, dropped = coded_texts(manifest, split, cfg, shards, ordered=limit is not None)
        aligned = model is not None and model.aligned is not None if timed is None else timed
        if aligned:
            if not isinstance(manifest, (str, Path)):
                raise DuetError("aligned text and attention supervision read timing files next to the corpus: "
                                "pass the manifest path")
            timed = [_Item(t.utterance.id, t.phonemes, t.ids, t.frames, (*t.durations, 0.0),  # SOS: no frames
                           t.utterance.speaker)
                     for t in timed_texts([u for u, _ in chosen], Path(manifest).parent, tokenizer, shards.frames,
                                          shards.frame_rate, dropped)]
        else:
            encoded = tokenizer([t for _, t in chosen], add_special_tokens=False)["input_ids"] if chosen else []
            timed = [_Item(u.id, text, tuple(ids), shards.frames(u.id), speaker=u.speaker)
                     for (u, text), ids in zip(chosen, encoded)]
        voice = model.voice if model is not None else None
        prefix = 0 if voice is None else voice.num_queries
        items = []
        for item in timed:
            if item.frames > cfg.max_frames or item.positions + prefix > max_positions or item.frames < 1:
                dropped["too_long"] += 1
                continue
            items.append(item)
            if limit is not None and len(items) >= limit:
                break
        wanted = {it.id for it in items}
        packed = {uid: codes.to(torch.int16) for uid, codes in shards if uid in wanted}  # (G, T) each
        if aligned:
            cfg = replace(cfg, augment=False)
        return cls(items, packed, tokenizer, cfg, train=split == "train", frame_rate=shards.frame_rate,
                   dropped=dropped, voice=voice)

    # ---- batches -------------------------------------------------------------------------------------------------
    def plan(self, epoch: int) -> list[list[int]]:
        """Item indices of every batch of ``epoch``, in training order (shuffled only for the training split)."""
        rng = random.Random(f"gepard-plan:{self.cfg.seed}:{epoch}") if self.train else None
        return plan_batches([it.positions + self.prefix for it in self.items], self.cfg.batch_frames,
                            self.cfg.max_batch_size, self.cfg.bucket_width, rng)

    def channels(self, uid: str) -> torch.Tensor:
        """(C, T) channel codes of one utterance."""
        return self.fsq.unfold(self.packed[uid].long()[None])[0]

    def make_batch(self, indices: Iterable[int], rng: random.Random | None = None,
                   reference_rng: random.Random | None = None) -> GepardBatch:
        """Collate the given items; with ``rng`` (training) short texts get the repetition augmentation. For a
        voice-prefix model each row draws its reference with ``reference_rng`` (default: seeded by the data seed)."""
        indices = list(indices)
        rows, durations = [], []
        for i in indices:
            item = self.items[i]
            ids = item.ids
            if rng is not None and item.durations is None:
                text = augment_text(item.text, rng, self.cfg.repetition)
                if text != item.text:
                    ids = tuple(self.tokenizer.encode(text, add_special_tokens=False))
            rows.append((wrap_ids(ids, self.service, start_of_speech=True), self.channels(item.id)))
            durations.append(item.durations)
        aligned = all(d is not None for d in durations)
        batch = collate(rows, pad_id=self.service.pad, durations=durations if aligned else None)
        if self.references is None:
            return batch
        rng = reference_rng or random.Random(f"gepard-reference:{self.cfg.seed}")
        return self._with_references(batch, indices, rng)

    def _with_references(self, batch: GepardBatch, indices: list[int], rng: random.Random) -> GepardBatch:
        """``batch`` with each row's reference window, speaker id and null-sentinel flag (``duet.gepard.voice``)."""
        assert self.references is not None
        windows = [self.references.pick(i, rng) for i in indices]
        refs = [None if w is None else self.channels(self.items[w.item].id)[:, w.start: w.start + w.length]
                for w in windows]  # (C, R_b) each
        codes, mask = collate_references(refs, self.fsq.config.num_channels)
        ids = torch.tensor([self.references.speaker_id(i) for i in indices])
        return replace(batch, reference=codes, reference_mask=mask, speaker_ids=ids,
                       no_speaker=torch.tensor([w is None for w in windows]))

    def epoch(self, epoch: int) -> Sequence[GepardBatch]:
        """A lazy view of one epoch: batch ``i`` is collated (and augmented, seeded by (seed, epoch, i)) on access."""
        augment = self.train and self.cfg.augment

        def make(i: int, indices: list[int]) -> GepardBatch:
            rng = random.Random(f"gepard-augment:{self.cfg.seed}:{epoch}:{i}") if augment else None
            return self.make_batch(indices, rng, random.Random(f"gepard-reference:{self.cfg.seed}:{epoch}:{i}"))

        return LazyBatches(self.plan(epoch), make)

    def batches(self) -> list[GepardBatch]:
        """Every batch of the split, un-augmented, in length order (validation)."""
        return [self.make_batch(b, reference_rng=random.Random(f"gepard-reference:{self.cfg.seed}:val:{i}"))
                for i, b in enumerate(self.plan(0))]
