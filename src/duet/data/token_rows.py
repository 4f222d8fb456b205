"""The rows of a coded corpus that Luna trains on: an utterance's token ids, frame count and duration targets.

Which utterances (``select_rows``): those of a split that have codes, non-empty prepared text
(``duet.data.utterances``) and fit the data config's bounds. Their duration targets, per token of the wrapped text
[SOT, tokens..., EOT]: a forced alignment's counts (``duet data align``, ``duet.data.align``), the corpus timing's
continuous frames (``timed_rows``, aligned text input), or else the character spread: the true frame count T spread
over the text tokens in proportion to their non-space characters (``token_weights``, ``spread_frames``), 0 for SOT
and EOT. Training (``duet.luna.data``) and the forced aligner (``duet.data.align_corpus``) read the same rows, so
every alignment's token count matches a training row.

Shape legend: S text ids (with SOT/EOT), T frames.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from duet.data.manifest import Utterance
from duet.data.shards import CodeShards
from duet.data.token_timing import timed_texts
from duet.data.utterances import coded_texts
from duet.errors import DuetError
from duet.text.phonemes import surface


@dataclass(frozen=True)
class LunaDataConfig:
    batch_frames: int = 2000  # padded positions (text + audio) per batch: B x max(S_b + T_b)
    max_batch_size: int = 32
    max_frames: int = 750  # longer utterances are left out (30 s at 25 Hz, Realtime's serving bound too)
    bucket_width: int = 16  # positions per length bucket; rows within a bucket are shuffled each epoch
    languages: tuple[str, ...] = ()  # keep only manifest languages starting with one of these; () = all
    held_out_speakers: tuple[str, ...] = ()  # speakers left out of every split (unseen voices for evaluation)
    normalize: bool = True  # English text normalisation (numbers, money, abbreviations -> words)
    val_items: int = 64  # held-out utterances scored at each validation (0 = no validation)
    seed: int = 0
    alignments: str | None = None  # duration targets from ``duet data align`` (None: the character spread)

    def __post_init__(self) -> None:
        if self.batch_frames < 1 or self.max_batch_size < 1 or self.max_frames < 1 or self.bucket_width < 1:
            raise DuetError("batch_frames, max_batch_size, max_frames and bucket_width must be positive")


def token_weights(text: str, offsets: Sequence[tuple[int, int]]) -> list[int]:
    """Non-space characters of each token (its ``[start, end)`` span of ``text``): the duration weights."""
    return [sum(not ch.isspace() for ch in text[a:b]) for a, b in offsets]


def duration_targets(weights: Sequence[int], frames: int) -> list[int]:
    """Targets of the wrapped text [SOT, tokens..., EOT]: 0, the frames spread by weight (adding up to T), 0."""
    return [0, *spread_frames(weights, frames), 0]


def spread_frames(weights: Sequence[int], frames: int) -> list[int]:
    """Spread ``frames`` over segments in proportion to integer ``weights`` (e.g. characters per text token).

    Cumulative boundaries are rounded, not the shares (as in ``duet.luna.duration.frame_durations``):
    b_i = round(frames c_i / C) with c_i the running weight sum, C the total, halves rounded up in exact integer
    arithmetic. So the counts add up to ``frames`` exactly, a zero weight gets 0 frames, and no share is off by more
    than one frame from its ideal.
    """
    if frames < 0:
        raise DuetError(f"frames must be >= 0, got {frames}")
    if any(w < 0 for w in weights):
        raise DuetError(f"weights must be >= 0, got {list(weights)}")
    total = sum(weights)
    if total == 0:
        raise DuetError("cannot spread frames over segments whose weights are all 0")
    out, running, prev = [], 0, 0
    for w in weights:
        running += w
        boundary = (2 * frames * running + total) // (2 * total)  # round(frames * running / total), half up
        out.append(boundary - prev)
        prev = boundary
    return out


@dataclass(frozen=True)
class TokenRow:
    id: str
    text: str  # prepared (normalised) text
    ids: tuple[int, ...]  # its token ids, without SOT/EOT
    weights: tuple[int, ...]  # non-space characters per token
    frames: int
    # targets of [SOT, ids..., EOT]: int frame counts of a forced alignment, or float frames of the corpus timing
    durations: tuple[int, ...] | tuple[float, ...] | None = None
    emotion: str = ""  # the manifest's utterance-level emotion ("" = none)

    def targets(self) -> list[int] | list[float]:
        """Duration targets of the wrapped text: the alignment's, else the character spread."""
        return list(self.durations) if self.durations is not None else duration_targets(self.weights, self.frames)

    @property
    def positions(self) -> int:
        return len(self.ids) + 2 + self.frames  # SOT, EOT


def spread_rows(chosen: Sequence[tuple[Utterance, str]], tokenizer, shards: CodeShards) -> list[TokenRow]:
    """Rows of the prepared texts, tokenised with character offsets (the spread's weights)."""
    encoded = (tokenizer([t for _, t in chosen], add_special_tokens=False, return_offsets_mapping=True)
               if chosen else {"input_ids": [], "offset_mapping": []})
    return [TokenRow(u.id, text, tuple(ids), tuple(token_weights(surface(tokenizer, text), offsets)),  # IPA offsets
                     shards.frames(u.id), emotion=u.emotion)
            for (u, text), ids, offsets in zip(chosen, encoded["input_ids"], encoded["offset_mapping"])]


def timed_rows(chosen: Sequence[tuple[Utterance, str]], manifest, tokenizer, shards: CodeShards,
               dropped: dict[str, int]) -> list[TokenRow]:
    """Rows whose text is the IPA their voice read, with the corpus timing's continuous frames per token."""
    if not isinstance(manifest, (str, Path)):
        raise DuetError("aligned text input reads timing files next to the corpus: pass the manifest path")
    timed = timed_texts([u for u, _ in chosen], Path(manifest).parent, tokenizer, shards.frames, shards.frame_rate,
                        dropped)
    return [TokenRow(t.utterance.id, t.phonemes, t.ids, (1,) * len(t.ids), t.frames, t.durations,
                     emotion=t.utterance.emotion) for t in timed]


def codebook_size(shards: CodeShards) -> int:
    """K of codes that are Q codebooks of one size K (what Luna reads); any other codes are an error."""
    sizes = tuple(shards.codebook_sizes)
    if len(set(sizes)) != 1:
        raise DuetError(f"codes in {shards.root} have codebook sizes {sizes}; Luna needs Q codebooks of one "
                        "size K (an RVQ codec such as duet-rvq)")
    return sizes[0]


def select_rows(shards: CodeShards, manifest: str | Path | Sequence[Utterance], tokenizer, cfg: LunaDataConfig,
                split: str = "train", max_positions: int | None = None, timed: bool = False,
                limit: int | None = None, alignments: Mapping[str, Sequence[int]] | None = None,
                ) -> tuple[list[TokenRow], dict[str, int], int]:
    """Rows of ``split`` that have codes in ``shards`` -> (rows, counts left out by reason, rows an alignment did not
    cover).

    Codes must be Q codebooks of one size K (:func:`codebook_size`). Rows longer than ``cfg.max_frames`` frames or
    ``max_positions`` positions (default ``cfg.batch_frames``) are left out; ``limit`` keeps a fixed subset
    (validation). ``timed``: the corpus timing's IPA text and frames per token (aligned text input). ``alignments``
    (id -> durations of the wrapped text, ``duet.data.align.read_alignments``) replace the character spread where they
    fit the utterance (one per token, adding up to its frames); the others are counted (kept, with the spread; 0
    without alignments).
    """
    codebook_size(shards)
    max_positions = cfg.batch_frames if max_positions is None else max_positions

    # with a limit, a fixed subset spread over speakers: the first ``limit`` in id-hash order
    chosen, dropped = coded_texts(manifest, split, cfg, shards, ordered=limit is not None)
    if timed:
        candidates = timed_rows(chosen, manifest, tokenizer, shards, dropped)
    else:
        candidates = spread_rows(chosen, tokenizer, shards)
    rows, unaligned = [], 0
    for row in candidates:
        if row.frames > cfg.max_frames or row.positions > max_positions or row.frames < 1:
            dropped["too_long"] += 1
            continue
        if not sum(row.weights):  # nothing to speak (cannot happen for stripped non-empty text; a guard)
            dropped["empty_text"] += 1
            continue
        if alignments is not None and row.durations is None:
            aligned = alignments.get(row.id)
            if aligned is not None and len(aligned) == len(row.ids) + 2 and sum(aligned) == row.frames:
                row = replace(row, durations=tuple(aligned))
            else:
                unaligned += 1
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break
    return rows, dropped, unaligned
