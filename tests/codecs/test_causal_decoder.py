"""duet-fsq with a causal decoder: no frame's audio depends on a later frame, streaming with a carried state
equals the full decode for any chunking, and a causal run warm-starts from a non-causal codec's weights."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from duet.codecs.fsq_codec import DecoderState
from duet.codecs.registry import build, save_pretrained
from duet.codecs.streaming import StatefulStreamDecoder
from duet.errors import DuetError
from duet.train.audio_crops import AudioCrops
from duet.train.codec_config import preset
from duet.train.codec_loop import CodecTrainer


def _causal(model_cfg):
    return replace(model_cfg, causal_decoder=True)


@pytest.fixture(scope="module")
def codec():
    torch.manual_seed(0)
    return build("duet-fsq", _causal(preset("fsq-tiny").model)).eval()


def _codes(codec, frames: int, seed: int, batch: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (batch, frames), generator=g) for n in codec.codebook_sizes], dim=1)


def test_no_frame_hears_a_later_frame(codec):
    codes = _codes(codec, 20, 0)
    spf = codec.samples_per_frame
    assert codec.decoder_context[1] == 0
    base = codec.decode(codes).audio
    for t in (0, 7, 19):
        changed = codes.clone()
        changed[..., t:] = _codes(codec, 20 - t, 100 + t)
        audio = codec.decode(changed).audio
        torch.testing.assert_close(audio[:, : t * spf], base[:, : t * spf], atol=1e-6, rtol=0)
        assert not torch.allclose(audio[:, t * spf :], base[:, t * spf :])  # the changed frames do sound


def test_the_non_causal_layout_does_hear_later_frames():
    """The test above is not vacuous: the same weights read centred hear a changed later frame."""
    torch.manual_seed(0)
    plain = build("duet-fsq", preset("fsq-tiny").model).eval()
    codes = _codes(plain, 20, 0)
    changed = codes.clone()
    changed[..., 10:] = _codes(plain, 10, 5)
    spf = plain.samples_per_frame
    assert not torch.allclose(plain.decode(changed).audio[:, : 10 * spf], plain.decode(codes).audio[:, : 10 * spf])


@pytest.mark.parametrize("sizes", [[1] * 23, [5, 1, 9, 0, 8], [23], [2, 3, 4, 5, 6, 3]])
def test_streamed_chunks_join_to_the_full_decode(codec, sizes):
    codes = _codes(codec, sum(sizes), 1, batch=2)
    dec = codec.stream_decoder()
    assert isinstance(dec, StatefulStreamDecoder)
    pieces, at = [], 0
    for n in sizes:
        audio = dec.push(codes[..., at : at + n])
        assert audio.shape == (2, n * codec.samples_per_frame)  # every pushed frame's audio is final at once
        pieces.append(audio)
        at += n
    pieces.append(dec.flush())
    torch.testing.assert_close(torch.cat(pieces, -1), codec.decode(codes).audio, atol=1e-5, rtol=0)
    again = dec.push(codes[..., :4])  # a flushed decoder starts a new sequence
    torch.testing.assert_close(again, codec.decode(codes[..., :4]).audio, atol=1e-5, rtol=0)


def test_states_batch_and_split_back(codec):
    states = [codec.decoder.initial_state(b) for b in (1, 2)]
    for s, b in zip(states, (1, 2)):
        s.tail.normal_()
        for p in s.frames + s.sub:
            p.normal_()
    joined = DecoderState.cat(states)
    assert joined.conv_in.shape[0] == 3 and joined.tail.shape[0] == 3
    for before, after in zip(states, joined.split([1, 2])):
        torch.testing.assert_close(after.tail, before.tail)
        for x, y in zip(after.frames + after.sub, before.frames + before.sub):
            torch.testing.assert_close(x, y)


def test_a_non_causal_decoder_has_no_state():
    plain = build("duet-fsq", preset("fsq-tiny").model)
    assert not plain.carries_decoder_state
    with pytest.raises(ValueError):
        plain.decoder.initial_state(1)


def test_causal_run_warm_starts_from_a_non_causal_codec(tmp_path):
    torch.manual_seed(0)
    cfg = preset("fsq-tiny")
    shipped = build("duet-fsq", cfg.model)
    save_pretrained(shipped, tmp_path / "plain", dtype=torch.float32)
    crops = AudioCrops([np.zeros(cfg.crop_samples * 2, dtype=np.float32)], cfg.model.sample_rate)
    causal_cfg = replace(cfg, model=_causal(cfg.model), decoder_only=True)
    trainer = CodecTrainer(causal_cfg, crops)
    trainer.init_from(tmp_path / "plain")
    for key, value in shipped.state_dict().items():
        torch.testing.assert_close(trainer.model.state_dict()[key], value)
    other = replace(cfg, model=replace(cfg.model, dec_dim=48))
    with pytest.raises(DuetError, match="different model config"):
        CodecTrainer(other, crops).init_from(tmp_path / "plain")


def test_the_shipped_causal_codec_streams_with_its_state():
    """checkpoints/duet-fsq-causal: duet-fsq's encoder and codes, a causal decoder that carries its state."""
    from duet.codecs import load

    causal, plain = load("duet-fsq-causal"), load("duet-fsq")
    assert causal.carries_decoder_state and causal.decoder_context[1] == 0
    for key, value in plain.state_dict().items():  # the same encoder and quantiser: the codes stay valid
        if not key.startswith("decoder."):
            torch.testing.assert_close(causal.state_dict()[key], value)
    codes = _codes(causal, 12, 3)
    dec = causal.stream_decoder()
    streamed = torch.cat([dec.push(codes[..., :5]), dec.push(codes[..., 5:]), dec.flush()], dim=-1)
    torch.testing.assert_close(streamed, causal.decode(codes).audio, atol=1e-4, rtol=0)


def test_a_right_padded_chunk_gives_each_row_its_own_audio_and_state(codec):
    """Rows of one call with their own valid lengths (the rest junk, not zeros: nothing may read it) give each row
    what its own chunk alone gives, audio and next state, over two chunks in a row."""
    dec = codec.decoder
    spf = codec.samples_per_frame
    z = codec.quantizer.decode(_codes(codec, 14, 4, batch=3))  # (3, C, 14)
    junk = codec.quantizer.decode(_codes(codec, 14, 5, batch=3))
    firsts, seconds = [3, 7, 1], [5, 2, 6]
    padded, alone = dec.initial_state(3), [dec.initial_state(1) for _ in range(3)]
    at = [0, 0, 0]
    for lengths in (firsts, seconds):
        longest = max(lengths)
        chunk = junk[..., :longest].clone()  # (3, C, longest)
        for b, n in enumerate(lengths):
            chunk[b, :, :n] = z[b, :, at[b] : at[b] + n]
        audio, padded = dec.stream(chunk, padded, torch.tensor(lengths))
        assert audio.shape == (3, longest * spf)
        for b, (n, part) in enumerate(zip(lengths, padded.split([1, 1, 1]))):
            own, alone[b] = dec.stream(z[b : b + 1, :, at[b] : at[b] + n], alone[b])
            torch.testing.assert_close(audio[b : b + 1, : n * spf], own, atol=1e-5, rtol=0)
            for x, y in zip([part.conv_in, *part.frames, *part.sub, part.tail],
                            [alone[b].conv_in, *alone[b].frames, *alone[b].sub, alone[b].tail], strict=True):
                torch.testing.assert_close(x, y, atol=1e-5, rtol=0)
            at[b] += n
