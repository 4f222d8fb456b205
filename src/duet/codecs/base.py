"""The one `Codec` protocol every codec in duet implements, and its small result dataclasses.

Shape legend: B batch, S audio samples, T frames, K code streams per frame (FSQ: 8 packed groups; RVQ: Q codebooks).

Implemented by the NeMo NanoCodec adapter (`nanocodec.py`), and duet's own trained codecs (`duet-fsq`, `duet-rvq`).
Models never look inside a codec: they see integer codes of shape (B, K, T) with per-stream alphabet sizes
`codebook_sizes` and a frame rate; the sampler hands codes back for `decode`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch


@dataclass(frozen=True)
class EncodeResult:
    codes: torch.Tensor  # (B, K, T) int64
    lengths: torch.Tensor  # (B,) valid frames per item


@dataclass(frozen=True)
class DecodeResult:
    audio: torch.Tensor  # (B, S) float32 in [-1, 1]
    lengths: torch.Tensor  # (B,) valid samples per item


@runtime_checkable
class Codec(Protocol):
    """Audio <-> discrete codes. `encode` takes audio at `sample_rate`; callers resample (see `duet.audio`)."""

    sample_rate: int  # Hz of the audio it reads and writes
    samples_per_frame: int  # hop between frames, in samples

    @property
    def frame_rate(self) -> float: ...

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        """Alphabet size of each of the K code streams."""
        ...

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> EncodeResult:
        """audio (B, S) -> codes (B, K, T)."""
        ...

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> DecodeResult:
        """codes (B, K, T) -> audio (B, S)."""
        ...

    def stream_decoder(self) -> "StreamDecoder":
        """A stateful decoder that turns frames into audio chunk by chunk (see `StreamDecoder`)."""
        ...


class StreamDecoder(Protocol):
    """Incremental decode: feed frames as they arrive, get audio as soon as it is final.

    The concatenation of every `push` result and the final `flush` equals `decode` of all frames at once
    (each codec documents any cross-fade region where it differs).
    """

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, K, t) -> the audio (B, s) that became final."""
        ...

    def flush(self) -> torch.Tensor:
        """The remaining audio (B, s) once no more frames will come."""
        ...


def bitrate(codec: Codec) -> float:
    """Bits per second: frame rate x sum of log2(alphabet size) over the code streams."""
    import math

    return codec.frame_rate * sum(math.log2(n) for n in codec.codebook_sizes)
