"""NVIDIA NeMo NanoCodec behind duet's `Codec` protocol (the codec of Gepard, DESIGN.md §A).

NanoCodec 22 kHz (1.89 kbps): 22,050 Hz, 1024 samples per frame (21.5 frames/s), GroupFSQ 8 groups x [8, 7, 6, 6]
(2016 codes per group), causal HiFi-GAN decoder. This module wraps a real NeMo `AudioCodecModel` (restored from a
`.nemo` checkpoint, or already built); it reimplements nothing but the quantiser index views, which come from duet's
bit-exact `GroupFSQ`. NeMo is the optional extra `duet[nemo]`, imported only when a codec is built.

Shape legend: B batch, S audio samples, T frames, K packed code streams (= G FSQ groups, 8), C FSQ channels (32).

Streaming: NeMo decodes a whole sequence at once and its decoders are not frame-synchronous in general (a frame's
samples depend on neighbouring frames), so `NanoCodecStreamDecoder` re-decodes a window of `context` earlier frames
with each chunk and keeps only the new samples (see its docstring for what that guarantees).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.utils import parametrize

from duet.codecs.base import DecodeResult, EncodeResult
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError, MissingDependency

if TYPE_CHECKING:  # pragma: no cover - typing only, NeMo stays optional
    from nemo.collections.tts.models import AudioCodecModel


def _audio_codec_model_class() -> type:
    """NeMo's `AudioCodecModel`, or a one-line `MissingDependency` naming the extra that installs it."""
    try:
        from nemo.collections.tts.models import AudioCodecModel
    except ModuleNotFoundError as err:
        raise MissingDependency("NVIDIA NeMo", "pip install 'duet[nemo]'") from err
    return AudioCodecModel


class NanoCodec:
    """A NeMo `AudioCodecModel` with a GroupFSQ quantiser, seen through duet's `Codec` protocol.

    Construct from a built model (``NanoCodec(model)``) or a checkpoint (``NanoCodec.from_nemo(path)``). The model
    is put in eval mode; encode and decode run without gradients and return tensors on the caller's device.
    ``expect`` is the quantiser duet's models are built for: a checkpoint with another one is refused, because
    `unfold` / `fold` and the 32 per-channel heads would silently mean something else.
    """

    def __init__(self, model: "AudioCodecModel", expect: FSQConfig = FSQConfig()):
        model_class = _audio_codec_model_class()
        if not isinstance(model, model_class):
            raise DuetError(f"NanoCodec wraps a NeMo AudioCodecModel, got {type(model).__name__}")
        _check_quantizer(model, expect)
        output_rate = int(getattr(model, "output_sample_rate", model.sample_rate))
        if output_rate != int(model.sample_rate):
            # The Codec protocol has one rate for reading and writing audio.
            raise DuetError(f"NeMo codec reads {model.sample_rate} Hz but writes {output_rate} Hz; "
                            "duet needs one sample rate")
        self.model = model.eval()
        self.sample_rate = int(model.sample_rate)
        self.samples_per_frame = int(model.samples_per_frame)
        self.fsq = GroupFSQ(expect)

    @classmethod
    def from_nemo(cls, path: str | Path, map_location: str = "cpu", expect: FSQConfig = FSQConfig(), *,
                  trust: bool = False) -> "NanoCodec":
        """Restore a `.nemo` checkpoint (for example NanoCodec 22 kHz 1.89 kbps 21.5 fps) and wrap it.

        A `.nemo` file is a tar whose weights NeMo's ``restore_from`` reads with pickle, which can run any code the
        file carries: duet refuses it unless the caller says ``trust=True`` (NVIDIA's own release, a file you
        made). Everything else duet loads is safetensors + JSON.
        """
        if not trust:
            raise DuetError(f"{Path(path).name}: NeMo unpickles .nemo checkpoints, which can run code; "
                            "pass trust=True only for a file from a source you trust")
        model_class = _audio_codec_model_class()
        path = Path(path)
        if not path.is_file():
            raise DuetError(f"NanoCodec checkpoint not found: {path}")
        model = model_class.restore_from(str(path), map_location=torch.device(map_location))
        return cls(model, expect=expect)

    # ---- Codec protocol -------------------------------------------------------------------------------------------
    @property
    def frame_rate(self) -> float:
        return self.sample_rate / self.samples_per_frame

    @property
    def codebook_sizes(self) -> tuple[int, ...]:
        return (self.fsq.config.codebook_size,) * self.fsq.config.num_groups

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def encode(self, audio: torch.Tensor, lengths: torch.Tensor | None = None) -> EncodeResult:
        """audio (B, S) at `sample_rate` -> codes (B, K, T) int64, T = ceil(S / samples_per_frame).

        NeMo zero-pads each item to whole frames; frames past an item's length are masked to code 0.
        """
        if audio.dim() != 2:
            raise DuetError(f"expected audio (B, S), got {tuple(audio.shape)}")
        lengths = _lengths_or_full(lengths, audio, "samples")
        with torch.no_grad(), parametrize.cached():  # weight-norm weights computed once per call, not per use
            tokens, tokens_len = self.model.encode(audio=audio.to(self.device, self.model.dtype),
                                                   audio_len=lengths.to(self.device))  # (B, K, T) int32
        return EncodeResult(codes=tokens.long().to(audio.device), lengths=tokens_len.long().to(audio.device))

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> DecodeResult:
        """codes (B, K, T) -> audio (B, T * samples_per_frame) float32; samples past ``lengths`` frames are 0."""
        self._check_codes(codes)
        lengths = _lengths_or_full(lengths, codes, "frames")
        with torch.no_grad(), parametrize.cached():
            audio, audio_len = self.model.decode(tokens=codes.to(self.device), tokens_len=lengths.to(self.device))
        return DecodeResult(audio=audio.float().to(codes.device), lengths=audio_len.long().to(codes.device))

    def stream_decoder(self, context: int | None = None, lookahead: int = 0,
                       crossfade: int = 0) -> "NanoCodecStreamDecoder":
        """A chunked decoder; ``context`` defaults to `receptive_field()` (exact for the causal decoder)."""
        if context is None:
            context = self.receptive_field()
        return NanoCodecStreamDecoder(self, context=context, lookahead=lookahead, crossfade=crossfade)

    # ---- FSQ views (duet's GroupFSQ, bit-exact with the model's quantiser) ----------------------------------------
    def unfold(self, codes: torch.Tensor) -> torch.Tensor:
        """packed codes (B, K, T) -> channel codes (B, C, T), what Gepard's 32 heads predict."""
        return self.fsq.unfold(codes)

    def fold(self, channels: torch.Tensor) -> torch.Tensor:
        """channel codes (B, C, T) -> packed codes (B, K, T); the inverse of `unfold`."""
        return self.fsq.fold(channels)

    # ---- streaming support ----------------------------------------------------------------------------------------
    def receptive_field(self) -> int:
        """Earlier frames the decoder reads for a frame's samples (NanoCodec 22 kHz: 25, about 1.2 s).

        Computed from the layers of NeMo's `CausalHiFiGANDecoder`; other decoders have no such bound here, so their
        stream decoders need an explicit ``context``.
        """
        from nemo.collections.tts.modules.audio_codec_modules import CausalHiFiGANDecoder

        decoder = self.model.audio_decoder
        if not isinstance(decoder, CausalHiFiGANDecoder):
            raise DuetError(f"no receptive field known for {type(decoder).__name__}: pass context= explicitly")
        return causal_hifigan_context(decoder)

    def _check_codes(self, codes: torch.Tensor) -> None:
        groups, size = self.fsq.config.num_groups, self.fsq.config.codebook_size
        if codes.dim() != 3 or codes.shape[1] != groups:
            raise DuetError(f"expected codes (B, {groups}, T), got {tuple(codes.shape)}")
        if codes.is_floating_point():
            raise DuetError(f"codes must be integers, got {codes.dtype}")
        if codes.numel() and (codes.min() < 0 or codes.max() >= size):
            raise DuetError(f"codes must lie in [0, {size}), got [{int(codes.min())}, {int(codes.max())}]")


class NanoCodecStreamDecoder:
    """Chunked decode by re-decoding a window of left context; exact when the context covers the receptive field.

    Each `push` decodes the frames whose right context has arrived (all but the last ``lookahead``) together with
    the ``context`` frames before them, and keeps only the new samples. A chunk of n frames costs a decode of
    n + context + lookahead frames.

    What it guarantees (``tests/codecs/test_nanocodec.py`` checks each):

    - Length: the pushes and the `flush` together return exactly T * samples_per_frame samples for T frames, for
      any chunking; a frame's samples come out once its ``lookahead`` later frames have arrived (at `flush` for the
      last ones).
    - Exactness: NeMo's `CausalHiFiGANDecoder` (NanoCodec) is causal; a frame's samples depend on that frame and
      on at most `NanoCodec.receptive_field()` frames before it. With ``context`` at least that (the default) and
      ``crossfade`` 0, the stream equals `NanoCodec.decode` of all frames up to float rounding. The first window
      starts at frame 0 whatever the context, so the frames of the first push are always exact.
    - Otherwise it is approximate: with less context, the first samples of each later chunk are computed from a
      window whose zero-padded left edge lies inside their receptive field, so they differ from a full decode and
      can leave an audible seam. ``crossfade`` (samples, at most context * samples_per_frame) holds back the last
      samples of each chunk and blends them linearly with the next window's decode of the same samples, which hides
      the seam; it delays output by that many samples. For a non-causal NeMo decoder, set ``lookahead`` to the
      frames it reads ahead; the result stays approximate.

    All items of a batch advance together; decode items of different lengths one by one or trim afterwards.
    """

    def __init__(self, codec: NanoCodec, context: int, lookahead: int = 0, crossfade: int = 0):
        if context < 0 or lookahead < 0:
            raise DuetError(f"context and lookahead must be >= 0, got {context} and {lookahead}")
        if not 0 <= crossfade <= context * codec.samples_per_frame:
            raise DuetError(f"crossfade must lie in [0, context * samples_per_frame] = "
                            f"[0, {context * codec.samples_per_frame}], got {crossfade}")
        self.codec = codec
        self.context = context
        self.lookahead = lookahead
        self.crossfade = crossfade
        self._reset()

    def _reset(self) -> None:
        self._codes: torch.Tensor | None = None  # (B, K, t): frames from absolute index self._start on
        self._start = 0  # absolute frame index of self._codes[..., 0]
        self._received = 0  # frames pushed so far
        self._final = 0  # frames whose samples are out, or held in self._tail
        self._tail: torch.Tensor | None = None  # (B, crossfade) samples before frame self._final, not yet out

    def push(self, codes: torch.Tensor) -> torch.Tensor:
        """codes (B, K, t) -> the audio (B, s) that became final."""
        self.codec._check_codes(codes)
        if self._codes is None:
            self._codes = codes
        else:
            if codes.shape[0] != self._codes.shape[0]:
                raise DuetError(f"batch size changed mid-stream: {self._codes.shape[0]} -> {codes.shape[0]}")
            self._codes = torch.cat([self._codes, codes], dim=-1)  # (B, K, t_kept + t)
        self._received += codes.shape[-1]
        return self._emit(self._received - self.lookahead, last=False)

    def flush(self) -> torch.Tensor:
        """The remaining audio (B, s) once no more frames will come; the decoder is then ready for a new stream."""
        if self._codes is None:
            return torch.zeros(0, 0)
        out = self._emit(self._received, last=True)
        self._reset()
        return out

    def _emit(self, upto: int, last: bool) -> torch.Tensor:
        assert self._codes is not None
        spf = self.codec.samples_per_frame
        batch = self._codes.shape[0]
        tail = self._tail if self._tail is not None else self._codes.new_zeros(batch, 0, dtype=torch.float32)
        if upto <= self._final:
            if last:
                self._tail = None
                return tail
            return tail[:, :0]
        first = max(self._start, self._final - self.context)  # window start, absolute frame index
        window = self._codes[..., first - self._start :]  # (B, K, received - first)
        audio = self.codec.decode(window).audio  # (B, (received - first) * spf)
        lo = (self._final - first) * spf - tail.shape[1]
        seg = audio[:, lo : (upto - first) * spf]  # (B, s) samples from the held tail up to frame `upto`
        if tail.shape[1]:
            weight = (torch.arange(tail.shape[1], device=seg.device) + 0.5) / tail.shape[1]  # 0 -> 1 across the fade
            seg = torch.cat([tail * (1 - weight) + seg[:, : tail.shape[1]] * weight, seg[:, tail.shape[1] :]], dim=1)
        self._final = upto
        keep_from = max(0, upto - self.context)  # the next window needs no frame before this
        self._codes = self._codes[..., keep_from - self._start :]
        self._start = keep_from
        if last or not self.crossfade:
            self._tail = None
            return seg
        self._tail = seg[:, -self.crossfade :]
        return seg[:, : -self.crossfade]


def causal_hifigan_context(decoder: Any) -> int:
    """Earlier frames that NeMo's `CausalHiFiGANDecoder` reads for the samples of one frame.

    Walks back from the first sample of a frame F through post conv, each stage's residual layer and transposed
    upsampling conv, and the pre conv, tracking the earliest input position each needs (activations are pointwise).
    Causal convs reach back (kernel - 1) * dilation positions; a transposed conv with kernel k, stride r and left trim
    p maps output position j to inputs i >= ceil((j + p - k + 1) / r). The first sample of a frame reaches furthest.
    """
    frame = 1 << 20  # far from 0, so that no index goes negative
    pos = frame * int(math.prod(decoder.up_sample_rates)) - _causal_reach(decoder.post_conv)
    for res_layer, up_conv in zip(reversed(decoder.res_layers), reversed(decoder.up_sample_conv_layers)):
        pos -= max(sum(_causal_reach(block.input_conv) + _causal_reach(block.skip_conv) for block in kernel.res_blocks)
                   for kernel in res_layer.res_blocks)
        conv = up_conv.conv
        kernel_size, stride = conv.kernel_size[0], conv.stride[0]
        pos = -((-(pos + up_conv.padding_left - kernel_size + 1)) // stride)  # ceil division
    pos -= _causal_reach(decoder.pre_conv)
    return frame - pos


def _causal_reach(layer: Any) -> int:
    """Positions before the current one that a stride-1 NeMo `CausalConv1dNorm` reads."""
    conv = layer.conv
    if type(layer).__name__ != "CausalConv1dNorm" or conv.stride[0] != 1:
        raise DuetError(f"expected a stride-1 CausalConv1dNorm in the decoder, got {type(layer).__name__}")
    return (conv.kernel_size[0] - 1) * conv.dilation[0]


def _check_quantizer(model: Any, expect: FSQConfig) -> None:
    """Refuse a checkpoint whose quantiser is not duet's GroupFSQ ``expect`` (groups, levels, eps)."""
    want = f"{expect.num_groups} groups x {list(expect.levels)} (eps {expect.eps})"
    quantizer = getattr(model, "vector_quantizer", None)
    fsqs = getattr(quantizer, "fsqs", None)
    if quantizer is None or fsqs is None:
        raise DuetError(f"NeMo codec quantiser is {type(quantizer).__name__}, duet expects GroupFSQ {want}")
    levels = [tuple(int(v) for v in fsq.num_levels.flatten().tolist()) for fsq in fsqs]
    eps = [float(fsq.eps) for fsq in fsqs]
    if len(fsqs) != expect.num_groups or any(lv != expect.levels for lv in levels) or any(e != expect.eps for e in eps):
        got = f"{len(fsqs)} groups x {[list(lv) for lv in sorted(set(levels))]} (eps {sorted(set(eps))})"
        raise DuetError(f"NeMo codec quantiser is {got}, duet expects GroupFSQ {want}")


def _lengths_or_full(lengths: torch.Tensor | None, x: torch.Tensor, unit: str) -> torch.Tensor:
    """(B,) valid lengths along the last axis of x, defaulting to all of it; checked to lie in [1, x.shape[-1]]."""
    full = x.shape[-1]
    if lengths is None:
        return torch.full((x.shape[0],), full, dtype=torch.long)
    lengths = torch.as_tensor(lengths).long().cpu()
    if lengths.shape != (x.shape[0],) or (lengths.numel() and (lengths.min() < 1 or lengths.max() > full)):
        raise DuetError(f"lengths must be (B,) = ({x.shape[0]},) {unit} in [1, {full}], got {lengths.tolist()}")
    return lengths
