"""push_many: many streams of one codec decoded with shared calls give each stream its own push's audio (codecs
that re-decode context and a causal decoder that carries its state)."""

from dataclasses import replace

import pytest
import torch

from duet.codecs.registry import build
from duet.codecs.streaming import ContextStreamDecoder, StatefulStreamDecoder, push_many
from duet.train.codec_config import preset


@pytest.fixture(scope="module", params=["fsq-tiny", "rvq-tiny", "fsq-tiny-causal"])
def codec(request):
    torch.manual_seed(0)
    cfg = preset(request.param.removesuffix("-causal"))
    model = replace(cfg.model, causal_decoder=True) if request.param.endswith("-causal") else cfg.model
    return build(cfg.kind, model).eval()


def _codes(codec, frames: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (1, frames), generator=g) for n in codec.codebook_sizes], dim=1)


def _counting(dec, calls: list[int]):
    """Counts the batch size of each decode call a stream decoder makes."""
    if isinstance(dec, StatefulStreamDecoder):
        inner_chunk = dec.decode_chunk

        def chunk(codes, state):
            calls.append(codes.shape[0])
            return inner_chunk(codes, state)

        dec.decode_chunk = chunk
        return dec
    assert isinstance(dec, ContextStreamDecoder)
    inner = dec.decode_window

    def window(codes):
        calls.append(codes.shape[0])
        return inner(codes)

    dec.decode_window = window
    return dec


def test_each_stream_gets_its_own_push_audio_and_the_full_decode(codec):
    """Five streams that start at different steps and push 1-3 frames at a time (so their windows differ in
    length, then settle): per-step audio equals solo pushes, and each stream's whole audio equals its full decode."""
    n_streams, frames = 5, 40
    codes = [_codes(codec, frames, seed) for seed in range(n_streams)]  # (1, K, T) each
    calls: list[int] = []
    batched = [_counting(codec.stream_decoder(), calls) for _ in range(n_streams)]
    solo = [codec.stream_decoder() for _ in range(n_streams)]
    pos = [0] * n_streams
    got: list[list[torch.Tensor]] = [[] for _ in range(n_streams)]
    for step in range(80):
        live = [i for i in range(n_streams) if step >= i and pos[i] < frames]
        if not live:
            break
        chunks = []
        for i in live:
            n = 1 if step > 6 else 1 + (i + step) % 3
            chunks.append(codes[i][..., pos[i] : pos[i] + n])
            pos[i] += chunks[-1].shape[-1]
        for i, chunk, audio in zip(live, chunks, push_many([batched[i] for i in live], chunks)):
            torch.testing.assert_close(audio, solo[i].push(chunk), atol=1e-5, rtol=0)
            got[i].append(audio)
    for i in range(n_streams):
        whole = torch.cat(got[i] + [batched[i].flush()], dim=-1)
        torch.testing.assert_close(whole, codec.decode(codes[i]).audio, atol=1e-5, rtol=0)
    assert max(calls) > 1  # streams did share calls
    steady = [c for c in calls if c == n_streams]
    assert steady, "once every stream pushes one frame, one call decodes all five"


def test_decoders_without_a_key_are_pushed_alone(codec):
    keyed = codec.stream_decoder()
    calls: list[int] = []
    plain = _counting(codec.stream_decoder(), calls)
    plain.batch_key = None
    a, b = _codes(codec, 12, 1), _codes(codec, 12, 2)  # past the right context of both codecs
    out = push_many([keyed, plain], [a, b])
    assert calls == [1]
    torch.testing.assert_close(out[1], codec.stream_decoder().push(b), atol=1e-5, rtol=0)
    with pytest.raises(ValueError):
        push_many([keyed], [a, b])


def test_final_pushes_flush_in_the_same_call(codec):
    """Streams of different lengths end on their last push (some with an empty last chunk): each stream's audio
    is its full decode, and a finished decoder starts a new sequence cleanly."""
    lengths = [25, 18, 31]
    codes = [_codes(codec, n, 10 + i) for i, n in enumerate(lengths)]
    decs = [codec.stream_decoder() for _ in lengths]
    got: list[list[torch.Tensor]] = [[] for _ in lengths]
    for step in range(max(lengths) + 1):
        live = [i for i, n in enumerate(lengths) if step <= n - (i == 0)]  # stream 0 ends on a real frame
        chunks = [codes[i][..., step : step + 1] for i in live]  # stream 1 and 2 end on an empty chunk
        final = [step + 1 >= lengths[i] + (i != 0) for i in live]
        for i, audio in zip(live, push_many([decs[i] for i in live], chunks, final)):
            got[i].append(audio)
    for i in range(len(lengths)):
        torch.testing.assert_close(torch.cat(got[i], dim=-1), codec.decode(codes[i]).audio, atol=1e-5, rtol=0)
    again = push_many([decs[0]], [codes[1]], [True])[0]
    torch.testing.assert_close(again, codec.decode(codes[1]).audio, atol=1e-5, rtol=0)
