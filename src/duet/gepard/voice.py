"""Gepard's voice prefix around the compressor (Gepard §2.6, ``duet.gepard.qformer``): which reference a training
row reads, how references sit in a batch, the two regularisers of one batch, and a clip's prefix at inference.

Training references (``duet.gepard.data``). A row's reference is the codes of ANOTHER utterance of the same speaker,
never its own (the prefix is to carry the voice, not the target's content; K = 8 vectors are the bottleneck against
copying, §2.6.1): an utterance drawn uniformly from the speaker's others, then a window of at most ``max_frames``
frames at a uniform start. A row whose speaker has no other utterance in the split (a singleton), or that has no
speaker, is a null-sentinel row: it carries no reference and always reads ``null_prefix`` (§2.6.2). Every draw
comes from the caller's ``random.Random``, so a batch's references are a pure function of the loader's seed.

Batch layout (fields of ``duet.gepard.model.GepardBatch``)::

    reference       (B, C, R) int64  channel digits, right-padded with 0 to the longest reference (R >= 1)
    reference_mask  (B, R) bool      True on a reference's frames; all False in a row without one
    speaker_ids     (B,) int64       the row's speaker, an index into the split's sorted speakers (-1: none)
    no_speaker      (B,) bool        null-sentinel rows

Inference (:func:`reference_prefix`, the one place a clip becomes a prefix: ``duet speak`` / ``duet serve``'s
runtime, ``duet.tts.gepard``, and the DPO stage's cloning pairs, ``duet.train.gepard_pairs``): the clip at the
codec's rate is encoded, unfolded to channel digits, cut to the compressor's ``max_reference_frames`` (its first
frames; :func:`reference_codes`, which the vLLM client shares, ``duet.serve.vllm.voice``) and compressed to K
prefix vectors. No transcript is needed.

Shape legend: B batch, C channels (32), G packed groups (8), R reference frames, S samples, K prefix vectors,
D width.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from duet.codecs.base import Codec
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.model import GepardModel

NO_SPEAKER_ID = -1  # speaker id of a null-sentinel row (it takes no part in L_supcon)


@dataclass(frozen=True)
class ReferenceWindow:
    """Frames [start, start + length) of item ``item`` of the split: one row's reference."""

    item: int
    start: int
    length: int


class ReferencePicker:
    """Draws each row's reference among the other utterances of its speaker (module docstring).

    ``speakers`` and ``frames`` are per item of the split (a speaker "" is no speaker); ``max_frames`` bounds a
    reference window.
    """

    def __init__(self, speakers: Sequence[str], frames: Sequence[int], max_frames: int):
        if len(speakers) != len(frames):
            raise ValueError(f"{len(speakers)} speakers for {len(frames)} items")
        if max_frames < 1:
            raise ValueError(f"max_frames must be positive, got {max_frames}")
        self.frames = list(frames)
        self.max_frames = max_frames
        names = sorted({s for s in speakers if s.strip()})
        index = {name: i for i, name in enumerate(names)}
        self._group: list[list[int]] = [[] for _ in names]  # speaker id -> its items
        self._speaker = [index[s] if s.strip() else NO_SPEAKER_ID for s in speakers]  # item -> speaker id
        self._place = [0] * len(speakers)  # item -> its place in its speaker's group
        for item, sid in enumerate(self._speaker):
            if sid != NO_SPEAKER_ID:
                self._place[item] = len(self._group[sid])
                self._group[sid].append(item)

    def speaker_id(self, item: int) -> int:
        """The item's speaker id, or ``NO_SPEAKER_ID`` for a null-sentinel item (no speaker, or a singleton)."""
        sid = self._speaker[item]
        return NO_SPEAKER_ID if sid == NO_SPEAKER_ID or len(self._group[sid]) < 2 else sid

    def pick(self, item: int, rng: random.Random) -> ReferenceWindow | None:
        """Another utterance of ``item``'s speaker and a window in it; None for a null-sentinel item."""
        sid = self.speaker_id(item)
        if sid == NO_SPEAKER_ID:
            return None
        group = self._group[sid]
        k = rng.randrange(len(group) - 1)  # uniform over the others: skip the item's own place
        other = group[k + (k >= self._place[item])]
        length = min(self.frames[other], self.max_frames)
        return ReferenceWindow(other, rng.randrange(self.frames[other] - length + 1), length)


def collate_references(references: Sequence[torch.Tensor | None], channels: int,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row (C, R_b) channel codes or None -> codes (B, C, R) right-padded with 0 and mask (B, R), R >= 1."""
    r = max([1, *(ref.shape[1] for ref in references if ref is not None)])
    codes = torch.zeros((len(references), channels, r), dtype=torch.long)
    mask = torch.zeros((len(references), r), dtype=torch.bool)
    for i, ref in enumerate(references):
        if ref is not None:
            codes[i, :, : ref.shape[1]] = ref
            mask[i, : ref.shape[1]] = True
    return codes, mask


def reference_codes(codec: Codec, audio: np.ndarray, max_frames: int, fsq: GroupFSQ | None = None,
                    ) -> torch.Tensor:
    """A reference clip (S,) (mono, at the codec's rate) -> its channel digits (1, C, R), cut to its first
    ``max_frames`` frames (the compressor's ``max_reference_frames``), on the CPU.

    ``fsq`` unfolds the codec's packed tokens (default: the standard packing)."""
    fsq = fsq if fsq is not None else GroupFSQ(FSQConfig())
    with torch.no_grad():
        codes = codec.encode(torch.from_numpy(np.ascontiguousarray(audio, np.float32))[None]).codes  # (1, G, R)
        channels = fsq.unfold(codes.cpu().long())  # (1, G, R) packed -> (1, C, R) digits
        return channels[:, :, :max_frames]  # (1, C, R)


def reference_prefix(model: GepardModel, codec: Codec, audio: np.ndarray, fsq: GroupFSQ | None = None,
                     ) -> torch.Tensor:
    """A reference clip (S,) (mono, at the codec's rate) -> the model's voice prefix (1, K, D) (module docstring).

    Raises DuetError for a model without the voice compressor."""
    if model.qformer is None:
        raise DuetError("this Gepard has no voice compressor: it cannot clone a voice")
    channels = reference_codes(codec, audio, model.qformer.config.max_reference_frames, fsq)  # (1, C, R)
    with torch.no_grad():
        return model.voice_prefix(channels.to(model.embed_tokens.weight.device))  # (1, K, D)
