"""Pitch-preserving time stretch by WSOLA (waveform similarity overlap-add; Verhelst & Roelands, ICASSP 1993), in a
stream: audio goes in as it is decoded and comes out ``factor`` times as long, at the same pitch.

Output frames of ``window`` seconds are laid every hop (half a window) under a periodic Hann window, whose copies at
half-window spacing add up to one. Output frame m takes the input segment that starts near m hops / ``factor``:
within ``tolerance`` of it, the offset whose segment correlates best with the natural continuation of the segment
frame m - 1 took (the input one hop after it), so the waveforms overlap in phase and no pitch or period is cut.
A virtual hop of zeros before the input and after it lets the first and last samples be covered by two frames as
every other sample is, so the output has no fade at either end.

Output sample t comes from input sample t / ``factor`` give or take ``tolerance``; the whole output is exactly
``round(len(input) * factor)`` samples (:meth:`Wsola.flush` pads or cuts the last frames to it), so a time t of the
input lies at t * ``factor`` of the output.

Shape legend: s samples, N window samples, W search offsets (2 tolerance + 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class WsolaConfig:
    window: float = 0.04  # seconds per frame (a few pitch periods of speech)
    tolerance: float = 0.01  # seconds an input frame may move to match the previous one


class Wsola:
    """``push`` mono float32 chunks (s,), ``flush`` once at the end: together, the input stretched ``factor`` times
    (> 1 longer and slower, < 1 shorter and faster)."""

    def __init__(self, factor: float, sample_rate: int, config: WsolaConfig = WsolaConfig()):
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"a stretch factor must be positive, got {factor}")
        self.factor = factor
        self.hop = max(1, int(round(config.window * sample_rate / 2)))  # output hop: half a window
        self.size = 2 * self.hop  # N
        self.tolerance = int(round(config.tolerance * sample_rate))
        self._window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(self.size) / self.size)).astype(np.float32)  # (N,)
        # input and output in virtual samples: one hop of zeros before the real first sample
        self._x = np.zeros(self.hop, np.float32)  # the input not yet behind every frame still to come
        self._x0 = 0  # virtual index of self._x[0]
        self._y = np.zeros(self.size, np.float32)  # the output frames overlap here; self._y[0] is virtual _y0
        self._y0 = 0
        self._emitted = 0  # real output samples handed out
        self._frame = 0  # next output frame m
        self._previous: int | None = None  # input start of frame m - 1 (virtual)
        self._count = 0  # real input samples pushed

    def push(self, audio: np.ndarray) -> np.ndarray:
        """More input -> the output that no later input can change."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        self._count += len(audio)
        self._x = np.concatenate([self._x, audio])
        self._frames(self._x0 + len(self._x))
        return self._take(self._frame * self.hop)

    def flush(self) -> np.ndarray:
        """The end of the input -> the rest of the output, which then totals ``round(input * factor)`` samples."""
        total = int(round(self._count * self.factor))
        # zeros after the input: as much as the frames up to the output's end (plus one hop) may read
        need = int(math.ceil((total + 2 * self.hop) / self.factor)) + self.size + 2 * self.tolerance + self.hop
        pad = max(0, need - (self._x0 + len(self._x)))
        self._x = np.concatenate([self._x, np.zeros(pad, np.float32)])
        while (self._frame - 1) * self.hop < total + self.hop:  # every real sample under two frames
            if not self._frames(self._x0 + len(self._x), limit=1):
                break
        out = self._take(total + self.hop)
        if self._emitted > total:  # cannot happen: push hands out only what lies before the next frame
            raise RuntimeError("WSOLA handed out more than its output")
        missing = total - self._emitted
        if missing > 0:  # no frame reached that far (a factor so small that frames ran out of input)
            out = np.concatenate([out, np.zeros(missing, np.float32)])
            self._emitted = total
        return out

    def _frames(self, available: int, limit: int | None = None) -> int:
        """Lay output frames while their input search range lies within the first ``available`` virtual input
        samples; -> how many were laid."""
        laid = 0
        while limit is None or laid < limit:
            m = self._frame
            nominal = int(round(m * self.hop / self.factor))
            lo = max(0, nominal - self.tolerance)
            hi = nominal + self.tolerance  # last candidate start
            if hi + self.size > available or (self._previous is not None
                                              and self._previous + self.hop + self.size > available):
                break
            if self._previous is None:
                start = nominal
            else:
                target = self._previous + self.hop  # the natural continuation of frame m - 1
                template = self._segment(target, self.size)  # (N,)
                region = self._segment(lo, hi - lo + self.size)  # (N + W - 1,)
                score = np.correlate(region, template, mode="valid")  # (W,)
                energy = np.sqrt(np.convolve(region * region, np.ones(self.size, np.float32), mode="valid")) + 1e-6
                start = lo + int(np.argmax(score / energy))
            self._add(m * self.hop, self._window * self._segment(start, self.size))
            self._previous = start
            self._frame += 1
            laid += 1
            drop = min(start, nominal) - self.tolerance - self.hop - self._x0  # input no frame will read again
            if drop > 0:
                self._x = self._x[drop:]
                self._x0 += drop
        return laid

    def _segment(self, start: int, length: int) -> np.ndarray:
        """Virtual input samples [start, start + length) (zeros past what was pushed)."""
        a = start - self._x0
        if a < 0:
            raise RuntimeError("WSOLA read input it had dropped")
        seg = self._x[a:a + length]
        if len(seg) < length:
            seg = np.concatenate([seg, np.zeros(length - len(seg), np.float32)])
        return seg

    def _add(self, at: int, frame: np.ndarray) -> None:
        a = at - self._y0
        if a + len(frame) > len(self._y):
            self._y = np.concatenate([self._y, np.zeros(a + len(frame) - len(self._y), np.float32)])
        self._y[a:a + len(frame)] += frame

    def _take(self, until: int) -> np.ndarray:
        """Hand out real output up to virtual sample ``until`` (every frame over it laid)."""
        begin = self._emitted + self.hop  # virtual index of the next real sample
        if until <= begin:
            return np.zeros(0, np.float32)
        out = self._y[begin - self._y0:until - self._y0].copy()
        if len(out) < until - begin:
            out = np.concatenate([out, np.zeros(until - begin - len(out), np.float32)])
        self._emitted += len(out)
        keep = until - self._y0
        self._y = self._y[keep:] if keep < len(self._y) else np.zeros(0, np.float32)
        self._y0 = until
        return out


def stretch(audio: np.ndarray, factor: float, sample_rate: int, config: WsolaConfig = WsolaConfig()) -> np.ndarray:
    """``audio`` (s,) stretched ``factor`` times, at one go: (round(s * factor),)."""
    w = Wsola(factor, sample_rate, config)
    return np.concatenate([w.push(audio), w.flush()])
