"""Test helpers shared by the data tests: a fake codec whose codes can be recomputed independently."""

from __future__ import annotations

import math

import numpy as np
import soundfile as sf
import torch

from duet.codecs.base import EncodeResult


class MeanAbsCodec:
    """A fake codec: per frame of `samples_per_frame` samples, stream 0 = 16-level mean |x|, stream 1 = 4-level
    peak |x|. Counts the utterances it encodes and can fail on purpose, to simulate an interrupted run."""

    def __init__(self, sample_rate: int = 16000, samples_per_frame: int = 160, fail_after: int | None = None):
        self.sample_rate = sample_rate
        self.samples_per_frame = samples_per_frame
        self.fail_after = fail_after
        self.encoded = 0

    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return (16, 4)

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> EncodeResult:
        if self.fail_after is not None and self.encoded + audio.shape[0] > self.fail_after:
            raise RuntimeError("simulated crash")
        lengths = lengths if lengths is not None else torch.full((audio.shape[0],), audio.shape[1])
        frames = (lengths + self.samples_per_frame - 1) // self.samples_per_frame
        codes = torch.zeros(audio.shape[0], 2, int(frames.max()), dtype=torch.long)  # (B, K, T)
        for b in range(audio.shape[0]):
            x = audio[b, : int(lengths[b])].double().abs()
            x = torch.nn.functional.pad(x, (0, int(frames[b]) * self.samples_per_frame - x.shape[0]))
            x = x.view(int(frames[b]), self.samples_per_frame)  # (T, samples per frame)
            codes[b, 0, : frames[b]] = (x.mean(1) * 32).floor().clamp(0, 15).long()
            codes[b, 1, : frames[b]] = (x.max(1).values * 4).floor().clamp(0, 3).long()
        self.encoded += audio.shape[0]
        return EncodeResult(codes, frames)

    def decode(self, codes, lengths=None):
        raise NotImplementedError("encode-only fake")


def expected_codes(path, spf: int = 160) -> np.ndarray:
    """The fake codec's output computed independently with numpy from the file on disk -> (2, T)."""
    x, _ = sf.read(str(path), dtype="float64")
    frames = math.ceil(len(x) / spf)
    x = np.abs(np.pad(x, (0, frames * spf - len(x)))).reshape(frames, spf)
    return np.stack([np.clip(np.floor(x.mean(1) * 32), 0, 15), np.clip(np.floor(x.max(1) * 4), 0, 3)]).astype(np.int64)
