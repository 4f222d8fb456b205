"""Chunked decoding for decoders with a finite receptive field, exact by construction.

Shape legend: B batch, K code streams, T frames, S samples.

A decoder whose output for frame t depends only on frames [t - left, t + right] (zero-padded at the sequence
ends) gives, for a window of frames [a, b), exactly the full decode's samples of every frame in
[a + left, b - right), and of the window's own first/last frames where the window touches a sequence end.
``ContextStreamDecoder`` emits a frame once ``right`` later frames have arrived (0 for a causal decoder: frame-
synchronous), re-decoding it with ``left`` frames of history. The overlap-add of an iSTFT head is covered
because its reach is part of the receptive field. Results equal the full decode up to float rounding (different
window lengths may pick different conv kernels); there is no cross-fade region.
"""

from __future__ import annotations

from typing import Callable

import torch


class ContextStreamDecoder:
    """Implements ``duet.codecs.base.StreamDecoder`` for any ``decode_window(codes (B,K,t)) -> audio (B, t*spf)``."""

    def __init__(self, decode_window: Callable[[torch.Tensor], torch.Tensor], left: int, right: int,
                 samples_per_frame: int, check: Callable[[torch.Tensor], torch.Tensor] | None = None):
        self.decode_window = decode_window
        self.left, self.right, self.spf = left, right, samples_per_frame
        self.check = check
        self._codes: torch.Tensor | None = None  # (B, K, t): ``left`` frames of history + frames not yet emitted
        self._history = 0  # how many leading frames of _codes are already emitted (context only)

    def _emit(self, upto: int) -> torch.Tensor:
        """Decode the buffered window and return the audio of buffered frames [history, upto)."""
        assert self._codes is not None
        audio = self.decode_window(self._codes)  # (B, t * spf)
        out = audio[:, self._history * self.spf : upto * self.spf]
        # Keep at most ``left`` emitted frames as history for the next window.
        keep_from = max(0, upto - self.left)
        self._codes = self._codes[..., keep_from:]
        self._history = upto - keep_from
        return out

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, K, t) -> the audio (B, s) that became final (possibly zero samples)."""
        if self.check is not None:
            codes = self.check(codes)
        self._codes = codes if self._codes is None else torch.cat([self._codes, codes], dim=-1)
        ready = self._codes.shape[-1] - self.right  # frames whose whole right context has arrived
        if ready <= self._history:
            return self._codes.new_zeros((self._codes.shape[0], 0), dtype=torch.float32)
        return self._emit(ready)

    def flush(self) -> torch.Tensor:
        """The audio of every frame not yet emitted (the sequence end is known now)."""
        if self._codes is None or self._codes.shape[-1] == self._history:
            batch = 1 if self._codes is None else self._codes.shape[0]
            return torch.zeros(batch, 0)
        out = self._emit(self._codes.shape[-1])
        self._codes, self._history = None, 0
        return out
