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

Shape legend: N slots, C channels (32), B rows.
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

    def check(self, token_ids: list[int], key: int) -> bool:
        """Do the slots of these ids (frames 0, 1, ...) still hold this request's frames? (recompute guard)"""
        if not token_ids:
            return True
        ids = torch.tensor(token_ids, dtype=torch.long)
        rows = self.rows[ids - 1]
        expected = torch.arange(len(token_ids), dtype=torch.int32)
        return bool((rows[:, self.channels] == key).all()) and bool((rows[:, self.channels + 1] == expected).all())


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
