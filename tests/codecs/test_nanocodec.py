"""NanoCodec adapter: the missing-NeMo error always; with NeMo, a real `AudioCodecModel` of NanoCodec's shape.

No NanoCodec weights can be downloaded here, so the NeMo tests build a randomly initialised `AudioCodecModel` from
a hand-written config of the NanoCodec 22 kHz 21.5 fps shape (NeMo's wheel ships no example configs): 22,050 Hz,
1024 samples per frame, causal HiFi-GAN encoder (down 2,2,4,8,8) and decoder (up 8,8,4,2,2) with the shipped kernel
sizes and dilations, so the decoder's receptive field is the real one, GroupFSQ 8 x [8,7,6,6]. Only the channel
widths are cut (encoder 4, decoder 64 instead of 864) to run in seconds on a CPU.
"""

import importlib.util
import math
import sys

import pytest
import torch

from duet.codecs.base import Codec, bitrate
from duet.codecs.fsq import FSQConfig
from duet.codecs.nanocodec import NanoCodec, causal_hifigan_context
from duet.errors import DuetError, MissingDependency

NEMO_ERROR = "NVIDIA NeMo is not installed: pip install 'duet[nemo]'"


def test_an_untrusted_nemo_file_is_refused_before_anything_unpickles_it(tmp_path, monkeypatch):
    path = tmp_path / "gift.nemo"
    path.write_bytes(b"not opened")
    for name in ("nemo", "nemo.collections", "nemo.collections.tts", "nemo.collections.tts.models"):
        monkeypatch.setitem(sys.modules, name, None)  # nothing of NeMo is even imported on the way to the refusal
    with pytest.raises(DuetError, match="unpickles .nemo checkpoints"):
        NanoCodec.from_nemo(path)


def test_missing_nemo_is_a_one_line_error(monkeypatch):
    # Simulate absence even where NeMo is installed: a None entry in sys.modules makes its import fail.
    for name in ("nemo", "nemo.collections", "nemo.collections.tts", "nemo.collections.tts.models"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingDependency) as err:
        NanoCodec.from_nemo("nano-codec.nemo", trust=True)
    assert str(err.value) == NEMO_ERROR
    with pytest.raises(MissingDependency, match=r"duet\[nemo\]"):
        NanoCodec(object())


nemo_present = importlib.util.find_spec("nemo") is not None
needs_nemo = pytest.mark.skipif(not nemo_present, reason="nemo_toolkit not installed (optional extra duet[nemo])")

_M = "nemo.collections.tts.modules.audio_codec_modules."
_L = "nemo.collections.tts.losses.audio_codec_loss."


def _nanocodec_shaped_config(levels=(8, 7, 6, 6), groups=8):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "sample_rate": 22050,
        "samples_per_frame": 1024,
        "audio_encoder": {"_target_": _M + "CausalHiFiGANEncoder", "down_sample_rates": [2, 2, 4, 8, 8],
                          "encoded_dim": 4 * groups, "base_channels": 4, "activation": "lrelu", "pad_mode": "zeros"},
        "vector_quantizer": {"_target_": _M + "GroupFiniteScalarQuantizer", "num_groups": groups,
                             "num_levels_per_group": list(levels)},
        "audio_decoder": {"_target_": _M + "CausalHiFiGANDecoder", "up_sample_rates": [8, 8, 4, 2, 2],
                          "input_dim": 4 * groups, "base_channels": 64, "in_kernel_size": 7, "out_kernel_size": 3,
                          "resblock_kernel_sizes": [3, 7, 11], "resblock_dilation_sizes": [1, 3, 5],
                          "activation": "half_snake", "output_activation": "clamp", "pad_mode": "zeros",
                          "n_groups_equal_to_out_channels": True},
        # Training-only parts the constructor requires; unused here.
        "commit_loss_scale": 0.0,
        "loss_resolutions": [[256, 64, 256]],
        "mel_loss_dims": [20],
        "generator_loss": {"_target_": _L + "GeneratorSquaredLoss"},
        "discriminator_loss": {"_target_": _L + "DiscriminatorSquaredLoss"},
    })


@pytest.fixture(scope="module")
def model():
    from nemo.collections.tts.models import AudioCodecModel

    torch.manual_seed(0)
    model = AudioCodecModel(cfg=_nanocodec_shaped_config()).eval()
    # A random encoder's latents sit near 0 (one code); scale its last conv so they span every FSQ level.
    with torch.no_grad():
        model.audio_encoder.post_conv.conv.parametrizations.weight.original0.mul_(100.0)
    return model


@pytest.fixture(scope="module")
def codec(model):
    return NanoCodec(model)


@pytest.fixture(scope="module")
def codes30():
    torch.manual_seed(3)
    return torch.randint(0, 2016, (1, 8, 30))


@pytest.fixture(scope="module")
def full30(codec, codes30):
    return codec.decode(codes30).audio  # (1, 30 * 1024)


def _audio(*lengths: int) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(4)
    audio = torch.zeros(len(lengths), max(lengths))
    for i, n in enumerate(lengths):
        t = torch.arange(n) / 22050
        audio[i, :n] = 0.3 * torch.sin(2 * math.pi * (150 + 100 * i) * t) + 0.05 * torch.randn(n)
    return audio, torch.tensor(lengths)


@needs_nemo
def test_reads_rates_and_alphabet_from_the_model(codec):
    assert isinstance(codec, Codec)
    assert (codec.sample_rate, codec.samples_per_frame) == (22050, 1024)
    assert codec.frame_rate == pytest.approx(21.533, abs=1e-3)
    assert codec.codebook_sizes == (2016,) * 8
    assert bitrate(codec) == pytest.approx(1891, abs=1)  # "1.89 kbps"


@needs_nemo
def test_encode_shapes_lengths_and_range(codec):
    audio, lengths = _audio(3000, 2048, 1)
    out = codec.encode(audio, lengths)
    assert out.codes.shape == (3, 8, 3) and out.codes.dtype == torch.int64
    assert out.lengths.tolist() == [math.ceil(n / 1024) for n in (3000, 2048, 1)] == [3, 2, 1]
    assert out.codes.min() >= 0 and out.codes.max() < 2016
    assert torch.all(out.codes[1, :, 2:] == 0) and torch.all(out.codes[2, :, 1:] == 0)  # NeMo masks padding to 0
    assert codec.encode(audio[:1]).codes.shape == (1, 8, 3)  # lengths default to the whole signal


@needs_nemo
def test_encode_and_decode_are_the_models(codec, model):
    audio, lengths = _audio(4000, 2500)
    out = codec.encode(audio, lengths)
    with torch.no_grad():
        tokens, tokens_len = model.encode(audio=audio, audio_len=lengths)
        ref_audio, ref_len = model.decode(tokens=tokens, tokens_len=tokens_len)
    assert torch.equal(out.codes, tokens.long()) and torch.equal(out.lengths, tokens_len.long())
    dec = codec.decode(out.codes, out.lengths)
    assert torch.equal(dec.audio, ref_audio) and torch.equal(dec.lengths, ref_len.long())


@needs_nemo
def test_group_fsq_on_the_models_latent_is_bit_exact(codec, model):
    """duet's GroupFSQ applied to the model's own encoder output gives the model's tokens and dequantised values."""
    torch.manual_seed(5)
    audio, lengths = 0.3 * torch.randn(2, 22050), torch.tensor([22050, 15000])  # noise: latents vary frame to frame
    with torch.no_grad():
        latent, latent_len = model.encode_audio(audio=audio, audio_len=lengths)  # (B, 32, T)
    deq, packed = codec.fsq(latent)
    out = codec.encode(audio, lengths)
    valid = torch.arange(latent.shape[-1]) < latent_len[:, None]  # (B, T); NeMo zeroes padded frames
    assert torch.equal(packed * valid[:, None], out.codes)
    assert out.codes.unique().numel() > 50  # many codes, not one (a random encoder varies little)
    with torch.no_grad():
        ref_deq = model.dequantize(tokens=out.codes, tokens_len=out.lengths)
    assert torch.equal(codec.fsq.decode(out.codes) * valid[:, None], ref_deq)
    assert torch.equal(deq * valid[:, None], ref_deq)


@needs_nemo
def test_decode_of_encode_and_the_fsq_views_round_trip(codec):
    audio, lengths = _audio(5000, 3000)
    enc = codec.encode(audio, lengths)
    dec = codec.decode(enc.codes, enc.lengths)
    assert dec.audio.shape == (2, 5 * 1024) and dec.audio.dtype == torch.float32
    assert dec.lengths.tolist() == [5 * 1024, 3 * 1024]
    assert dec.audio.abs().max() <= 1 and torch.all(dec.audio[1, 3 * 1024 :] == 0)
    assert torch.equal(codec.fold(codec.unfold(enc.codes)), enc.codes)
    assert torch.equal(codec.decode(enc.codes.int(), enc.lengths).audio, dec.audio)  # int32 (NeMo's dtype) too


@needs_nemo
def test_checkpoint_round_trip_through_restore_from(codec, model, tmp_path):
    path = tmp_path / "tiny-nanocodec.nemo"
    model.save_to(str(path))
    restored = NanoCodec.from_nemo(path, trust=True)
    audio, lengths = _audio(3000)
    assert torch.equal(restored.encode(audio, lengths).codes, codec.encode(audio, lengths).codes)
    with pytest.raises(DuetError, match="checkpoint not found"):
        NanoCodec.from_nemo(tmp_path / "missing.nemo", trust=True)


@needs_nemo
def test_refuses_other_quantisers_and_models(model):
    from nemo.collections.tts.modules.audio_codec_modules import GroupFiniteScalarQuantizer

    # NeMo's 22 kHz low-frame-rate codec: same frame rate, 4032 codes per group. (Swapped by hand: pytest's
    # monkeypatch does not restore a torch submodule, which lives outside the instance __dict__.)
    shipped = model.vector_quantizer
    model.vector_quantizer = GroupFiniteScalarQuantizer(8, [9, 8, 8, 7])
    try:
        with pytest.raises(DuetError, match=r"quantiser is 8 groups x \[\[9, 8, 8, 7\]\].*expects GroupFSQ "
                                            r"8 groups x \[8, 7, 6, 6\]") as err:
            NanoCodec(model)
    finally:
        model.vector_quantizer = shipped
    assert "\n" not in str(err.value)
    assert NanoCodec(model, expect=FSQConfig()).codebook_sizes == (2016,) * 8
    with pytest.raises(DuetError, match="wraps a NeMo AudioCodecModel"):
        NanoCodec(torch.nn.Linear(2, 2))


@needs_nemo
def test_rejects_bad_codes_and_lengths(codec):
    with pytest.raises(DuetError, match=r"\[0, 2016\)"):
        codec.decode(torch.full((1, 8, 2), 2016))
    with pytest.raises(DuetError, match=r"\(B, 8, T\)"):
        codec.decode(torch.zeros(1, 7, 2, dtype=torch.long))
    with pytest.raises(DuetError, match="lengths"):
        codec.encode(torch.zeros(2, 100), torch.tensor([100, 101]))


@needs_nemo
def test_receptive_field_is_what_the_decoder_does(codec, codes30, full30):
    """Changing frame 2 changes frames 2 .. 2 + R and nothing else (causal, R frames of left context)."""
    r = codec.receptive_field()
    assert r == causal_hifigan_context(codec.model.audio_decoder) == 25  # about 1.2 s at 21.5 frames/s
    moved = codes30.clone()
    moved[..., 2] = (moved[..., 2] + 1000) % 2016
    diff = (codec.decode(moved).audio - full30).abs().view(30, 1024).amax(dim=1)  # (T,) per frame
    assert torch.all(diff[:2] == 0)
    assert diff[2 + r] > 0
    assert torch.all(diff[3 + r :] == 0)


@needs_nemo
def test_stream_equals_full_decode_with_default_context(codec, codes30, full30):
    stream = codec.stream_decoder()
    assert stream.context == 25
    pieces = [stream.push(codes30[..., a:b]) for a, b in ((0, 26), (26, 27), (27, 30))]  # windows from 0, 1, 2
    pieces.append(stream.flush())
    assert [p.shape[1] // 1024 for p in pieces] == [26, 1, 3, 0]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full30, rtol=0, atol=1e-5)


@needs_nemo
def test_short_context_is_approximate_but_keeps_length_and_first_chunk(codec, codes30, full30):
    codes, full = codes30[..., :12], full30[:, : 12 * 1024]  # causal: a prefix decodes to the prefix
    for crossfade in (0, 512):
        stream = codec.stream_decoder(context=2, crossfade=crossfade)
        out = torch.cat([stream.push(codes[..., a : a + 4]) for a in (0, 4, 8)] + [stream.flush()], dim=1)
        assert out.shape == full.shape
        exact = 4 * 1024 - crossfade  # the first window starts at frame 0
        torch.testing.assert_close(out[:, :exact], full[:, :exact], rtol=0, atol=1e-5)
        assert (out - full).abs().max() > 1e-4  # later chunks lack context: documented as approximate
    with pytest.raises(DuetError, match="crossfade"):
        codec.stream_decoder(context=1, crossfade=2000)


@needs_nemo
def test_lookahead_holds_frames_back_until_flush(codec, codes30):
    stream = codec.stream_decoder(context=1, lookahead=2)
    sizes = [stream.push(codes30[..., a : a + 3]).shape[1] for a in (0, 3)] + [stream.flush().shape[1]]
    assert sizes == [1 * 1024, 3 * 1024, 2 * 1024]
    assert stream.flush().shape == (0, 0)  # flushed: ready for a new stream
