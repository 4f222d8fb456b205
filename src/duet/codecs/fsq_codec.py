"""duet-fsq: a NanoCodec-shaped codec trained on duet's own corpus, so Gepard's tokens can be spoken without NeMo.

Shape legend: B batch, S samples, F STFT sub-frames (``hop`` apart), T codec frames (``samples_per_frame`` apart),
C FSQ channels (32), G packed groups (8), D width, M mel bins.

Same interface numbers as NVIDIA NanoCodec 22 kHz (DESIGN §A): 22,050 Hz, 1024 samples per frame (21.53 frames/s),
a 32-channel latent quantised by GroupFSQ 8 x [8, 7, 6, 6] -> 8 packed tokens of 2016 per frame (1.89 kbps).
The network differs from NanoCodec's (a HiFi-GAN-style waveform decoder, far too slow to train on 2 CPU cores):

  encoder: log-mel (B, M, F) -> conv -> ConvNeXt at the sub-frame rate -> 4 sub-frames side by side -> ConvNeXt at
           the frame rate -> C = 32 -> GroupFSQ
  decoder: dequantised (B, C, T) -> conv -> ConvNeXt at the frame rate -> split each frame into 4 sub-frames ->
           ConvNeXt at the sub-frame rate -> Vocos iSTFT head (log-magnitude + phase, "same" layout)

which is the probe of DESIGN §D scaled up. Both halves are non-causal with a finite receptive field; chunked
decoding (``stream_decoder``) re-decodes each chunk with ``decoder_context`` frames on both sides and equals the
full decode up to float rounding (``duet.codecs.streaming``). Its latency is ``decoder_context[1]`` frames.

``causal_decoder`` makes every decoder conv causal and the iSTFT head's windows start at their frame (the same
weights' shapes, so it is fine-tuned from a non-causal duet-fsq with the encoder and quantiser frozen: the codes
stay valid). The audio of frame t then depends on no later frame, and streaming carries each conv's last inputs
and the head's overlap-add tail from chunk to chunk (``stream``) instead of re-decoding context: a chunk of n
frames costs n frames and gives n frames of audio at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.codecs.inputs import check_codes
from duet.codecs.modules import ConvNeXtStack, ISTFTHead, LogMel, PaddedConv1d, depth_to_space, space_to_depth
from duet.codecs.trained import TrainedCodec


@dataclass(frozen=True)
class FSQCodecConfig:
    sample_rate: int = 22_050
    samples_per_frame: int = 1024  # NanoCodec's hop: 21.53 frames/s
    n_fft: int = 1024  # analysis (mel) and synthesis (iSTFT) window
    hop: int = 256  # STFT hop: samples_per_frame // hop = 4 sub-frames per codec frame
    n_mels: int = 80
    enc_sub_dim: int = 128
    enc_sub_blocks: int = 2
    enc_dim: int = 256
    enc_blocks: int = 4
    dec_dim: int = 384
    dec_blocks: int = 4
    dec_sub_dim: int = 256
    dec_sub_blocks: int = 4
    mlp_ratio: int = 3
    kernel_size: int = 7
    fsq: FSQConfig = field(default_factory=FSQConfig)
    causal_decoder: bool = False  # decoder sees no later frame; streams with carried state

    @property
    def sub_frames(self) -> int:
        return self.samples_per_frame // self.hop

    def __post_init__(self):
        if self.samples_per_frame % self.hop:
            raise ValueError("samples_per_frame must be a multiple of hop")


@dataclass(frozen=True)
class CodecForward:
    """What one training forward pass returns."""

    audio: torch.Tensor  # (B, S) reconstruction
    codes: torch.Tensor  # (B, K, T)
    losses: dict[str, torch.Tensor]  # auxiliary losses of the bottleneck (none for FSQ)


class FSQEncoder(nn.Module):
    def __init__(self, cfg: FSQCodecConfig):
        super().__init__()
        self.cfg = cfg
        self.mel = LogMel(cfg.sample_rate, cfg.n_fft, cfg.hop, cfg.n_mels)
        self.conv_in = PaddedConv1d(cfg.n_mels, cfg.enc_sub_dim, cfg.kernel_size)
        self.sub = ConvNeXtStack(cfg.enc_sub_dim, cfg.enc_sub_blocks, cfg.mlp_ratio, cfg.kernel_size)
        self.down = nn.Conv1d(cfg.enc_sub_dim * cfg.sub_frames, cfg.enc_dim, 1)
        self.frames = ConvNeXtStack(cfg.enc_dim, cfg.enc_blocks, cfg.mlp_ratio, cfg.kernel_size)
        self.to_latent = nn.Conv1d(cfg.enc_dim, cfg.fsq.num_channels, 1)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        """audio (B, T * samples_per_frame) -> latent (B, C, T), before quantisation."""
        h = self.sub(self.conv_in(self.mel(audio)))  # (B, D_sub, F)
        h = self.frames(self.down(space_to_depth(h, self.cfg.sub_frames)))  # (B, D, T)
        return self.to_latent(h)  # (B, C, T)


@dataclass
class DecoderState:
    """What a causal decoder carries between chunks of one batch of streams (zeros before the first chunk)."""

    conv_in: torch.Tensor  # (B, C, k - 1) last dequantised frames
    frames: list[torch.Tensor]  # per frame-rate block: (B, D, k - 1)
    sub: list[torch.Tensor]  # per sub-frame block: (B, D_sub, k - 1)
    tail: torch.Tensor  # (B, N - hop) overlap-add partial sums

    @staticmethod
    def cat(states: list["DecoderState"]) -> "DecoderState":
        """Many streams' states as one batch (rows in order)."""
        return DecoderState(torch.cat([s.conv_in for s in states]),
                            [torch.cat(parts) for parts in zip(*(s.frames for s in states))],
                            [torch.cat(parts) for parts in zip(*(s.sub for s in states))],
                            torch.cat([s.tail for s in states]))

    def split(self, sizes: list[int]) -> list["DecoderState"]:
        """The inverse of :meth:`cat`: one state per group of ``sizes`` rows."""
        pieces = [self.conv_in.split(sizes), [p.split(sizes) for p in self.frames],
                  [p.split(sizes) for p in self.sub], self.tail.split(sizes)]
        return [DecoderState(pieces[0][i], [p[i] for p in pieces[1]], [p[i] for p in pieces[2]], pieces[3][i])
                for i in range(len(sizes))]


class FSQDecoder(nn.Module):
    def __init__(self, cfg: FSQCodecConfig):
        super().__init__()
        self.cfg = cfg
        causal = cfg.causal_decoder
        self.conv_in = PaddedConv1d(cfg.fsq.num_channels, cfg.dec_dim, cfg.kernel_size, causal=causal)
        self.frames = ConvNeXtStack(cfg.dec_dim, cfg.dec_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=causal)
        self.up = nn.Conv1d(cfg.dec_dim, cfg.dec_sub_dim * cfg.sub_frames, 1)
        self.sub = ConvNeXtStack(cfg.dec_sub_dim, cfg.dec_sub_blocks, cfg.mlp_ratio, cfg.kernel_size, causal=causal)
        self.head = ISTFTHead(cfg.dec_sub_dim, cfg.n_fft, cfg.hop, layout="causal" if causal else "same")

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """dequantised (B, C, T) -> audio (B, T * samples_per_frame)."""
        h = self.frames(self.conv_in(z))  # (B, D, T)
        h = self.sub(depth_to_space(self.up(h), self.cfg.sub_frames))  # (B, D_sub, F)
        return self.head(h)

    def initial_state(self, batch: int) -> DecoderState:
        if not self.cfg.causal_decoder:
            raise ValueError("only a causal decoder carries a streaming state")
        return DecoderState(self.conv_in.initial_past(batch), self.frames.initial_pasts(batch),
                            self.sub.initial_pasts(batch), self.head.initial_tail(batch))

    def stream(self, z: torch.Tensor, state: DecoderState,
               lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, DecoderState]:
        """Causal decoders only: chunk (B, C, t) -> (its audio (B, t * samples_per_frame), next state); the
        chunks' audio joined equals ``forward`` of the whole sequence. ``lengths`` (B,): each row's valid frames
        of a right-padded chunk (None: all t); row b's audio is then its first ``lengths[b] * samples_per_frame``
        samples, and its next state is the one its valid frames alone leave."""
        r = self.cfg.sub_frames
        sub_lengths = None if lengths is None else lengths * r
        h, conv_in = self.conv_in.stream(z, state.conv_in, lengths)
        h, frames = self.frames.stream(h, state.frames, lengths)  # (B, D, t)
        h, sub = self.sub.stream(depth_to_space(self.up(h), r), state.sub, sub_lengths)  # (B, D_sub, 4t)
        audio, tail = self.head.stream(h, state.tail, sub_lengths)  # (B, 4t * hop)
        return audio, DecoderState(conv_in, frames, sub, tail)

    @property
    def context(self) -> tuple[int, int]:
        """(left, right) codec frames that the audio of one frame depends on."""
        sub_left = self.sub.left + self.head.frames_left
        sub_right = self.sub.right + self.head.frames_right
        r = self.cfg.sub_frames
        left = self.conv_in.left + self.frames.left + math.ceil(sub_left / r)
        right = self.conv_in.right + self.frames.right + math.ceil(sub_right / r)
        return left, right


class FSQCodec(TrainedCodec):
    """The trainable duet-fsq model and its ``duet.codecs.base.Codec`` interface (``encode``/``decode``); codes are
    the 8 packed GroupFSQ groups (B, 8, T)."""

    name = "duet-fsq"

    def __init__(self, cfg: FSQCodecConfig = FSQCodecConfig()):
        super().__init__(cfg)
        self.encoder = FSQEncoder(cfg)
        self.quantizer = GroupFSQ(cfg.fsq)
        self.decoder = FSQDecoder(cfg)

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return (self.cfg.fsq.codebook_size,) * self.cfg.fsq.num_groups

    @property
    def decoder_context(self) -> tuple[int, int]:
        return self.decoder.context

    @property
    def carries_decoder_state(self) -> bool:
        return self.cfg.causal_decoder

    def check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        return check_codes(codes, self.codebook_sizes)

    def _quantize(self, latent: torch.Tensor) -> torch.Tensor:
        return self.quantizer(latent)[1]

    # ---- training -------------------------------------------------------------------------------------------------
    def forward(self, audio: torch.Tensor) -> CodecForward:
        """audio (B, T * samples_per_frame) -> reconstruction through the straight-through quantiser."""
        dequantised, codes = self.quantizer(self.encoder(audio))
        return CodecForward(audio=self.decoder(dequantised), codes=codes, losses={})
