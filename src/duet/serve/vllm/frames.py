"""The frame bank: how a 32-channel Gepard frame travels through vLLM as one token id.

vLLM's decode loop feeds back one int32 token id per request and step, and hands the client token ids. A Gepard
frame is 32 channel codes ([8, 7, 6, 6] x 8 levels: 2016^8 ~ 2^88 combinations), which no token id can hold. So
the sampler (``sampler.py``) writes each frame it samples into a slot of a ring buffer, the *frame bank*, and makes
vLLM emit the slot number as the token id; the next step's ``embed_input_ids`` looks the frame up by that id
(``model.py``) and the client reads it by the same id (``engine.py``). Token id 0 is STOP (the stop head fired).

The bank lives in a file in shared memory (``/dev/shm``) that the client creates and names in the model config
(``hf_overrides={"frame_bank_path": ...}``), so it works whether vLLM runs the model in the client's process or in
worker processes (vLLM's default). Each slot row is ``[c_0 .. c_31, key, t]``: the codes plus a stamp (the
request's key and frame index) that lets a reader check the slot still holds *its* frame: a ring slot is reused
after ``slots`` more frames, and a reader that fell that far behind (or a request that vLLM preempted and
recomputes after its slots were reused) gets an error, never wrong audio.

A model with aligned text input (``duet.gepard.aligned``) also needs, for each frame it is fed, the aligned vector
of that frame's audio position. The client computes a request's vectors for every position it can reach, once,
with duet's own duration predictor and ``AlignedInput`` (``engine.py``), and writes them as one file next to the
bank (:class:`AlignedTables`); the model adds row ``t + 1`` of the request's table to frame ``t``'s embedding,
finding the request and ``t`` by the slot's stamp. Position 0 (SOS) rides in the prompt embeddings.

Shape legend: N slots, C channels (32), B rows, P audio positions of one request, D model width.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import numpy as np
import torch

STOP_ID = 0  # the token id that ends a request: vLLM is told it is a stop token
EXTRA_KEY = "duet"  # the key of duet's per-request sampling parameters in vLLM's SamplingParams.extra_args
STAMP = 2  # columns after the codes: request key, frame index


def bank_shape(slots: int, channels: int) -> tuple[int, int]:
    return slots, channels + STAMP


def create_bank_file(slots: int, channels: int, directory: str | None = None) -> Path:
    """A zero-filled bank file (slot rows of int32) for a new engine; the caller deletes it when done."""
    directory = directory or ("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir())
    fd, name = tempfile.mkstemp(prefix="duet-frame-bank-", suffix=".i32", dir=directory)
    rows, cols = bank_shape(slots, channels)
    os.ftruncate(fd, rows * cols * 4)
    os.close(fd)
    return Path(name)


class FrameBank:
    """Slot rows ``(N, C + 2)`` int32, in a shared file (or private memory when ``path`` is None)."""

    def __init__(self, slots: int, channels: int, path: str | os.PathLike | None = None):
        self.slots, self.channels = slots, channels
        shape = bank_shape(slots, channels)
        if path is None:
            self.rows = torch.zeros(shape, dtype=torch.int32)
        else:
            array = np.memmap(path, dtype=np.int32, mode="r+", shape=shape)
            self.rows = torch.from_numpy(array)  # shares the mapping: writes are visible to every process
        self.path = None if path is None else Path(path)
        self._next = 0
        self._lock = threading.Lock()

    # --- writer (the sampler, inside vLLM) ------------------------------------------------------------------------

    def store(self, frames: torch.Tensor, keys: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        """frames (B, C), keys (B,), frame indices (B,) -> token ids (B,) int64 in [1, N]."""
        b = frames.shape[0]
        with self._lock:
            slot = (torch.arange(b) + self._next) % self.slots  # (B,)
            self._next = (self._next + b) % self.slots
        row = torch.cat([frames.cpu().to(torch.int32), keys.cpu().to(torch.int32)[:, None],
                         index.cpu().to(torch.int32)[:, None]], dim=1)  # (B, C + 2)
        self.rows[slot] = row
        return slot + 1

    # --- readers ----------------------------------------------------------------------------------------------------

    def frames(self, token_ids: torch.Tensor) -> torch.Tensor:
        """token ids (B,) -> frames (B, C) int64, unchecked (the model's input path; id 0 reads slot 0)."""
        slot = (token_ids.cpu().long() - 1).clamp(min=0) % self.slots
        return self.rows[slot, : self.channels].long()

    def read(self, token_ids: list[int], key: int, first_index: int) -> torch.Tensor:
        """A client's frames: ids of frames first_index, first_index + 1, ... -> (C, T), stamps checked."""
        ids = torch.tensor(token_ids, dtype=torch.long)
        rows = self.rows[ids - 1].clone()  # (T, C + 2): copy before checking, the writer may move on
        expected = torch.arange(first_index, first_index + len(token_ids), dtype=torch.int32)
        if not (bool((rows[:, self.channels] == key).all()) and bool((rows[:, self.channels + 1] == expected).all())):
            raise RuntimeError(f"frame bank slots were reused before they were read (bank of {self.slots} slots); "
                               "export with more frame slots (--frame-slots) or run fewer streams")
        return rows[:, : self.channels].long().T  # (C, T)

    def stamps(self, token_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """token ids (B,) -> (request keys (B,), frame indices (B,)) int64 of their slots, unchecked."""
        slot = (token_ids.cpu().long() - 1).clamp(min=0) % self.slots
        rows = self.rows[slot]
        return rows[:, self.channels].long(), rows[:, self.channels + 1].long()

    def check(self, token_ids: list[int], key: int) -> bool:
        """Do the slots of these ids (frames 0, 1, ...) still hold this request's frames? (recompute guard)"""
        if not token_ids:
            return True
        ids = torch.tensor(token_ids, dtype=torch.long)
        rows = self.rows[ids - 1]
        expected = torch.arange(len(token_ids), dtype=torch.int32)
        return bool((rows[:, self.channels] == key).all()) and bool((rows[:, self.channels + 1] == expected).all())


class AlignedTables:
    """Each running request's aligned vectors (P, D) float32, one file per request beside the bank file.

    The client writes a table before it submits the request and removes it when the request ends; the model reads
    rows by (key, position). A private instance (``bank_path=None``) keeps the tables in memory (tests, one process).
    """

    def __init__(self, bank_path: str | os.PathLike | None, width: int):
        self.bank_path = None if bank_path is None else Path(bank_path)
        self.width = width
        self._private: dict[int, torch.Tensor] = {}
        self._open: dict[int, np.memmap] = {}

    def path(self, key: int) -> Path:
        assert self.bank_path is not None
        return self.bank_path.with_name(f"{self.bank_path.name}.aligned-{key}")

    def write(self, key: int, table: torch.Tensor) -> None:
        """table (P, D): the aligned vector of audio positions 0 .. P - 1."""
        if table.ndim != 2 or table.shape[1] != self.width:
            raise ValueError(f"need a (P, {self.width}) table, got {tuple(table.shape)}")
        data = table.detach().cpu().float().contiguous()
        if self.bank_path is None:
            self._private[key] = data
            return
        tmp = self.path(key).with_suffix(".tmp")
        data.numpy().tofile(tmp)
        os.replace(tmp, self.path(key))

    def remove(self, key: int) -> None:
        if self.bank_path is None:
            self._private.pop(key, None)
        else:
            self.path(key).unlink(missing_ok=True)

    def _table(self, key: int) -> torch.Tensor | np.memmap | None:
        if self.bank_path is None:
            return self._private.get(key)
        table = self._open.get(key)
        if table is not None and not self.path(key).exists():  # the client removed it: the request is over
            del self._open[key]
            return None
        if table is None:
            try:
                table = np.memmap(self.path(key), dtype=np.float32, mode="r").reshape(-1, self.width)
            except (FileNotFoundError, ValueError):  # no such request (a warm-up or prompt placeholder id)
                return None
            self._open[key] = table
        return table

    def rows(self, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """keys (B,), audio positions (B,) -> aligned vectors (B, D); zeros for a key without a table.

        A position past a table's end reads its last row (the table covers every position a request can reach).
        Tables of keys absent from this call are let go, so a finished request's mapping does not outlive it.
        """
        out = torch.zeros((keys.shape[0], self.width))
        wanted = set(keys.tolist())
        for key in list(self._open):
            if key not in wanted:
                del self._open[key]
        for key in wanted:
            table = self._table(key)
            if table is None:
                continue
            at = (keys == key).nonzero()[:, 0]
            rows = positions[at].clamp(min=0, max=len(table) - 1)
            out[at] = torch.as_tensor(np.asarray(table[rows.numpy()]), dtype=torch.float32)
        return out


_BANKS: dict[str, FrameBank] = {}
_BANKS_LOCK = threading.Lock()


def bank_for(path: str | None, slots: int, channels: int) -> FrameBank:
    """The one FrameBank of this process for ``path`` (the model and the sampler are built separately by vLLM and
    meet here); ``path=None`` gives a private bank (the model runs, but no client can read its frames)."""
    name = str(path) if path else f"<private:{slots}x{channels}>"
    with _BANKS_LOCK:
        bank = _BANKS.get(name)
        if bank is None:
            bank = _BANKS[name] = FrameBank(slots, channels, path)
        return bank
