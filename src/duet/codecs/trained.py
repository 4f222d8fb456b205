"""What duet's own codecs (``duet-fsq``, ``duet-rvq``) share: the ``Codec`` protocol around encoder -> quantiser ->
decoder.

A subclass builds ``encoder``, ``quantizer`` and ``decoder`` and says how latents become codes (``_quantize``),
how codes are checked (``check_codes``) and how far the decoder reaches (``decoder_context``); encode, decode and
the exact chunked stream decoder (``duet.codecs.streaming``) are the same for both.

Shape legend: B batch, S samples, D latent channels, K code streams, T frames.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from duet.codecs.base import DecodeResult, EncodeResult
from duet.codecs.inputs import frame_lengths, prepare_audio
from duet.codecs.streaming import ContextStreamDecoder, StatefulStreamDecoder


class TrainedCodec(nn.Module):
    """Base of the trainable codecs; ``cfg`` has ``sample_rate`` and ``samples_per_frame``."""

    encoder: nn.Module  # audio (B, S) -> latent (B, D, T)
    quantizer: nn.Module
    decoder: nn.Module  # dequantised (B, D, T) -> audio (B, T * samples_per_frame)

    def __init__(self, cfg) -> None:
        super().__init__()
        self.cfg = cfg
        self.sample_rate = cfg.sample_rate
        self.samples_per_frame = cfg.samples_per_frame

    # ---- what a subclass says -------------------------------------------------------------------------------------
    def _quantize(self, latent: torch.Tensor) -> torch.Tensor:
        """latent (B, D, T) -> codes (B, K, T)."""
        raise NotImplementedError

    def check_codes(self, codes: torch.Tensor) -> torch.Tensor:
        """codes as a user gave them -> (B, K, T) int64, or a DuetError saying what is wrong."""
        raise NotImplementedError

    @property
    def decoder_context(self) -> tuple[int, int]:
        """(left, right) frames that one frame's audio depends on."""
        raise NotImplementedError

    # ---- the Codec protocol ---------------------------------------------------------------------------------------
    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @torch.inference_mode()
    def encode(self, audio: torch.Tensor | np.ndarray, lengths: torch.Tensor | None = None,
               sample_rate: int | None = None) -> EncodeResult:
        """audio (B, S), (S,) or (B, channels, S) -> codes (B, K, T); see ``duet.codecs.inputs``."""
        x, lengths = prepare_audio(audio, lengths, sample_rate, self.sample_rate, self.samples_per_frame)
        return EncodeResult(codes=self._quantize(self.encoder(x)), lengths=frame_lengths(lengths,
                                                                                          self.samples_per_frame))

    @torch.inference_mode()
    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> DecodeResult:
        """codes (B, K, T) -> audio (B, T * samples_per_frame); ``lengths`` in frames."""
        codes = self.check_codes(codes)
        audio = self._decode_codes(codes).clamp(-1.0, 1.0)
        if lengths is None:
            lengths = torch.full((codes.shape[0],), codes.shape[-1], dtype=torch.long)
        return DecodeResult(audio=audio, lengths=torch.as_tensor(lengths).long() * self.samples_per_frame)

    @property
    def carries_decoder_state(self) -> bool:
        """Whether the decoder streams chunk by chunk with a carried state (a causal decoder that supports it)."""
        return False

    # What one batched call of a stateful decoder costs beyond its frames, in frame-rows of decoding (push_many pads
    # chunks of other lengths into one call when that is cheaper): duet-fsq-causal on one CPU thread took 6.1, 28.4
    # and 107 ms for 1, 8 and 32 chunks of 16 frames (benchmarks/results/batch_scaling.md), about 2.5 ms a call and
    # 0.2 ms a frame-row. ``benchmarks/codec_batching.py`` fits it again on other hardware.
    stream_call_frames: float = 12.0

    def stream_decoder(self) -> ContextStreamDecoder | StatefulStreamDecoder:
        """Chunked decoding equal to ``decode``: a decoder that carries its state decodes each chunk once; others
        re-decode context (a causal one is frame-synchronous there too: right context 0)."""
        if self.carries_decoder_state:
            @torch.inference_mode()
            def chunk(codes: torch.Tensor, state, lengths: torch.Tensor | None = None):
                audio, state = self.decoder.stream(self.quantizer.decode(codes), state, lengths)
                return audio.clamp(-1.0, 1.0), state

            return StatefulStreamDecoder(chunk, self.decoder.initial_state, check=self.check_codes,
                                         batch_key=id(self), call_frames=self.stream_call_frames)
        left, right = self.decoder_context

        @torch.inference_mode()
        def window(codes: torch.Tensor) -> torch.Tensor:
            return self._decode_codes(codes).clamp(-1.0, 1.0)

        return ContextStreamDecoder(window, left, right, self.samples_per_frame, check=self.check_codes,
                                    batch_key=id(self))

    def _decode_codes(self, codes: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.quantizer.decode(codes))
