"""Building blocks shared by duet's own codecs (``fsq_codec.py``, ``rvq_codec.py``).

Shape legend: B batch, S audio samples, F STFT (sub-)frames, T codec frames, D width, N n_fft, M mel bins.

- ``LogMel``: log-mel front end, centred (non-causal) or causal (each window ends where its hop ends).
- ``ConvNeXtBlock``: the Vocos flavour of ConvNeXt (Siuzdak, "Vocos", arXiv:2306.00814), optionally causal.
- ``ISTFTHead``: Vocos' head (log-magnitude + phase -> complex spectrum -> windowed overlap-add), with two frame
  layouts: ``same`` (Vocos' centred frames) and ``causal`` (frame j's window starts at sample j * hop, so a sample
  never depends on a later frame).
- ``CausalTransformer``: a few pre-norm blocks with causal attention, for the RVQ encoder's bottleneck.

Every conv here pads explicitly with zeros, so a block's receptive field (``left``/``right`` context in frames)
is exact; chunked decoding relies on that. The causal blocks also run chunk by chunk with a carried state
(``stream`` methods): a conv keeps its last k - 1 input frames (zeros before the first chunk, which is what the
causal zero padding reads), the iSTFT head keeps the N - hop samples of overlap-add that later windows still add
to. Chunks then give exactly the full forward's output, without re-reading any context. Chunks of several lengths
run as one batch right-padded to the longest, with each row's valid ``lengths``: a causal output never reads a
later (padded) input, and each row's carried state is taken at its own end (:func:`take_last`), so every row gets
what its own chunk alone would have given.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

# ---- mel filterbank -----------------------------------------------------------------------------------------------


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above (the librosa/HTK-free default)."""
    f = np.asarray(f, dtype=np.float64)
    mel = 3.0 * f / 200.0
    log_region = f >= 1000.0
    mel = np.where(log_region, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (math.log(6.4) / 27.0), mel)
    return mel


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f = 200.0 * m / 3.0
    return np.where(m >= 15.0, 1000.0 * np.exp((math.log(6.4) / 27.0) * (m - 15.0)), f)


def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0,
                   fmax: float | None = None) -> np.ndarray:
    """Triangular Slaney-normalised filters, (M, n_fft // 2 + 1) float32 (same maths as ``librosa.filters.mel``)."""
    fmax = sample_rate / 2 if fmax is None else fmax
    fft_freqs = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    mel_points = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(fmax), n_mels + 2))
    widths = np.diff(mel_points)
    ramps = mel_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_points[2:] - mel_points[:-2]))[:, None]  # Slaney: constant energy per filter
    return weights.astype(np.float32)


class LogMel(nn.Module):
    """audio (B, S) -> log-mel (B, M, S // hop). S must be a multiple of ``hop``.

    centred: frame j is centred on sample j * hop (zero padding, so any length works, even one hop);
    causal:  frame j's window ends at sample (j + 1) * hop, so frame j never sees a later sample.
    """

    def __init__(self, sample_rate: int, n_fft: int, hop: int, n_mels: int, causal: bool = False,
                 fmin: float = 0.0, fmax: float | None = None):
        super().__init__()
        self.n_fft, self.hop, self.causal = n_fft, hop, causal
        self.register_buffer("window", torch.hann_window(n_fft), persistent=False)
        fb = mel_filterbank(sample_rate, n_fft, n_mels, fmin, fmax)
        self.register_buffer("fb", torch.from_numpy(fb), persistent=False)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        frames = audio.shape[-1] // self.hop
        if self.causal:
            x = F.pad(audio, (self.n_fft - self.hop, 0))
        else:
            x = F.pad(audio, (self.n_fft // 2, self.n_fft // 2))
        spec = torch.stft(x, self.n_fft, self.hop, window=self.window, center=False,
                          return_complex=True).abs()  # (B, N/2+1, F')
        mel = torch.matmul(self.fb, spec[..., :frames])  # (B, M, F)
        return torch.log(mel.clamp(min=1e-5))


# ---- streaming helpers -----------------------------------------------------------------------------------------


def take_last(x: torch.Tensor, n: int, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """x (B, D, T) -> the n columns (B, D, n) that end each row: at T, or at row b's ``lengths[b]`` (the columns
    past it are padding); a row's end must be at least n."""
    if lengths is None:
        return x[..., x.shape[-1] - n :]
    index = lengths[:, None] - n + torch.arange(n, device=x.device)  # (B, n)
    return x.gather(-1, index[:, None, :].expand(-1, x.shape[1], -1))


# ---- ConvNeXt -----------------------------------------------------------------------------------------------------


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over D of a (B, D, T) tensor: per frame, so it adds no temporal context."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.transpose(1, 2)).transpose(1, 2)


class ConvNeXtBlock(nn.Module):
    """depthwise conv (k) -> LayerNorm -> Linear D->rD -> GELU -> Linear rD->D -> layer scale, residual.

    ``causal`` pads k-1 frames on the left only; otherwise (k-1)/2 on each side.
    """

    def __init__(self, dim: int, mlp_ratio: int = 3, kernel_size: int = 7, causal: bool = False,
                 layer_scale: float = 1e-1):
        super().__init__()
        if not causal and kernel_size % 2 == 0:
            raise ValueError("a centred ConvNeXt block needs an odd kernel size")
        self.left = kernel_size - 1 if causal else (kernel_size - 1) // 2
        self.right = 0 if causal else (kernel_size - 1) // 2
        self.dwconv = nn.Conv1d(dim, dim, kernel_size, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pw1 = nn.Linear(dim, mlp_ratio * dim)
        self.pw2 = nn.Linear(mlp_ratio * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, D, T) -> (B, D, T)
        return self._pointwise(x, self.dwconv(F.pad(x, (self.left, self.right))))

    def _pointwise(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Everything after the depthwise conv: x, h (B, D, T) -> (B, D, T)."""
        h = h.transpose(1, 2)  # (B, T, D)
        h = self.pw2(F.gelu(self.pw1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)

    def stream(self, x: torch.Tensor, past: torch.Tensor,
               lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal blocks only: chunk x (B, D, t), past (B, D, k - 1) -> (output (B, D, t), next past); ``lengths``
        (B,): each row's valid frames of a right-padded chunk (None: all t)."""
        if self.right:
            raise ValueError("only a causal ConvNeXt block runs chunk by chunk")
        window = torch.cat([past, x], dim=-1)  # (B, D, k - 1 + t)
        ends = None if lengths is None else lengths + self.left
        return self._pointwise(x, self.dwconv(window)), take_last(window, self.left, ends)

    def initial_past(self, batch: int) -> torch.Tensor:
        return self.dwconv.weight.new_zeros(batch, self.dwconv.in_channels, self.left)


class ConvNeXtStack(nn.Module):
    """n ConvNeXt blocks and a final LayerNorm; ``left``/``right`` = total receptive field in frames."""

    def __init__(self, dim: int, num_blocks: int, mlp_ratio: int = 3, kernel_size: int = 7, causal: bool = False):
        super().__init__()
        scale = 1.0 / max(num_blocks, 1)  # Vocos: layer scale 1 / num_layers keeps the residual sum bounded
        self.blocks = nn.ModuleList(
            [ConvNeXtBlock(dim, mlp_ratio, kernel_size, causal, layer_scale=scale) for _ in range(num_blocks)])
        self.norm = ChannelNorm(dim, eps=1e-6)
        self.left = sum(b.left for b in self.blocks)
        self.right = sum(b.right for b in self.blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, D, T)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)

    def stream(self, x: torch.Tensor, pasts: list[torch.Tensor],
               lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Causal stacks only: chunk x (B, D, t) and one past per block -> (output, next pasts); ``lengths`` as in
        ``ConvNeXtBlock.stream``."""
        nexts = []
        for block, past in zip(self.blocks, pasts, strict=True):
            x, past = block.stream(x, past, lengths)
            nexts.append(past)
        return self.norm(x), nexts

    def initial_pasts(self, batch: int) -> list[torch.Tensor]:
        return [block.initial_past(batch) for block in self.blocks]


class PaddedConv1d(nn.Conv1d):
    """Conv1d with explicit zero padding: centred, or causal (all k-1 frames on the left)."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, causal: bool = False):
        super().__init__(c_in, c_out, kernel_size)
        self.left = kernel_size - 1 if causal else (kernel_size - 1) // 2
        self.right = kernel_size - 1 - self.left

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (self.left, self.right)))

    def stream(self, x: torch.Tensor, past: torch.Tensor,
               lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal convs only: chunk x (B, C_in, t), past (B, C_in, k - 1) -> (output (B, C_out, t), next past);
        ``lengths`` (B,): each row's valid frames of a right-padded chunk (None: all t)."""
        if self.right:
            raise ValueError("only a causal conv runs chunk by chunk")
        window = torch.cat([past, x], dim=-1)  # (B, C_in, k - 1 + t)
        ends = None if lengths is None else lengths + self.left
        return super().forward(window), take_last(window, self.left, ends)

    def initial_past(self, batch: int) -> torch.Tensor:
        return self.weight.new_zeros(batch, self.in_channels, self.left)


def space_to_depth(x: torch.Tensor, factor: int) -> torch.Tensor:
    """(B, D, T * r) -> (B, D * r, T): the r sub-frames of a frame side by side (a lossless stride-r downsample)."""
    return rearrange(x, "b d (t r) -> b (d r) t", r=factor)


def depth_to_space(x: torch.Tensor, factor: int) -> torch.Tensor:
    """(B, D * r, T) -> (B, D, T * r): the inverse of :func:`space_to_depth`."""
    return rearrange(x, "b (d r) t -> b d (t r)", r=factor)


# ---- iSTFT head ---------------------------------------------------------------------------------------------------


def overlap_add(frames: torch.Tensor, hop: int, offset: int, length: int) -> torch.Tensor:
    """frames (B, F, N) already windowed -> (B, length); frame j starts at output sample j * hop - offset."""
    b, f, n = frames.shape
    total = (f - 1) * hop + n
    if offset + length > total:
        raise ValueError(f"overlap-add of {f} frames cannot cover {length} samples at offset {offset}")
    y = F.fold(frames.transpose(1, 2), output_size=(1, total), kernel_size=(1, n), stride=(1, hop))  # (B, 1, 1, S')
    return y.reshape(b, total)[:, offset : offset + length]


class ISTFTHead(nn.Module):
    """x (B, D, F) -> audio (B, F * hop) through a predicted complex spectrum per frame (Vocos §3).

    Layouts of frame j's synthesis window in output samples:
    - ``same``:   [j*hop - (N-hop)/2, j*hop + (N+hop)/2), Vocos' "same" padding (centred, non-causal);
    - ``causal``: [j*hop, j*hop + N), so output sample s only depends on frames j <= s / hop.
    The sum is divided by the steady-state window-square envelope (a constant: 1.5 for Hann at hop N/4), not by
    the exact envelope: the first and last N - hop samples of a sequence are then a short fade rather than a
    division by a near-zero envelope, and chunked decoding stays exact.
    """

    def __init__(self, dim: int, n_fft: int, hop: int, layout: str = "same"):
        super().__init__()
        if layout not in ("same", "causal"):
            raise ValueError(f"layout must be 'same' or 'causal', got {layout!r}")
        if n_fft % hop:
            raise ValueError("n_fft must be a multiple of hop")
        self.n_fft, self.hop, self.layout = n_fft, hop, layout
        self.offset = (n_fft - hop) // 2 if layout == "same" else 0
        self.proj = nn.Linear(dim, n_fft + 2)  # log-magnitude and phase of N/2 + 1 bins
        window = torch.hann_window(n_fft)
        self.register_buffer("window", window, persistent=False)
        envelope = (window**2).reshape(n_fft // hop, hop).sum(0).mean()  # steady-state sum of w^2 over overlaps
        self.envelope = float(envelope)

    def spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D, F) -> complex spectrum (B, F, N/2 + 1)."""
        h = self.proj(x.transpose(1, 2))  # (B, F, N + 2)
        log_mag, phase = h.chunk(2, dim=-1)
        # Vocos clips the magnitude at 1e2: exp() of an early-training outlier must not overflow fp16 exports.
        mag = torch.exp(log_mag).clamp(max=1e2)
        return torch.polar(mag, phase)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return overlap_add(self._frames(x), self.hop, self.offset, x.shape[-1] * self.hop) / self.envelope

    def _frames(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, D, F) -> windowed synthesis frames (B, F, N)."""
        return torch.fft.irfft(self.spectrum(x), n=self.n_fft, dim=-1) * self.window

    def stream(self, x: torch.Tensor, tail: torch.Tensor,
               lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Causal layout only: chunk x (B, D, f), tail (B, N - hop) -> (audio (B, f * hop), next tail).

        After frames [0, F) every sample before F * hop is final (a later window starts at or after it); the
        N - hop samples beyond it hold the partial sums that the next chunk's windows complete. ``lengths`` (B,):
        each row's valid frames of a right-padded chunk (None: all f); row b's audio is then its first
        ``lengths[b] * hop`` samples, and its padded frames add nothing to its tail."""
        if self.layout != "causal":
            raise ValueError("only the causal iSTFT layout runs chunk by chunk")
        f = x.shape[-1]
        frames = self._frames(x)  # (B, f, N)
        if lengths is not None:  # silence the padded frames: their windows would reach into the row's tail
            valid = torch.arange(f, device=x.device)[None, :] < lengths[:, None]  # (B, f)
            frames = frames * valid[..., None]
        y = overlap_add(frames, self.hop, 0, (f - 1) * self.hop + self.n_fft)  # (B, (f - 1) * hop + N)
        y = torch.cat([y[:, : tail.shape[-1]] + tail, y[:, tail.shape[-1] :]], dim=-1)
        done = f * self.hop
        if lengths is None:
            return y[:, :done] / self.envelope, y[:, done:]
        ends = lengths * self.hop + tail.shape[-1]  # each row's tail ends N - hop samples past its last frame's hop
        return y[:, :done] / self.envelope, take_last(y[:, None], tail.shape[-1], ends)[:, 0]

    def initial_tail(self, batch: int) -> torch.Tensor:
        return self.proj.weight.new_zeros(batch, self.n_fft - self.hop)

    @property
    def frames_left(self) -> int:
        """Earlier frames whose windows reach into a frame's own hop of output samples."""
        return math.ceil((self.n_fft - self.hop - self.offset) / self.hop)

    @property
    def frames_right(self) -> int:
        """Later frames whose windows reach back into a frame's own hop of output samples."""
        return math.ceil(self.offset / self.hop)


# ---- causal transformer -------------------------------------------------------------------------------------------


class CausalTransformerBlock(nn.Module):
    """Pre-norm block: causal multi-head self-attention, then a GELU MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D)
        q, k, v = rearrange(self.qkv(self.norm1(x)), "b t (three h e) -> three b h t e", three=3, h=self.heads)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D/H)
        x = x + self.out(rearrange(a, "b h t e -> b t (h e)"))
        return x + self.mlp(self.norm2(x))


class CausalTransformer(nn.Module):
    """(B, D, T) -> (B, D, T). No positional encoding: the causal convolutions before it already make each
    frame position-aware, and causal attention needs no absolute positions to stay well defined (NoPE)."""

    def __init__(self, dim: int, num_layers: int, heads: int):
        super().__init__()
        self.layers = nn.ModuleList([CausalTransformerBlock(dim, heads) for _ in range(num_layers)])
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.transpose(1, 2)  # (B, T, D)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h).transpose(1, 2)
