"""The continuous-batching engine on the mock model (uniform logits, scripted stop): no weights needed."""

import asyncio
import random
import time

import numpy as np
import pytest
from serve_testing import make_engine, wait_until

from duet.errors import DuetError
from duet.sampling import SamplingParams
from duet.serve.engine import Engine, EngineConfig
from duet.serve.errors import InvalidRequest, QueueFull
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.scheduler import SchedulerConfig
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import StepOutput

SPF = MockConfig().samples_per_frame


def by_length(request: SynthesisRequest) -> int:
    """Script: the text is the number of frames to speak."""
    return int(request.text)


def req(n: int | str, seed: int = 0, **params) -> SynthesisRequest:
    return SynthesisRequest(text=str(n), params=SamplingParams(seed=seed, **params))


def test_many_concurrent_requests_get_exactly_their_scripted_lengths():
    engine, runtime = make_engine(script=by_length, max_running=6, max_waiting=40)
    lengths = random.Random(0).choices(range(1, 40), k=30)
    with engine:
        handles = [engine.submit(req(n, seed=i)) for i, n in enumerate(lengths)]
        results = [h.collect(timeout=30) for h in handles]
    for n, (audio, info) in zip(lengths, results):
        assert (info.reason, info.frames, info.samples, audio.size) == ("stop", n, n * SPF, n * SPF)
    stats = engine.stats()
    assert stats.finished["stop"] == 30 and stats.frames == sum(lengths)
    assert stats.running == stats.waiting == stats.cache_bytes_used == 0
    assert runtime.live_states == 0
    assert stats.steps < sum(lengths)  # requests really shared steps


@pytest.mark.parametrize(("first", "largest", "sizes"), [
    (1, 8, [1, 2, 4, 8, 8, 8, 8, 1]),  # doubling after the first audio, capped; the rest at the end
    (1, 1, [1] * 40),  # every frame alone
    (3, 16, [3, 6, 12, 16, 3]),
])
def test_chunks_grow_from_the_first_size_to_the_largest(first, largest, sizes):
    engine, _ = make_engine(script=by_length, chunk_frames=first, max_chunk_frames=largest)
    with engine:
        chunks = list(engine.submit(req(40)))
    assert [c.size // SPF for c in chunks] == sizes
    with pytest.raises(DuetError):
        make_engine(chunk_frames=4, max_chunk_frames=2)


def test_the_engine_thread_runs_torch_with_its_own_thread_count():
    import torch

    from duet.serve.engine import EngineConfig

    seen = []
    engine, runtime = make_engine(script=by_length)
    engine.config = EngineConfig(scheduler=engine.config.scheduler, torch_threads=1)
    step = runtime.step
    runtime.step = lambda states: (seen.append(torch.get_num_threads()), step(states))[1]
    with engine:
        engine.submit(req(3)).collect(timeout=30)
    assert seen and set(seen) == {1}
    with pytest.raises(DuetError):
        EngineConfig(torch_threads=0)


def test_joining_midway_changes_nobody_s_output():
    mock = MockConfig(step_delay_s=0.002)
    solo = {}
    for n, seed in ((30, 1), (12, 2), (20, 3)):
        engine, _ = make_engine(mock, script=by_length, max_chunk_frames=1)
        with engine:
            solo[seed] = engine.submit(req(n, seed)).collect()[0]

    engine, _ = make_engine(mock, script=by_length, max_running=4, max_chunk_frames=1)  # a chunk per frame
    with engine:
        first = engine.submit(req(30, 1))
        chunks = iter(first)
        got = [next(chunks) for _ in range(5)]  # first is 5 frames in when the others arrive
        second = engine.submit(req(12, 2))
        got += [next(chunks) for _ in range(5)]
        third = engine.submit(req(20, 3))
        got += list(chunks)
        joined = {1: np.concatenate(got), 2: second.collect()[0], 3: third.collect()[0]}
    for seed in solo:
        assert np.array_equal(joined[seed], solo[seed]), f"request with seed {seed} changed when batched"
    assert not np.array_equal(solo[2][: 12 * SPF], solo[1][: 12 * SPF])  # seeds matter at all


def test_per_request_sampling_parameters_are_honoured():
    engine, runtime = make_engine(script=by_length, max_running=8)
    codec = runtime.codec
    with engine:
        handles = {
            "greedy": engine.submit(req(20, 1, temperature=0.0)),
            "top_k": engine.submit(req(40, 2, top_k=2)),
            "top_p": engine.submit(req(40, 3, top_p=0.25)),
            "free": engine.submit(req(40, 4)),
            "free_again": engine.submit(req(40, 4)),
            "other_seed": engine.submit(req(40, 5)),
            "short_bound": engine.submit(req(40, 6, max_frames=9)),
        }
        codes = {k: codec.codes_from_audio(h.collect()[0]) for k, h in handles.items()}
    assert (codes["greedy"] == 0).all()
    assert set(np.unique(codes["top_k"])) == {0, 1}
    assert set(np.unique(codes["top_p"])) == {0, 1}
    assert codes["free"].max() == 7  # the full alphabet of the 8-level channels
    assert np.array_equal(codes["free"], codes["free_again"])
    assert not np.array_equal(codes["free"], codes["other_seed"])
    assert codes["short_bound"].shape[1] == 9


def test_stop_threshold_is_per_request():
    engine, _ = make_engine(MockConfig(stop_prob=0.6), script=by_length)
    with engine:
        low = engine.submit(req(5, stop_threshold=0.5))
        high = engine.submit(req(5, stop_threshold=0.7, max_frames=12))
        assert low.collect()[1].reason == "stop" and low.finish.frames == 5
        assert high.collect()[1].reason == "bound" and high.finish.frames == 12


def test_length_bound_ends_a_request_that_never_stops(never_stop):
    engine, runtime = make_engine(MockConfig(max_frames=25), script=never_stop)
    with engine:
        bounded = engine.submit(req("x", max_frames=7)).collect()
        default = engine.submit(req("y")).collect()
    assert (bounded[1].reason, bounded[1].frames, bounded[0].size) == ("bound", 7, 7 * SPF)
    assert (default[1].reason, default[1].frames) == ("bound", 25)  # the runtime's own bound
    with pytest.raises(InvalidRequest):
        engine.submit(req("z", max_frames=26))


def test_full_queue_refuses_with_retry_after(never_stop):
    engine, _ = make_engine(MockConfig(step_delay_s=0.01), script=never_stop, max_running=2, max_waiting=1,
                            retry_after_s=3.0)
    with engine:
        handles = [engine.submit(req("x", seed=i)) for i in range(3)]
        with pytest.raises(QueueFull) as err:
            engine.submit(req("x"))
        assert err.value.retry_after_s == 3.0
        wait_until(lambda: engine.stats().running == 2, what="two running")
        assert engine.stats().waiting == 1
        for h in handles:
            h.cancel()
        wait_until(lambda: engine.stats().running + engine.stats().waiting == 0, what="queue drained")
        engine.submit(req("2", seed=9))  # accepted again


def test_cancel_frees_the_slot_and_cache(never_stop):
    engine, runtime = make_engine(MockConfig(step_delay_s=0.005), script=never_stop, max_running=1)
    with engine:
        hog = engine.submit(req("x"))
        chunks = iter(hog)
        next(chunks)  # running, holding the only slot
        waiting = engine.submit(req("y", max_frames=3))
        time.sleep(0.05)
        assert engine.stats().waiting == 1
        hog.cancel()
        audio, info = waiting.collect(timeout=10)
        assert (info.reason, info.frames) == ("bound", 3)
        wait_until(lambda: hog.finish is not None, what="the cancel to be processed")
    assert hog.finish.reason == "cancelled"
    assert runtime.live_states == 0 and engine.stats().cache_bytes_used == 0


def test_dropping_the_async_iterator_cancels(never_stop):
    engine, runtime = make_engine(MockConfig(step_delay_s=0.002), script=never_stop)

    async def consume_three() -> None:
        handle = engine.submit(req("x"))
        n = 0
        async for _ in handle:
            n += 1
            if n == 3:
                break  # the async generator's finally cancels, as a client disconnect does in the API

    with engine:
        asyncio.run(consume_three())
        wait_until(lambda: engine.stats().finished["cancelled"] == 1, what="cancelled")
        assert engine.stats().running == 0 and runtime.live_states == 0


def test_cache_budget_is_respected(never_stop):
    mock = MockConfig(cache_bytes_per_position=100)
    # Each request reserves (8 prefix + 1 text + 3 service + 20 frames) positions x 100 bytes = 3200 bytes.
    engine, runtime = make_engine(mock, script=never_stop, max_running=8, cache_budget_bytes=7000)
    with engine:
        handles = [engine.submit(req(str(i), seed=i, max_frames=20)) for i in range(6)]
        peak = 0
        while not all(h.finish for h in handles):
            stats = engine.stats()
            assert stats.cache_bytes_used <= 7000
            peak = max(peak, stats.running)
            time.sleep(0.001)
        with pytest.raises(InvalidRequest) as err:
            engine.submit(req("long", max_frames=100))  # 11 + 100 positions can never fit 7000 bytes
        assert err.value.code == "context_length_exceeded"
    assert all(h.finish.frames == 20 for h in handles)
    assert peak <= 2
    assert runtime.max_live_cache_bytes <= 7000  # what the model really held, not only what was reserved


class FailingRuntime(MockRuntime):
    """Raises in step when a request whose text is "boom" is in the batch: a model error in one request."""

    def step(self, states):
        if any(s.request.text == "boom" for s in states):
            raise RuntimeError("kaboom")
        return super().step(states)


def test_a_model_error_ends_only_its_request_and_the_others_are_bit_identical():
    """A failure inside a batched step ends the request that causes it; the requests batched with it go on with
    exactly the audio of a run without it, and the engine keeps serving."""
    from duet.serve.errors import GenerationFailed

    def run(texts):
        with Engine(FailingRuntime(), EngineConfig(scheduler=SchedulerConfig(max_running=8))) as engine:
            handles = [engine.submit(SynthesisRequest(text=t, params=SamplingParams(seed=len(t), temperature=0.7)))
                       for t in texts]
            results = []
            for h in handles:
                try:
                    results.append(h.collect(timeout=30))
                except GenerationFailed as err:
                    results.append(err)
            return results, engine.stats()

    clean, _ = run(["four", "sixsix", "nine"])
    hurt, stats = run(["four", "sixsix", "boom", "nine"])
    assert isinstance(hurt[2], GenerationFailed) and "kaboom" in str(hurt[2])
    for (audio, info), (want, want_info) in zip([hurt[0], hurt[1], hurt[3]], clean):
        assert info.reason == want_info.reason == "stop" and np.array_equal(audio, want)
    assert stats.finished["error"] == 1 and stats.finished["stop"] == 3


def test_a_runtime_can_fail_one_request_of_a_step_without_raising():
    class OneFails(MockRuntime):
        def step(self, states):
            outs = super().step(states)
            return [StepOutput(codes=o.codes, error="bad block") if s.request.text == "boom" else o
                    for o, s in zip(outs, states)]

    from duet.serve.errors import GenerationFailed

    with Engine(OneFails()) as engine:
        bad, good = engine.submit(SynthesisRequest(text="boom")), engine.submit(req("four"))
        with pytest.raises(GenerationFailed, match="bad block"):
            bad.collect(timeout=30)
        assert good.collect(timeout=30)[1].frames == 4


def test_non_ar_runtime_final_flag_ends_a_request():
    """A Luna-style runtime emits whole blocks and says `final`; the engine needs no stop probability."""

    class BlockRuntime(MockRuntime):
        def step(self, states):
            outs = super().step(states)
            return [StepOutput(codes=o.codes.repeat(1, 4), final=s.emitted >= 3) for o, s in zip(outs, states)]

    with Engine(BlockRuntime(script=lambda r: None)) as engine:
        audio, info = engine.submit(req("x")).collect()
    assert (info.reason, info.frames, audio.size) == ("stop", 12, 12 * SPF)


def test_submit_after_stop_is_refused():
    engine, _ = make_engine()
    engine.start()
    engine.stop()
    from duet.serve.errors import EngineClosed

    with pytest.raises(EngineClosed):
        engine.submit(req(3))


def test_a_request_past_its_time_budget_ends_alone_and_frees_its_slot():
    """A request may take time_budget_s + time_budget_per_audio_s x the audio its bound allows; one that never
    stops (a stuck model) ends as an error with code "timeout", and a short request beside it is untouched."""
    from duet.serve.errors import GenerationFailed

    script = lambda request: None if request.text == "stuck" else 4  # noqa: E731
    config = EngineConfig(scheduler=SchedulerConfig(max_running=4), time_budget_s=0.3, time_budget_per_audio_s=0.0)
    with Engine(MockRuntime(MockConfig(step_delay_s=0.01, max_frames=100_000), script=script), config) as engine:
        assert engine.time_budget(50) == pytest.approx(0.3)
        stuck, short = engine.submit(SynthesisRequest(text="stuck")), engine.submit(req("x", seed=1))
        assert short.collect(timeout=30)[1].reason == "stop"
        started = time.perf_counter()
        with pytest.raises(GenerationFailed, match="time budget") as err:
            stuck.collect(timeout=30)
        assert err.value.code == "timeout" and time.perf_counter() - started < 5
        assert stuck.finish.reason == "error" and stuck.finish.code == "timeout"
        stats = engine.stats()
        assert stats.running == stats.waiting == stats.cache_bytes_used == 0


def test_the_time_budget_grows_with_the_audio_a_request_may_make():
    engine = Engine(MockRuntime(), EngineConfig(time_budget_s=60.0, time_budget_per_audio_s=10.0))  # 50 frames/s
    assert engine.time_budget(50) == pytest.approx(70.0) and engine.time_budget(500) == pytest.approx(160.0)
    with pytest.raises(DuetError):
        EngineConfig(time_budget_s=0.0)


def test_a_request_that_cannot_end_within_its_budget_is_refused_at_once_and_one_that_can_is_taken():
    """Admission by cost: after the first steps are timed (10 ms each, the mock's sleep), a request of 200 steps
    against a 1 s budget is refused before it is queued (Overloaded, with a time to retry), and one of 20 is taken
    and ends in time."""
    from duet.serve.errors import Overloaded

    config = EngineConfig(time_budget_s=1.0, time_budget_per_audio_s=0.0)
    with Engine(MockRuntime(MockConfig(step_delay_s=0.01), script=by_length), config) as engine:
        assert engine.submit(req(5)).collect(timeout=30)[1].reason == "stop"  # nothing timed yet: taken
        started = time.perf_counter()
        with pytest.raises(Overloaded, match="time budget") as err:
            engine.submit(req(200))
        assert time.perf_counter() - started < 0.1 and err.value.retry_after_s > 0
        assert engine.stats().waiting == engine.stats().running == 0  # never queued
        audio, info = engine.submit(req(20, seed=1)).collect(timeout=30)
        assert (info.reason, info.frames) == ("stop", 20) and info.wall_s < 1.0


def test_under_load_the_engine_takes_what_it_can_finish_and_refuses_the_rest():
    """Many requests at once on a slow model: the ones taken all end within their budget (no timeout), the others
    are refused at submission."""
    from duet.serve.errors import GenerationFailed, Overloaded

    config = EngineConfig(scheduler=SchedulerConfig(max_running=2, max_waiting=32), time_budget_s=1.5,
                          time_budget_per_audio_s=0.0)
    with Engine(MockRuntime(MockConfig(step_delay_s=0.01), script=by_length), config) as engine:
        engine.submit(req(3)).collect(timeout=30)  # the clock's first timings
        taken, refused = [], 0
        for i in range(20):
            try:
                taken.append(engine.submit(req(30, seed=i)))
            except Overloaded:
                refused += 1
        assert taken and refused
        for handle in taken:
            try:
                assert handle.collect(timeout=30)[1].reason == "stop"
            except GenerationFailed as err:  # pragma: no cover - the failure this test guards against
                pytest.fail(f"a request the engine took ran out of time: {err}")


def test_admission_by_cost_can_be_turned_off():
    from duet.serve.cost import CostConfig

    config = EngineConfig(time_budget_s=0.2, time_budget_per_audio_s=0.0, cost=CostConfig(headroom=None))
    with Engine(MockRuntime(MockConfig(step_delay_s=0.01), script=by_length), config) as engine:
        engine.submit(req(3)).collect(timeout=30)
        engine.submit(req(100)).cancel()  # taken, however long it would take


def test_the_codec_runs_on_its_own_thread_and_a_codec_failure_ends_only_its_request():
    """Audio is decoded beside the model step, on the codec thread; a codec call that raises fails the requests of
    that call (their decoders' state is unknown), the engine releases their model state, and it keeps serving."""
    import threading

    from duet.serve.errors import GenerationFailed
    from duet.serve.mock import MockStreamDecoder

    threads = set()
    push = MockStreamDecoder.push

    def tracked(self, codes):
        threads.add(threading.current_thread().name)
        if (codes.float() == 7).any() and fail[0]:
            raise RuntimeError("codec broke")
        return push(self, codes)

    fail = [False]
    runtime = MockRuntime(script=by_length)
    with Engine(runtime, EngineConfig(max_chunk_frames=1)) as engine:
        MockStreamDecoder.push = tracked
        try:
            assert engine.submit(req(4)).collect(timeout=30)[1].reason == "stop"
            assert threads == {"duet-codec"}
            fail[0] = True
            with pytest.raises(GenerationFailed, match="codec decode failed"):
                engine.submit(req(400, temperature=1.0)).collect(timeout=30)  # samples a 7 sooner or later
            fail[0] = False
            assert engine.submit(req(4, seed=3)).collect(timeout=30)[1].reason == "stop"
        finally:
            MockStreamDecoder.push = push
    assert runtime.live_states == 0 and engine.stats().finished["error"] == 1


def test_audio_and_chunks_are_the_same_whatever_the_codec_thread_s_lag():
    """A codec that lags the model (here: 5 ms per call) changes when audio arrives, never what it is: the chunk
    sizes follow frame counts alone, and each stream's audio equals its run without the lag."""
    from duet.serve.mock import MockStreamDecoder

    def chunks() -> tuple[list[list[int]], list[np.ndarray]]:
        engine, _ = make_engine(script=by_length, max_running=4)
        with engine:
            handles = [engine.submit(req(n, seed=n)) for n in (40, 25, 33)]
            got = [list(h) for h in handles]
        return [[c.size // SPF for c in g] for g in got], [np.concatenate(g) for g in got]

    fast_sizes, fast_audio = chunks()
    push = MockStreamDecoder.push
    MockStreamDecoder.push = lambda self, codes: (time.sleep(0.005), push(self, codes))[1]
    try:
        slow_sizes, slow_audio = chunks()
    finally:
        MockStreamDecoder.push = push
    assert slow_sizes == fast_sizes and fast_sizes[0][:5] == [1, 2, 4, 8, 16]
    for a, b in zip(fast_audio, slow_audio):
        assert np.array_equal(a, b)


def test_a_codec_with_look_ahead_gets_single_frames_until_its_first_audio_then_doubling_chunks():
    """A decoder that holds ``right`` frames back (``ContextStreamDecoder``, duet-fsq's kind) is fed one frame at a
    time until it gives audio, then chunks double: the sizes follow frame counts, as they did on one thread, and
    the audio is the full decode's."""
    from duet.codecs.streaming import ContextStreamDecoder
    from duet.serve.mock import MockCodec

    class LookAheadCodec(MockCodec):
        def stream_decoder(self):
            return ContextStreamDecoder(lambda codes: self.decode(codes).audio, left=2, right=3,
                                        samples_per_frame=self.samples_per_frame)

    runtime = MockRuntime(script=by_length)
    runtime.codec = LookAheadCodec(runtime.codec.sample_rate, SPF, runtime.codec.codebook_sizes)
    with Engine(runtime, EngineConfig(chunk_frames=1, max_chunk_frames=8)) as engine:
        chunks = list(engine.submit(req(30, seed=2)))
    assert [c.size // SPF for c in chunks] == [1, 2, 4, 8, 8, 7]  # pushes 1, 1, 1, 1 (first audio), 2, 4, 8, 8, end
    reference, _ = make_engine(script=by_length)
    with reference:
        whole = reference.submit(req(30, seed=2)).collect(timeout=30)[0]
    np.testing.assert_allclose(np.concatenate(chunks), whole, atol=1e-5)  # windows of other lengths: rounding


def test_wide_steps_run_with_their_own_torch_threads():
    """A step of at least wide_step_positions positions (the mock's requests take one each) runs with
    wide_step_threads; a smaller one with torch_threads, and the codec thread keeps torch_threads."""
    import torch

    seen = []
    runtime = MockRuntime(MockConfig(step_delay_s=0.002), script=by_length)
    step = runtime.step
    runtime.step = lambda states: (seen.append((len(states), torch.get_num_threads())), step(states))[1]
    config = EngineConfig(scheduler=SchedulerConfig(max_running=4), torch_threads=1, wide_step_threads=2,
                          wide_step_positions=3)
    with Engine(runtime, config) as engine:
        engine.submit(req(3)).collect(timeout=30)
        handles = [engine.submit(req(10, seed=i)) for i in range(4)]
        for h in handles:
            h.collect(timeout=30)
    assert {threads for n, threads in seen if n < 3} == {1}
    assert {threads for n, threads in seen if n >= 3} == {2}
    with pytest.raises(DuetError):
        EngineConfig(wide_step_threads=0)
