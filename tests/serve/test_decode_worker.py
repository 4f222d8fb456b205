"""The codec thread with a micro causal codec (random fsq-tiny weights, a causal decoder that carries its state):
a step's chunks reach it as one message and decode in one batched call, and every stream's audio is what its own
decoder gives alone (the per-stream path), through the worker and through the engine."""

import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from serve_testing import drive

from duet.codecs.registry import build
from duet.codecs.streaming import StatefulStreamDecoder
from duet.sampling import SamplingParams
from duet.serve.decode_worker import DecodeWorker, _Backlog
from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.scheduler import SchedulerConfig
from duet.train.codec_config import preset
from duet.tts.request import SynthesisRequest


class CountingCodec:
    """A codec whose stream decoders record the rows of every batched decode call."""

    def __init__(self, codec, call_frames: float | None = None):
        self.codec, self.calls = codec, []
        if call_frames is not None:
            codec.stream_call_frames = call_frames

    def __getattr__(self, name):
        return getattr(self.codec, name)

    def stream_decoder(self):
        dec = self.codec.stream_decoder()
        assert isinstance(dec, StatefulStreamDecoder)
        inner = dec.decode_chunk

        def chunk(codes, state, *lengths):
            self.calls.append(codes.shape[0])
            return inner(codes, state, *lengths)

        dec.decode_chunk = chunk
        return dec


@pytest.fixture(scope="module")
def causal():
    torch.manual_seed(0)
    cfg = preset("fsq-tiny")
    return build(cfg.kind, replace(cfg.model, causal_decoder=True)).eval()


def _codes(codec, frames: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randint(0, n, (frames,), generator=g) for n in codec.codebook_sizes])  # (K, T)


def _collector():
    audio: dict = {}
    closed: dict = {}
    return audio, closed, dict(on_audio=lambda k, a: audio.setdefault(k, []).append(a),
                               on_close=lambda k, e: closed.__setitem__(k, e),
                               on_failure=lambda k, e: None)


def test_a_tick_s_chunks_decode_in_one_call_and_each_stream_hears_its_own_decode(causal):
    """Five streams push chunks of five lengths in one tick, then their last chunks and ends in a second: one
    decode call per tick (an end in the middle of a tick does not split it), and each stream's audio is its
    frames decoded alone, chunk by chunk, and whole."""
    codec = CountingCodec(causal, call_frames=1e9)
    audio, closed, callbacks = _collector()
    worker = DecodeWorker(codec, **callbacks)
    firsts, lasts = [1, 2, 4, 8, 16], [5, 0, 3, 9, 2]
    codes = {k: _codes(causal, a + b, k) for k, (a, b) in enumerate(zip(firsts, lasts))}
    with worker.tick():
        for k, n in enumerate(firsts):
            worker.push(k, codes[k][:, :n])
        assert worker.backlog == 0  # gathered until the tick ends
    assert worker.backlog == 5
    with worker.tick():
        for k, n in enumerate(firsts):
            worker.push(k, codes[k][:, n:], flush=True)
            worker.close(k)
    assert worker.backlog == 15  # chunks and ends
    worker.start(torch_threads=1)
    worker.stop()
    assert codec.calls == [5, 4]  # stream 1 ends on an empty chunk: nothing to decode
    assert closed == {k: None for k in codes}
    for k, n in enumerate(firsts):
        alone = causal.stream_decoder()
        own = [alone.push(codes[k][None, :, :n]), alone.push(codes[k][None, :, n:]), alone.flush()]
        expected = torch.cat(own, -1)[0].numpy()
        np.testing.assert_allclose(np.concatenate(audio[k]), expected, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.concatenate(audio[k]), causal.decode(codes[k][None]).audio[0].numpy(),
                                   atol=1e-5, rtol=0)


def test_the_backlog_is_bounded_by_items_and_takes_whole_messages():
    backlog = _Backlog(bound=3)
    backlog.put([1, 2, 3, 4])  # larger than the bound: taken into an empty backlog
    put = threading.Thread(target=backlog.put, args=([5],))
    put.start()
    put.join(0.2)
    assert put.is_alive() and len(backlog) == 4  # waits for room
    assert backlog.take(limit=2) == [1, 2, 3, 4]  # at least one whole message
    put.join(5)
    backlog.put([6, 7])
    assert backlog.take(limit=2) == [5]  # [6, 7] would pass the limit
    assert backlog.take(limit=8) == [6, 7] and len(backlog) == 0


def test_concurrent_streams_through_the_engine_hear_their_own_decode(causal):
    """Streams that join at different steps (so their chunks differ in length in a step) through the engine with
    the causal micro codec: each one's audio is its frames (the mock's, replayed for its seed) decoded alone."""
    codec = CountingCodec(causal)
    runtime = MockRuntime(MockConfig(channel_levels=causal.codebook_sizes, sample_rate=causal.sample_rate,
                                     samples_per_frame=causal.samples_per_frame, step_delay_s=0.002),
                          script=lambda request: None)  # never stops: each ends at its bound
    runtime.codec = codec
    lengths = [40, 23, 37, 9, 31]
    requests = [SynthesisRequest(text="hello", params=SamplingParams(seed=i, max_frames=n, temperature=1.0))
                for i, n in enumerate(lengths)]
    config = EngineConfig(scheduler=SchedulerConfig(max_running=8), torch_threads=1, max_chunk_frames=16)
    with Engine(runtime, config) as engine:
        handles = []
        for request in requests:
            handles.append(engine.submit(request))
            time.sleep(0.01)  # joins a few steps after the one before
        served = [h.collect(timeout=60) for h in handles]
    replay = MockRuntime(runtime.config, script=lambda request: None)
    for (audio, info), request in zip(served, requests):
        assert (info.reason, info.frames) == ("bound", request.params.max_frames)
        frames = drive(replay, [(0, request)])[0]  # (K, T)
        expected = causal.decode(frames[None]).audio[0].numpy()
        np.testing.assert_allclose(audio, expected, atol=1e-5, rtol=0)
