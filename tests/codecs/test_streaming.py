"""push_many: many streams of one codec decoded with shared calls give each stream its own push's audio (codecs
that re-decode context and a causal decoder that carries its state)."""

import random
from dataclasses import replace

import pytest
import torch

from duet.codecs.registry import build
from duet.codecs.streaming import ContextStreamDecoder, StatefulStreamDecoder, pad_groups, push_many
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

        def chunk(codes, state, *lengths):
            calls.append(codes.shape[0])
            return inner_chunk(codes, state, *lengths)

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


def _brute_force_cost(lengths: list[int], call_frames: float) -> float:
    """The cheapest grouping by trying every partition of the chunks (a naive loop over set partitions)."""
    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for part in partitions(rest):
            yield [[first], *part]
            for k in range(len(part)):
                yield [*part[:k], [first, *part[k]], *part[k + 1 :]]

    return min(sum(call_frames + len(g) * max(lengths[i] for i in g) for g in part)
               for part in partitions(list(range(len(lengths)))))


@pytest.mark.parametrize("call_frames", [0.0, 1.0, 6.0, 12.0, 40.0])
def test_pad_groups_finds_the_cheapest_grouping(call_frames):
    rng = random.Random(int(call_frames))
    for _ in range(30):
        lengths = [rng.choice([1, 2, 3, 4, 8, 16]) for _ in range(rng.randint(1, 7))]
        groups = pad_groups(lengths, call_frames)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))  # every chunk in one call
        assert all(g == sorted(g) for g in groups)
        cost = sum(call_frames + len(g) * max(lengths[i] for i in g) for g in groups)
        assert cost == pytest.approx(_brute_force_cost(lengths, call_frames))
    assert pad_groups([4, 1, 4, 2], 0.0) == [[1], [3], [0, 2]]  # free calls: one per length, nothing padded
    assert pad_groups([4, 1, 4, 2], 1e9) == [[0, 1, 2, 3]]  # costly calls: one call for all
    assert pad_groups([], 12.0) == []


def _causal_codec():
    torch.manual_seed(0)
    cfg = preset("fsq-tiny")
    return build(cfg.kind, replace(cfg.model, causal_decoder=True)).eval()


def _engine_chunks(frames: int, largest: int = 16) -> list[int]:
    """A serving engine's chunk sizes for a stream of ``frames`` frames: 1, 2, 4, ... up to ``largest``, then the
    rest."""
    sizes, size = [], 1
    while sum(sizes) < frames:
        sizes.append(min(size, frames - sum(sizes)))
        size = min(2 * size, largest)
    return sizes


def _assert_same_state(a, b):
    for x, y in zip([a.conv_in, *a.frames, *a.sub, a.tail], [b.conv_in, *b.frames, *b.sub, b.tail], strict=True):
        torch.testing.assert_close(x, y, atol=1e-5, rtol=0)


@pytest.mark.parametrize("call_frames", [0.0, 12.0, 1e9])
def test_causal_chunks_of_several_lengths_decode_together_as_each_stream_alone(call_frames):
    """Six causal streams that start at different steps and push the engine's growing chunks (1, 2, 4, 8, 16, the
    rest; the last push flushes), so a step holds chunks of several lengths: the padded calls give each stream, at
    every step, the audio and the carried state of its own decoder fed alone (the per-stream path), and its whole
    audio equals the full decode. ``call_frames`` 0 pads nothing (one call per length), 1e9 makes one call a step."""
    codec = _causal_codec()
    codec.stream_call_frames = call_frames
    lengths = [40, 23, 37, 9, 31, 16]
    codes = [_codes(codec, n, 20 + i) for i, n in enumerate(lengths)]  # (1, K, T) each
    plans = [_engine_chunks(n) for n in lengths]
    calls: list[int] = []
    batched = [_counting(codec.stream_decoder(), calls) for _ in lengths]
    solo = [codec.stream_decoder() for _ in lengths]
    got: list[list[torch.Tensor]] = [[] for _ in lengths]
    mixed_steps = 0
    for step in range(max(len(p) + 2 * i for i, p in enumerate(plans))):
        live = [i for i, plan in enumerate(plans) if 0 <= step - 2 * i < len(plan)]  # stream i starts at step 2i
        if not live:
            continue
        chunks, final = [], []
        for i in live:
            k = step - 2 * i
            at = sum(plans[i][:k])
            chunks.append(codes[i][..., at : at + plans[i][k]])
            final.append(k == len(plans[i]) - 1)
        mixed_steps += len({c.shape[-1] for c in chunks}) > 1
        before = len(calls)
        for i, chunk, end, audio in zip(live, chunks, final, push_many([batched[i] for i in live], chunks, final)):
            alone = solo[i].push(chunk)
            torch.testing.assert_close(audio, torch.cat([alone, solo[i].flush()], -1) if end else alone,
                                       atol=1e-5, rtol=0)
            if not end:
                _assert_same_state(batched[i]._state, solo[i]._state)
            got[i].append(audio)
        distinct = len({c.shape[-1] for c in chunks})
        if call_frames == 0.0:
            assert len(calls) - before == distinct
        elif call_frames == 1e9:
            assert len(calls) - before == 1
    assert mixed_steps >= 5
    for i in range(len(lengths)):
        torch.testing.assert_close(torch.cat(got[i], -1), codec.decode(codes[i]).audio, atol=1e-5, rtol=0)


def test_a_padded_call_mixes_streams_of_several_rows():
    """A stream may hold B > 1 rows (one decoder for a batch): its rows all get its chunk's length."""
    codec = _causal_codec()
    codec.stream_call_frames = 1e9
    two, one = _codes(codec, 12, 1).repeat(2, 1, 1), _codes(codec, 12, 2)  # (2, K, 12), (1, K, 12)
    two[1] = _codes(codec, 12, 3)[0]
    decs = [codec.stream_decoder(), codec.stream_decoder()]
    first = push_many(decs, [two[..., :3], one[..., :7]])
    second = push_many(decs, [two[..., 3:], one[..., 7:]], [True, True])
    torch.testing.assert_close(torch.cat([first[0], second[0]], -1), codec.decode(two).audio, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.cat([first[1], second[1]], -1), codec.decode(one).audio, atol=1e-5, rtol=0)
