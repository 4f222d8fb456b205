"""duet-fsq: interface numbers, shapes, exact chunked decoding, receptive field, bad input, save/load."""

import math

import numpy as np
import pytest
import torch

from duet.audio import resample
from duet.codecs.base import Codec, bitrate
from duet.codecs.fsq_codec import FSQCodec, FSQCodecConfig
from duet.codecs.registry import load, save_pretrained
from duet.errors import DuetError

TINY = FSQCodecConfig(n_mels=20, enc_sub_dim=16, enc_sub_blocks=1, enc_dim=32, enc_blocks=1, dec_dim=32,
                      dec_blocks=2, dec_sub_dim=16, dec_sub_blocks=2)


@pytest.fixture(scope="module")
def codec() -> FSQCodec:
    torch.manual_seed(0)
    return FSQCodec(TINY).eval()


def _speechlike(seconds: float, sr: int, seed: int = 0) -> np.ndarray:
    """A harmonic tone with a gliding pitch and a syllable-rate envelope: deterministic, speech-shaped."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * sr)) / sr
    f0 = 120 + 40 * np.sin(2 * np.pi * 0.7 * t + rng.uniform(0, 6))
    phase = 2 * np.pi * np.cumsum(f0) / sr
    x = sum(np.sin(k * phase) / k for k in range(1, 12))
    env = 0.5 * (1 + np.sin(2 * np.pi * 4 * t)) ** 2
    return (0.1 * x * env).astype(np.float32)


def test_interface_numbers_match_nanocodec():
    c = FSQCodec()  # the shipped configuration
    assert isinstance(c, Codec)
    assert c.sample_rate == 22050 and c.samples_per_frame == 1024
    assert c.frame_rate == pytest.approx(21.533, abs=1e-3)
    assert c.codebook_sizes == (2016,) * 8
    expected = 22050 / 1024 * 8 * math.log2(8 * 7 * 6 * 6)  # 1.89 kbps (NanoCodec 22 kHz)
    assert bitrate(c) == pytest.approx(expected, rel=1e-9)
    assert bitrate(c) == pytest.approx(1890, rel=0.01)


def test_shapes_and_ranges(codec):
    audio = torch.from_numpy(np.stack([_speechlike(0.5, 22050, 0), _speechlike(0.5, 22050, 1)]))
    enc = codec.encode(audio[:, :11000])
    frames = math.ceil(11000 / 1024)
    assert enc.codes.shape == (2, 8, frames) and enc.codes.dtype == torch.int64
    assert int(enc.codes.min()) >= 0 and int(enc.codes.max()) < 2016
    assert enc.lengths.tolist() == [frames, frames]
    dec = codec.decode(enc.codes)
    assert dec.audio.shape == (2, frames * 1024)
    assert torch.isfinite(dec.audio).all() and dec.audio.abs().max() <= 1.0


def test_lengths_per_item(codec):
    audio = torch.zeros(2, 5000)
    audio[0] = torch.from_numpy(_speechlike(5000 / 22050, 22050))
    enc = codec.encode(audio, lengths=torch.tensor([5000, 1500]))
    assert enc.lengths.tolist() == [5, 2]


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, 100])
def test_chunked_decode_equals_full(codec, chunk):
    torch.manual_seed(1)
    codes = torch.randint(0, 2016, (2, 8, 37))
    full = codec.decode(codes).audio
    stream = codec.stream_decoder()
    pieces = [stream.push(codes[..., i : i + chunk]) for i in range(0, 37, chunk)] + [stream.flush()]
    streamed = torch.cat(pieces, dim=-1)
    assert streamed.shape == full.shape
    torch.testing.assert_close(streamed, full, atol=1e-5, rtol=0)


def test_stream_latency_is_right_context(codec):
    """A chunk's audio comes out once `right` later frames have arrived, never earlier."""
    left, right = codec.decoder_context
    stream = codec.stream_decoder()
    codes = torch.randint(0, 2016, (1, 8, right + 3))
    assert stream.push(codes[..., :right]).shape[-1] == 0
    assert stream.push(codes[..., right:]).shape[-1] == 3 * 1024


def test_receptive_field_is_what_streaming_assumes(codec):
    """Changing frame t changes audio only in frames [t - right, t + left]: the context the stream decoder uses."""
    left, right = codec.decoder_context
    torch.manual_seed(2)
    codes = torch.randint(0, 2016, (1, 8, 60))
    t = 30
    other = codes.clone()
    other[0, :, t] = (other[0, :, t] + 1000) % 2016
    diff = (codec.decode(codes).audio - codec.decode(other).audio).abs().view(60, 1024).amax(dim=1)
    changed = torch.nonzero(diff > 1e-6).flatten()
    assert changed.numel() > 0
    assert int(changed.min()) >= t - right and int(changed.max()) <= t + left


def test_stereo_is_downmixed(codec):
    mono = torch.from_numpy(_speechlike(0.3, 22050))
    stereo = torch.stack([mono * 1.5, mono * 0.5]).unsqueeze(0)  # (1, 2, S): mean equals mono
    torch.testing.assert_close(codec.encode(stereo).codes, codec.encode(mono).codes, atol=0, rtol=0)


def test_other_rate_is_resampled(codec):
    x16 = _speechlike(0.5, 16000)
    direct = codec.encode(torch.from_numpy(resample(x16, 16000, 22050))).codes
    converted = codec.encode(torch.from_numpy(x16), sample_rate=16000).codes
    assert torch.equal(direct, converted)


def test_silence_is_valid(codec):
    enc = codec.encode(torch.zeros(1, 4096))
    assert enc.codes.shape == (1, 8, 4)
    assert torch.isfinite(codec.decode(enc.codes).audio).all()


@pytest.mark.parametrize("bad", [torch.zeros(0), torch.zeros(2, 0), torch.tensor([0.1, float("nan"), 0.2]),
                                 torch.tensor([[0.0, float("inf")]]), torch.zeros(1, 1, 1, 100)])
def test_bad_audio_raises_duet_error(codec, bad):
    with pytest.raises(DuetError):
        codec.encode(bad)


@pytest.mark.parametrize("bad", [torch.full((1, 8, 3), 2016), torch.full((1, 8, 3), -1), torch.zeros(1, 7, 3).long(),
                                 torch.zeros(1, 8, 0).long(), torch.zeros(1, 8, 3)])
def test_bad_codes_raise_duet_error(codec, bad):
    with pytest.raises(DuetError):
        codec.decode(bad)


def test_save_and_load_fp16(codec, tmp_path):
    save_pretrained(codec, tmp_path / "c")
    loaded = load(tmp_path / "c")
    assert isinstance(loaded, FSQCodec) and loaded.cfg == codec.cfg and not loaded.training
    for k, v in codec.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v.half().float()), k  # exactly the fp16-rounded weights
    codes = torch.randint(0, 2016, (1, 8, 6))
    torch.testing.assert_close(loaded.decode(codes).audio, codec.decode(codes).audio, atol=2e-2, rtol=0)
    assert not any(p.suffix in (".bin", ".pt", ".pkl") for p in (tmp_path / "c").iterdir())


def test_unknown_name_is_a_clear_error():
    with pytest.raises(DuetError, match="no codec named"):
        load("duet-nope")
