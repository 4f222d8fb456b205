"""Chunked decoding, exact by construction: by re-decoding context, or by carrying a causal decoder's state.

Shape legend: B batch, K code streams, T frames, S samples.

A decoder whose output for frame t depends only on frames [t - left, t + right] (zero-padded at the sequence
ends) gives, for a window of frames [a, b), exactly the full decode's samples of every frame in
[a + left, b - right), and of the window's own first/last frames where the window touches a sequence end.
``ContextStreamDecoder`` emits a frame once ``right`` later frames have arrived (0 for a causal decoder: frame-
synchronous), re-decoding it with ``left`` frames of history. The overlap-add of an iSTFT head is covered
because its reach is part of the receptive field. Results equal the full decode up to float rounding (different
window lengths may pick different conv kernels); there is no cross-fade region.

``StatefulStreamDecoder`` is for a causal decoder that runs chunk by chunk with a carried state (duet-fsq with
``causal_decoder``): each pushed chunk is decoded once, without context, and all of its audio is final at once.

:func:`push_many` pushes to many streams of one codec at once (a serving engine's step), each stream's audio what
its own ``push`` (and ``flush``, for a stream that ends) would have returned, up to float rounding (one call's
kernels over another batch shape):

- context windows of equal length go through ``decode_window`` as one batch, nothing padded (one call's overhead
  instead of many: what matters on a GPU; on a CPU duet-fsq's decode is arithmetic-bound, measured 19 ms per
  39-frame window alone or in a batch of 32, and a window is mostly context, so padding would only add work);
- stateful chunks go through ``decode_chunk`` as one batch per group that :func:`pad_groups` picks: chunks of
  several lengths right-padded to the longest of their group, with each row's valid length, when the calls that
  saves cost more than the padded frames (``StatefulStreamDecoder.call_frames``; a causal decoder's row never reads
  its padding, and its next state is taken at its own end). A serving engine's chunks grow 1, 2, 4, 8, 16 frames, so
  streams that started at different steps push chunks of different lengths in the same step.

Streams are grouped by the ``batch_key`` their codec gave them (and the shape of a frame) first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Callable, Protocol

import torch
import torch.nn.functional as F


class ContextStreamDecoder:
    """Implements ``duet.codecs.base.StreamDecoder`` for any ``decode_window(codes (B,K,t)) -> audio (B, t*spf)``."""

    def __init__(self, decode_window: Callable[[torch.Tensor], torch.Tensor], left: int, right: int,
                 samples_per_frame: int, check: Callable[[torch.Tensor], torch.Tensor] | None = None,
                 batch_key: Hashable | None = None):
        self.decode_window = decode_window
        self.left, self.right, self.spf = left, right, samples_per_frame
        self.check = check
        self.batch_key = batch_key  # decoders with equal keys may share one decode_window call (push_many)
        self._codes: torch.Tensor | None = None  # (B, K, t): ``left`` frames of history + frames not yet emitted
        self._history = 0  # how many leading frames of _codes are already emitted (context only)

    def _emit(self, upto: int, audio: torch.Tensor | None = None) -> torch.Tensor:
        """The audio of buffered frames [history, upto) from the buffered window's decode (``audio``, (B, t * spf),
        when the caller decoded it already)."""
        assert self._codes is not None
        if audio is None:
            audio = self.decode_window(self._codes)  # (B, t * spf)
        out = audio[:, self._history * self.spf : upto * self.spf]
        # Keep at most ``left`` emitted frames as history for the next window.
        keep_from = max(0, upto - self.left)
        self._codes = self._codes[..., keep_from:]
        self._history = upto - keep_from
        return out

    def _append(self, codes: torch.Tensor, final: bool = False) -> int | None:
        """Buffer codes (B, K, t); -> how many buffered frames are ready to emit (all of them when ``final``: the
        sequence ends with these codes), or None when none are new."""
        if self.check is not None and codes.shape[-1]:
            codes = self.check(codes)
        self._codes = codes if self._codes is None else torch.cat([self._codes, codes], dim=-1)
        ready = self._codes.shape[-1] - (0 if final else self.right)  # frames whose right context is known
        return ready if ready > self._history else None

    def _nothing(self) -> torch.Tensor:
        batch = 1 if self._codes is None else self._codes.shape[0]
        return torch.zeros(batch, 0)

    def _reset(self) -> None:
        self._codes, self._history = None, 0

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, K, t) -> the audio (B, s) that became final (possibly zero samples)."""
        ready = self._append(codes)
        return self._nothing() if ready is None else self._emit(ready)

    def flush(self) -> torch.Tensor:
        """The audio of every frame not yet emitted (the sequence end is known now)."""
        if self._codes is None or self._codes.shape[-1] == self._history:
            out = self._nothing()
        else:
            out = self._emit(self._codes.shape[-1])
        self._reset()
        return out


class ChunkState(Protocol):
    """A causal decoder's carried state for B streams; many streams' states batch together."""

    @staticmethod
    def cat(states: list[Any]) -> Any: ...

    def split(self, sizes: list[int]) -> list[Any]: ...


class StatefulStreamDecoder:
    """Implements ``duet.codecs.base.StreamDecoder`` for a causal ``decode_chunk(codes (B,K,t), state) -> (audio
    (B, t*spf), next state)`` whose joined chunks equal the full decode; ``initial_state(B)`` starts a stream.

    ``call_frames`` > 0 says that ``decode_chunk`` also takes right-padded chunks, ``decode_chunk(codes, state,
    lengths (B,))`` (row b's audio is its first ``lengths[b] * spf`` samples, its next state the one its valid
    frames leave), and what one call costs beyond its frames, in frame-rows of decoding: :func:`push_many` pads a
    shorter chunk into a longer one's call when that saves more calls than it adds padded frames. 0: chunks of one
    length per call."""

    def __init__(self, decode_chunk: Callable[..., tuple[torch.Tensor, ChunkState]],
                 initial_state: Callable[[int], ChunkState],
                 check: Callable[[torch.Tensor], torch.Tensor] | None = None, batch_key: Hashable | None = None,
                 call_frames: float = 0.0):
        if call_frames < 0:
            raise ValueError(f"call_frames must be >= 0, got {call_frames}")
        self.decode_chunk, self.initial_state = decode_chunk, initial_state
        self.check, self.batch_key, self.call_frames = check, batch_key, call_frames
        self._state: ChunkState | None = None
        self._batch = 1

    def _prepare(self, codes: torch.Tensor) -> torch.Tensor | None:
        """Checked codes (B, K, t), or None when the chunk is empty; starts the state on a stream's first codes."""
        if not codes.shape[-1]:
            return None
        codes = self.check(codes) if self.check is not None else codes
        if self._state is None:
            self._state, self._batch = self.initial_state(codes.shape[0]), codes.shape[0]
        return codes

    def _nothing(self) -> torch.Tensor:
        return torch.zeros(self._batch, 0)

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, K, t) -> their audio (B, t * spf), final at once."""
        codes = self._prepare(codes)
        if codes is None:
            return self._nothing()
        audio, self._state = self.decode_chunk(codes, self._state)
        return audio

    def flush(self) -> torch.Tensor:
        """Nothing is held back; ends the stream (the next push starts a new one)."""
        out = self._nothing()
        self._state, self._batch = None, 1
        return out


def pad_groups(lengths: Sequence[int], call_frames: float) -> list[list[int]]:
    """Chunks of ``lengths`` frames (one row each) -> the indices of each decode call's chunks, every call padded to
    its longest chunk, such that calls x ``call_frames`` + the frames decoded (padding included) is least; 0: one
    call per distinct length, nothing padded.

    Only runs of the lengths in sorted order need trying: moving a chunk into the call whose longest chunk is the
    shortest that still holds it never costs more (it is padded to a shorter length there), so some cheapest
    grouping is made of such runs. A dynamic programme over the distinct lengths finds it (cheapest grouping of the
    j shortest, for each j). Indices keep their order within a call."""
    distinct = sorted(set(lengths))
    rows = [0]  # rows[j]: chunks of the j shortest distinct lengths
    for n in distinct:
        rows.append(rows[-1] + sum(1 for x in lengths if x == n))
    best = [0.0] + [float("inf")] * len(distinct)  # best[j]: least cost of the j shortest distinct lengths
    cut = [0] * (len(distinct) + 1)  # cut[j]: where the last call of best[j] starts
    for j in range(1, len(distinct) + 1):
        for i in range(j):  # the last call holds distinct lengths i .. j - 1, padded to distinct[j - 1]
            cost = best[i] + call_frames + (rows[j] - rows[i]) * distinct[j - 1]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], len(distinct)
    while j:
        members = set(distinct[cut[j] : j])
        groups.append([k for k, n in enumerate(lengths) if n in members])
        j = cut[j]
    return groups[::-1]


def _push_stateful(streams: list[tuple[int, StatefulStreamDecoder, torch.Tensor]],
                   out: list[torch.Tensor | None]) -> None:
    """One ``decode_chunk`` call for chunks (B_i, K, t_i) of one codec: right-padded to the longest (with code 0, a
    valid code; nothing reads it) with each row's valid length when the t_i differ; states batched."""
    lengths = [c.shape[-1] for _, _, c in streams]
    longest = max(lengths)
    codes = torch.cat([F.pad(c, (0, longest - c.shape[-1])) for _, _, c in streams])  # (sum of B_i, K, longest)
    states = [dec._state for _, dec, _ in streams]
    state = type(states[0]).cat(states)
    sizes = [c.shape[0] for _, _, c in streams]
    if min(lengths) == longest:
        audio, state = streams[0][1].decode_chunk(codes, state)  # (sum of B_i, longest * spf)
    else:
        rows = torch.tensor([n for n, b in zip(lengths, sizes) for _ in range(b)])  # (sum of B_i,)
        audio, state = streams[0][1].decode_chunk(codes, state, rows)
    spf = audio.shape[-1] // longest
    for (i, dec, _), n, piece, part in zip(streams, lengths, audio.split(sizes), state.split(sizes)):
        dec._state, out[i] = part, piece[:, : n * spf]


def push_many(decoders: Sequence, codes: Sequence[torch.Tensor],
              final: Sequence[bool] | None = None) -> list[torch.Tensor]:
    """``[d.push(c) for d, c in zip(decoders, codes)]``, where ``final[i]`` makes stream i's entry
    ``push(c)`` + ``flush()`` (its sequence ends with these codes; one decode, not two), with one ``decode_window``
    call per group of streams that share a ``batch_key`` and a window shape (context decoders) or a group that
    :func:`pad_groups` picks (stateful decoders); other decoders (no key, another class) are pushed one by one."""
    final = [False] * len(decoders) if final is None else list(final)
    if not len(decoders) == len(codes) == len(final):
        raise ValueError(f"{len(decoders)} decoders, {len(codes)} code chunks and {len(final)} final flags")
    out: list[torch.Tensor | None] = [None] * len(decoders)
    groups: dict[tuple, list[tuple[int, int]]] = {}  # (key, window shape) -> [(stream index, frames to emit)]
    stateful: dict[tuple, list[tuple[int, StatefulStreamDecoder, torch.Tensor]]] = {}  # (key, frame shape) -> ...
    for i, (dec, chunk, end) in enumerate(zip(decoders, codes, final)):
        if isinstance(dec, StatefulStreamDecoder) and dec.batch_key is not None:
            prepared = dec._prepare(chunk)
            if prepared is None:
                out[i] = dec._nothing()
            else:
                stateful.setdefault((dec.batch_key, tuple(prepared.shape[1:-1])), []).append((i, dec, prepared))
            continue
        if not isinstance(dec, ContextStreamDecoder) or dec.batch_key is None:
            audio = dec.push(chunk)
            out[i] = torch.cat([audio, dec.flush()], dim=-1) if end else audio
            continue
        ready = dec._append(chunk, final=end)
        if ready is None:
            out[i] = dec._nothing()
            if end:
                dec._reset()
        else:
            assert dec._codes is not None
            groups.setdefault((dec.batch_key, tuple(dec._codes.shape[1:])), []).append((i, ready))
    for members in groups.values():
        streams = [decoders[i] for i, _ in members]
        windows = torch.cat([d._codes for d in streams])  # (sum of B, K, t)
        audio = streams[0].decode_window(windows)  # (sum of B, t * spf)
        row = 0
        for (i, ready), dec in zip(members, streams):
            b = dec._codes.shape[0]
            out[i] = dec._emit(ready, audio[row : row + b])
            row += b
            if final[i]:
                dec._reset()
    for streams in stateful.values():
        for call in pad_groups([c.shape[-1] for _, _, c in streams], streams[0][1].call_frames):
            _push_stateful([streams[k] for k in call], out)
    for i, dec in enumerate(decoders):
        if final[i] and isinstance(dec, StatefulStreamDecoder) and dec.batch_key is not None:
            dec.flush()
    return out  # type: ignore[return-value]
