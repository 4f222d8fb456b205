"""Input checks and the documented conversions every duet codec applies before touching a convolution.

Shape legend: B batch, S samples, K code streams, T frames.

Conversions (deliberate, documented, tested):
- 1-D audio (S,) is treated as a batch of one; (B, channels, S) is down-mixed to mono by averaging channels;
- a ``sample_rate`` other than the codec's is resampled (polyphase, ``duet.audio.resample``);
- each item is zero-padded at the end to a whole number of frames; ``lengths`` records the true sizes.
Rejected with :class:`DuetError`: empty audio, NaN/inf samples, more than 3 dimensions, codes of the wrong shape
or outside the alphabet. Silence is valid input (it encodes to the codes of silence).
"""

from __future__ import annotations

import numpy as np
import torch

from duet.audio import resample
from duet.errors import DuetError


def prepare_audio(audio: torch.Tensor | np.ndarray, lengths: torch.Tensor | None, sample_rate: int | None,
                  codec_rate: int, samples_per_frame: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Any supported audio -> (float32 (B, S) padded to whole frames, valid samples (B,) at ``codec_rate``)."""
    x = torch.as_tensor(audio)
    if not (x.is_floating_point() or x.dtype in (torch.int16, torch.int32)):
        raise DuetError(f"audio must be float or int16/int32 PCM, got {x.dtype}")
    if x.dtype == torch.int16:
        x = x.float() / 32768.0
    elif x.dtype == torch.int32:
        x = x.float() / 2147483648.0
    x = x.float()
    if x.dim() == 1:
        x = x.unsqueeze(0)  # (1, S)
    elif x.dim() == 3:
        x = x.mean(dim=1)  # (B, channels, S) -> (B, S): documented down-mix
    elif x.dim() != 2:
        raise DuetError(f"audio must be (S,), (B, S) or (B, channels, S), got shape {tuple(x.shape)}")
    if x.shape[-1] == 0 or x.shape[0] == 0:
        raise DuetError(f"audio is empty (shape {tuple(x.shape)})")
    if not torch.isfinite(x).all():
        raise DuetError("audio contains NaN or infinite samples")
    if lengths is None:
        lengths = torch.full((x.shape[0],), x.shape[-1], dtype=torch.long)
    lengths = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)
    if lengths.shape[0] != x.shape[0] or (lengths <= 0).any() or (lengths > x.shape[-1]).any():
        raise DuetError(f"lengths {lengths.tolist()} do not fit audio of shape {tuple(x.shape)}")
    if sample_rate is not None and sample_rate != codec_rate:
        items = [resample(x[i, : int(n)].numpy(), sample_rate, codec_rate) for i, n in enumerate(lengths)]
        lengths = torch.tensor([len(a) for a in items], dtype=torch.long)
        x = torch.zeros(len(items), int(lengths.max()))
        for i, a in enumerate(items):
            x[i, : len(a)] = torch.from_numpy(a)
    frames = -(-x.shape[-1] // samples_per_frame)  # ceil
    padded = torch.zeros(x.shape[0], frames * samples_per_frame)
    mask = torch.arange(x.shape[-1]) < lengths[:, None]
    padded[:, : x.shape[-1]] = x * mask  # zero the padding of shorter items: the encoder must not see garbage
    return padded, lengths


def check_codes(codes: torch.Tensor, codebook_sizes: tuple[int, ...]) -> torch.Tensor:
    """codes (B, K, T) or (K, T) integer -> (B, K, T) int64, or a DuetError naming what is wrong."""
    codes = torch.as_tensor(codes)
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise DuetError(f"codes must be integers, got {codes.dtype}")
    if codes.dim() == 2:
        codes = codes.unsqueeze(0)
    k = len(codebook_sizes)
    if codes.dim() != 3 or codes.shape[1] != k:
        raise DuetError(f"codes must be (B, {k}, T), got shape {tuple(codes.shape)}")
    if codes.shape[-1] == 0 or codes.shape[0] == 0:
        raise DuetError("codes are empty (0 frames)")
    sizes = torch.tensor(codebook_sizes).view(1, k, 1)
    if (codes < 0).any() or (codes >= sizes).any():
        raise DuetError(f"codes outside their alphabets {codebook_sizes}: range [{int(codes.min())}, "
                        f"{int(codes.max())}]")
    return codes.long()


def frame_lengths(lengths: torch.Tensor, samples_per_frame: int) -> torch.Tensor:
    """Valid samples (B,) -> valid frames (B,): a partly filled last frame counts."""
    return -(-lengths // samples_per_frame)
