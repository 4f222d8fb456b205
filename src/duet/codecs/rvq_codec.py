"""duet-rvq: a Luna-Codec-shaped causal RVQ codec trained on duet's own corpus (Luna report §2.2, DESIGN §B).

Shape legend: B batch, S samples, F STFT sub-frames (``hop`` apart), T codec frames (``samples_per_frame`` apart),
D width, Q codebooks, M mel bins, H teacher width.

Interface numbers as Luna-Codec: 24 kHz, 960 samples per frame (25 Hz), Q = 8 residual codebooks x 2048 entries
(200 tokens/s, 2.2 kbps), quantiser dropout (variable bitrate: decode from the first q <= Q codebooks), causal
encoder and decoder, frame-synchronous streaming, optional semantic distillation of the first codebook.

  encoder (causal): causal log-mel (each window ends at its hop) -> causal conv -> causal ConvNeXt at the sub-frame
                    rate -> 4 sub-frames side by side -> causal ConvNeXt at the frame rate -> causal transformer
                    -> D_q -> ResidualVQ
  decoder (causal): quantised (B, D_q, T) -> causal conv -> causal ConvNeXt at the frame rate -> 4 sub-frames per
                    frame -> causal ConvNeXt -> iSTFT head, "causal" layout (a window starts at its own hop)

Divergences from Luna-Codec, for training on 2 CPU cores: a log-mel front end instead of strided waveform convs,
and a Vocos-style iSTFT head instead of a mirrored transposed-conv waveform decoder. The decoder is convolutional
only (no transformer), so its receptive field is finite (``decoder_context`` frames of history) and streaming is
an exact re-decode of each new frame with that history (``duet.codecs.streaming``): frame t's audio is final as
soon as frame t arrives, and equals the full decode. Only the encoder has the causal transformer.

Semantic distillation (SpeechTokenizer, Zhang et al., arXiv:2308.16692 §3.2): the first codebook's quantised
vectors (straight-through, so the gradient reaches the encoder) are projected to the teacher's width and pulled
towards the teacher's frame features by 1 - cosine similarity. The teacher (``duet.codecs.semantic``) only exists
during training; the projection is not shipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from duet.codecs.fsq_codec import CodecForward
from duet.codecs.modules import (
    CausalTransformer,
    ConvNeXtStack,
    ISTFTHead,
    LogMel,
    PaddedConv1d,
    depth_to_space,
    space_to_depth,
)
from duet.codecs.rvq import ResidualVQ, RVQConfig
from duet.codecs.trained import TrainedCodec
from duet.errors import DuetError


@dataclass(frozen=True)
class RVQCodecConfig:
    sample_rate: int = 24_000
    samples_per_frame: int = 960  # 25 Hz
    n_fft: int = 960  # analysis and synthesis window (40 ms)
    hop: int = 240  # 4 sub-frames per codec frame
    n_mels: int = 80
    enc_sub_dim: int = 128
    enc_sub_blocks: int = 2
    enc_dim: int = 256
    enc_blocks: int = 3
    enc_transformer_layers: int = 2
    enc_heads: int = 4
    dec_dim: int = 384
    dec_blocks: int = 4
    dec_sub_dim: int = 256
    dec_sub_blocks: int = 4
    mlp_ratio: int = 3
    kernel_size: int = 7
    # Codebook width 128 (RVQConfig's default is 256): halves the shipped codebooks, plenty at 25 Hz.
    # Dead-code threshold 0.02 (default 0.5): a batch of 16 one-second crops holds 400 frames, so a uniformly used
    # 2048-entry codebook averages 0.2 assignments per code and step; at 0.5 every code would count as dead and be
    # re-seeded every ~70 steps. At 0.02 a code is re-seeded after ~390 steps without use.
    rvq: RVQConfig = field(default_factory=lambda: RVQConfig(dim=128, num_quantizers=8, codebook_size=2048,
                                                             dead_code_threshold=0.02))

    @property
    def sub_frames(self) -> int:
        return self.samples_per_frame // self.hop

    def __post_init__(self):
        if self.samples_per_frame % self.hop:
            raise ValueError("samples_per_frame must be a multiple of hop")


class RVQEncoder(nn.Module):
    def __init__(self, cfg: RVQCodecConfig):
        super().__init__()
        self.cfg = cfg
        self.mel = LogMel(cfg.sample_rate, cfg.n_fft, cfg.hop, cfg.n_mels, causal=True)
        self.conv_in = PaddedConv1d(cfg.n_mels, cfg.enc_sub_dim, cfg.kernel_size, causal=True)
        self.sub = ConvNeXtStack(cfg.enc_sub_dim, cfg.enc_sub_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=True)
        self.down = nn.Conv1d(cfg.enc_sub_dim * cfg.sub_frames, cfg.enc_dim, 1)
        self.frames = ConvNeXtStack(cfg.enc_dim, cfg.enc_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=True)
        self.transformer = CausalTransformer(cfg.enc_dim, cfg.enc_transformer_layers, cfg.enc_heads)
        self.to_latent = nn.Conv1d(cfg.enc_dim, cfg.rvq.dim, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """audio (B, T * samples_per_frame) -> latent (B, D_q, T); frame t sees samples < (t + 1) * spf only."""
        h = self.sub(self.conv_in(self.mel(audio)))  # (B, D_sub, F)
        h = self.frames(self.down(space_to_depth(h, self.cfg.sub_frames)))  # (B, D, T)
        return self.to_latent(self.transformer(h))  # (B, D_q, T)


class RVQDecoder(nn.Module):
    def __init__(self, cfg: RVQCodecConfig):
        super().__init__()
        self.cfg = cfg
        self.conv_in = PaddedConv1d(cfg.rvq.dim, cfg.dec_dim, cfg.kernel_size, causal=True)
        self.frames = ConvNeXtStack(cfg.dec_dim, cfg.dec_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=True)
        self.up = nn.Conv1d(cfg.dec_dim, cfg.dec_sub_dim * cfg.sub_frames, 1)
        self.sub = ConvNeXtStack(cfg.dec_sub_dim, cfg.dec_sub_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=True)
        self.head = ISTFTHead(cfg.dec_sub_dim, cfg.n_fft, cfg.hop, layout="causal")

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """quantised (B, D_q, T) -> audio (B, T * samples_per_frame)."""
        h = self.frames(self.conv_in(z))  # (B, D, T)
        h = self.sub(depth_to_space(self.up(h), self.cfg.sub_frames))  # (B, D_sub, F)
        return self.head(h)

    @property
    def context(self) -> int:
        """Earlier codec frames that one frame's audio depends on (no later ones: causal)."""
        sub_left = self.sub.left + self.head.frames_left
        return self.conv_in.left + self.frames.left + math.ceil(sub_left / self.cfg.sub_frames)


class RVQCodec(TrainedCodec):
    """The trainable duet-rvq model and its ``duet.codecs.base.Codec`` interface; codes (B, q, T), q <= Q codebooks.
    Its decoder is causal, so the stream decoder is frame-synchronous: each pushed frame's 960 samples come back
    at once, equal to the full decode."""

    name = "duet-rvq"

    def __init__(self, cfg: RVQCodecConfig = RVQCodecConfig()):
        super().__init__(cfg)
        self.encoder = RVQEncoder(cfg)
        self.quantizer = ResidualVQ(cfg.rvq)
        self.decoder = RVQDecoder(cfg)
        self.semantic_proj: nn.Linear | None = None

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return self.quantizer.codebook_sizes

    @property
    def decoder_context(self) -> tuple[int, int]:
        return self.decoder.context, 0

    def check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, q, T) with 1 <= q <= Q (fewer codebooks = lower bitrate) -> int64, or a DuetError."""
        codes = torch.as_tensor(codes)
        if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
            raise DuetError(f"codes must be integers, got {codes.dtype}")
        if codes.dim() == 2:
            codes = codes.unsqueeze(0)
        q_max, k = self.cfg.rvq.num_quantizers, self.cfg.rvq.codebook_size
        if codes.dim() != 3 or not 1 <= codes.shape[1] <= q_max:
            raise DuetError(f"codes must be (B, q <= {q_max}, T), got shape {tuple(codes.shape)}")
        if codes.shape[0] == 0 or codes.shape[-1] == 0:
            raise DuetError("codes are empty (0 frames)")
        if (codes < 0).any() or (codes >= k).any():
            raise DuetError(f"codes outside [0, {k}): range [{int(codes.min())}, {int(codes.max())}]")
        return codes.long()

    def _quantize(self, latent: torch.Tensor) -> torch.Tensor:
        return self.quantizer.encode(latent)

    # ---- training -------------------------------------------------------------------------------------------------
    def enable_semantic(self, teacher_dim: int) -> None:
        """Add the projection first-codebook vectors -> teacher features (training only)."""
        self.semantic_proj = nn.Linear(self.cfg.rvq.dim, teacher_dim)

    def forward(self, audio: torch.Tensor, semantic_target: torch.Tensor | None = None) -> CodecForward:
        """audio (B, T * spf) -> reconstruction; ``semantic_target`` (B, T, H) adds the distillation loss."""
        latent = self.encoder(audio)  # (B, D_q, T)
        out = self.quantizer(latent)
        losses = {"commit": out.commit_loss}
        if semantic_target is not None:
            if self.semantic_proj is None:
                raise DuetError("semantic_target given but enable_semantic() was not called")
            first = self.quantizer.quantizers[0].lookup(out.codes[:, 0])  # (B, T, D_q)
            first = latent.transpose(1, 2) + (first - latent.transpose(1, 2)).detach()  # straight-through
            pred = self.semantic_proj(first)  # (B, T, H)
            losses["semantic"] = (1 - F.cosine_similarity(pred, semantic_target, dim=-1)).mean()
        return CodecForward(audio=self.decoder(out.quantized), codes=out.codes, losses=losses)
