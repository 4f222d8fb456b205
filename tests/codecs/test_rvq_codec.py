"""duet-rvq: interface numbers, causality of encoder and decoder, frame-synchronous streaming, variable bitrate,
bad input, save/load, and the semantic-distillation path with a randomly initialised WavLM."""

import math

import pytest
import torch

from duet.codecs.base import Codec, bitrate
from duet.codecs.registry import load, save_pretrained
from duet.codecs.rvq import RVQConfig
from duet.codecs.rvq_codec import RVQCodec, RVQCodecConfig
from duet.errors import DuetError

TINY = RVQCodecConfig(n_mels=20, enc_sub_dim=16, enc_sub_blocks=1, enc_dim=32, enc_blocks=1,
                      enc_transformer_layers=1, enc_heads=2, dec_dim=32, dec_blocks=2, dec_sub_dim=16,
                      dec_sub_blocks=2, rvq=RVQConfig(dim=16, num_quantizers=8, codebook_size=64))


@pytest.fixture(scope="module")
def codec() -> RVQCodec:
    torch.manual_seed(0)
    model = RVQCodec(TINY)
    model.train()
    model(torch.randn(4, 960 * 20) * 0.1)  # one training pass: k-means-initialised codebooks
    return model.eval()


def test_interface_numbers_match_luna_codec():
    c = RVQCodec()  # the shipped configuration
    assert isinstance(c, Codec)
    assert c.sample_rate == 24000 and c.samples_per_frame == 960 and c.frame_rate == 25.0
    assert c.codebook_sizes == (2048,) * 8
    assert bitrate(c) == pytest.approx(25 * 8 * math.log2(2048), rel=1e-9)  # 2.2 kbps
    assert bitrate(c) == pytest.approx(2200, rel=0.01)
    assert c.cfg.rvq.quantizer_dropout > 0  # variable bitrate is trained, not hoped for
    assert c.decoder_context[1] == 0  # causal: no look-ahead


def test_shapes(codec):
    enc = codec.encode(torch.randn(2, 5000) * 0.1)
    assert enc.codes.shape == (2, 8, 6) and enc.lengths.tolist() == [6, 6]
    assert int(enc.codes.max()) < 64
    assert codec.decode(enc.codes).audio.shape == (2, 6 * 960)


def test_encoder_is_causal(codec):
    """Codes of frames that end before a change in the audio do not move."""
    torch.manual_seed(3)
    x = torch.randn(1, 960 * 12) * 0.1
    y = x.clone()
    y[:, 960 * 7 + 5 :] = torch.randn(1, 960 * 5 - 5) * 0.3  # change from inside frame 7 on
    lx, ly = codec.encoder(x), codec.encoder(y)
    torch.testing.assert_close(lx[..., :7], ly[..., :7], atol=1e-5, rtol=0)
    assert not torch.allclose(lx[..., 7:], ly[..., 7:])
    assert torch.equal(codec.encode(x).codes[..., :7], codec.encode(y).codes[..., :7])


def test_decoder_is_causal(codec):
    torch.manual_seed(4)
    codes = torch.randint(0, 64, (1, 8, 20))
    full = codec.decode(codes).audio
    for t in (1, 5, 13):
        torch.testing.assert_close(codec.decode(codes[..., :t]).audio, full[:, : t * 960], atol=1e-5, rtol=0)


def test_streaming_is_frame_synchronous_and_exact(codec):
    torch.manual_seed(5)
    codes = torch.randint(0, 64, (2, 8, 16))
    full = codec.decode(codes).audio
    stream = codec.stream_decoder()
    pieces = []
    for t in range(16):
        piece = stream.push(codes[..., t : t + 1])
        assert piece.shape == (2, 960)  # every frame's audio is final the moment the frame arrives
        pieces.append(piece)
    assert stream.flush().shape[-1] == 0
    torch.testing.assert_close(torch.cat(pieces, dim=-1), full, atol=1e-5, rtol=0)


def test_fewer_codebooks_decode(codec):
    codes = codec.encode(torch.randn(1, 960 * 4) * 0.1).codes
    for q in (1, 4, 8):
        assert codec.decode(codes[:, :q]).audio.shape == (1, 4 * 960)
    with pytest.raises(DuetError):
        codec.decode(torch.zeros(1, 9, 4, dtype=torch.long))


@pytest.mark.parametrize("bad", [torch.zeros(0), torch.tensor([[0.1, float("nan")]]), torch.zeros(1, 1, 1, 10)])
def test_bad_audio_raises_duet_error(codec, bad):
    with pytest.raises(DuetError):
        codec.encode(bad)


def test_stereo_and_rate_conversions(codec):
    x = torch.randn(1, 16000) * 0.1
    stereo = torch.stack([x[0], x[0]]).unsqueeze(0)  # (1, 2, S)
    assert torch.equal(codec.encode(stereo, sample_rate=16000).codes, codec.encode(x, sample_rate=16000).codes)
    assert codec.encode(x, sample_rate=16000).codes.shape[-1] == math.ceil(24000 / 960)


def test_silence_is_valid(codec):
    codes = codec.encode(torch.zeros(1, 960 * 3)).codes
    assert torch.isfinite(codec.decode(codes).audio).all()


def test_save_and_load_drops_training_state(codec, tmp_path):
    save_pretrained(codec, tmp_path / "r")
    loaded = load(tmp_path / "r")
    assert isinstance(loaded, RVQCodec) and loaded.cfg == codec.cfg
    from safetensors.torch import load_file

    shipped = load_file(str(tmp_path / "r" / "model.safetensors"))
    assert not any(k.endswith(("ema_sum", "ema_count")) for k in shipped)
    x = torch.randn(1, 960 * 6) * 0.1
    same = (loaded.encode(x).codes == codec.encode(x).codes).float().mean()
    assert same > 0.9  # fp16 codebooks: a rare near-tie may flip


def test_semantic_distillation_with_random_wavlm(codec):
    transformers = pytest.importorskip("transformers")
    from duet.codecs.semantic import WavLMTeacher

    cfg = transformers.WavLMConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                   conv_dim=(16,) * 7, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2,
                                   num_buckets=32)
    torch.manual_seed(0)
    teacher = WavLMTeacher(transformers.WavLMModel(cfg))
    model = RVQCodec(TINY)
    model.enable_semantic(teacher.hidden_size)
    model.train()
    audio = torch.randn(2, 960 * 10) * 0.1
    target = teacher(audio, 24000, frames=10)
    assert target.shape == (2, 10, 32) and not target.requires_grad
    out = model(audio, semantic_target=target)
    loss = out.losses["semantic"]
    assert torch.isfinite(loss) and 0 <= float(loss.detach()) <= 2
    loss.backward()
    assert model.semantic_proj.weight.grad is not None
    assert model.encoder.to_latent.weight.grad.abs().sum() > 0  # straight-through reaches the encoder
