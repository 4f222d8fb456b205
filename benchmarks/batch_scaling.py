"""What bounds N concurrent streams of the engine: the model step on the engine thread, the codec on its own thread,
each timed at N streams, and the engine itself at N streams, in process.

    PYTHONPATH=src .venv/bin/python benchmarks/batch_scaling.py [--streams 1 8 32 64] [--chunk 16] [--steps 32]
        [--codecs duet-fsq duet-fsq-causal] [--threads 1] [--frames 64] [--out benchmarks/results/batch_scaling.md]

The built-in engine (``duet.serve.engine``) steps the model on its thread, one frame for every running stream per
step (``FamilyRuntime.step``: the batched model step and the sampler), and hands each stream's new frames to the
codec thread (``duet.serve.decode_worker``), which decodes them with the stream's decoder, batched across streams
(``duet.codecs.streaming.push_many``), while the engine thread goes on. So N streams cost, per frame of each,

    t(N) = max(t_model(N), t_codec(N) / chunk)

(the two threads overlap; on one thread it was their sum), where ``t_model(N)`` is one engine step at N streams and
``t_codec(N)`` one batched decoder call over N chunks of ``--chunk`` frames. Both are measured here, outside the
engine (gepard-tiny with random weights, as in ``serve_bench.py``: the same compute; the shipped codec weights when
present), median of ``--steps`` calls after warm-up, with ``--threads`` torch threads (the engine's default is 1);
N / t(N) is the most frames per second the engine can give N streams. Then the engine itself: N streams of
``--frames`` frames each submitted at once to an in-process ``Engine`` (no HTTP; the chunk sizes grow from one frame
as served), frames per second from the first submit to the last end, and the speed-up over one stream. The
concurrency sweep (``serve_bench.py``) measures what the server reaches with HTTP and its clients on the same cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch
from serve_bench import codec_dir, make_gepard_tiny

TEXT = "The museum opens at nine in the morning and closes at six, every day of the week."


def median_ms(fn, calls: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def model_step_ms(runtime, n: int, steps: int) -> float:
    """One engine step (model + sampler) with ``n`` streams running, each well inside its frame bound."""
    from duet.sampling import SamplingParams
    from duet.tts.request import SynthesisRequest

    params = SamplingParams(seed=0, max_frames=steps + 8)  # the engine, not the step, applies the stop rule
    states = runtime.prefill([SynthesisRequest(text=TEXT, params=params) for _ in range(n)], list(range(n)))
    try:
        return median_ms(lambda: runtime.step(states), steps)
    finally:
        for s in states:
            runtime.release(s)


def engine_frames_per_s(runtime, n: int, frames: int, threads: int, chunk: int) -> float:
    """Frames per second of an in-process engine serving ``n`` streams of ``frames`` frames each, submitted at once
    (after one warm-up stream)."""
    from duet.sampling import SamplingParams
    from duet.serve.engine import Engine, EngineConfig
    from duet.serve.scheduler import SchedulerConfig
    from duet.tts.request import SynthesisRequest

    config = EngineConfig(scheduler=SchedulerConfig(max_running=max(n, 1), max_waiting=max(n, 1)),
                          torch_threads=threads, max_chunk_frames=chunk)
    params = SamplingParams(max_frames=frames, stop_threshold=0.999)  # random weights never stop: exactly `frames`
    with Engine(runtime, config) as engine:
        engine.submit(SynthesisRequest(text=TEXT, params=params)).collect(timeout=600)
        start = time.perf_counter()
        handles = [engine.submit(SynthesisRequest(text=TEXT, params=replace(params, seed=i))) for i in range(n)]
        done = sum(h.collect(timeout=600)[1].frames for h in handles)
        return done / (time.perf_counter() - start)


def codec_ms(codec, n: int, chunk: int, calls: int) -> float:
    """One batched stream-decoder call over ``n`` streams' chunks of ``chunk`` frames (each stream primed first)."""
    from duet.codecs.streaming import push_many

    decoders = [codec.stream_decoder() for _ in range(n)]
    gen = torch.Generator().manual_seed(0)

    def codes() -> list[torch.Tensor]:
        return [torch.stack([torch.randint(0, k, (chunk,), generator=gen) for k in codec.codebook_sizes])
                for _ in range(n)]  # (K, chunk) per stream

    with torch.inference_mode():
        for _ in range(3):  # prime: a context decoder fills its look-ahead, a stateful one its state
            push_many(decoders, codes())
        return median_ms(lambda: push_many(decoders, codes()), calls, warmup=0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--chunk", type=int, default=16, help="frames per codec call (the engine's max_chunk_frames)")
    p.add_argument("--steps", type=int, default=32, help="timed calls per measurement (median)")
    p.add_argument("--codecs", nargs="+", default=["duet-fsq", "duet-fsq-causal"])
    p.add_argument("--threads", type=int, default=1, help="torch threads (the engine's default is 1)")
    p.add_argument("--frames", type=int, default=64, help="frames per stream of the in-process engine run")
    p.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    args = p.parse_args(argv)
    args.streams = sorted({1, *args.streams})  # the speed-up is over one stream
    torch.set_num_threads(args.threads)

    from duet.codecs import load as load_codec
    from duet.tts import load_runtime

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gepard = make_gepard_tiny(root)
        codecs = {name: codec_dir(name, root) for name in args.codecs}
        runtime = load_runtime(str(gepard), codec=str(codecs[args.codecs[0]][0]), name="gepard")
        model = {n: model_step_ms(runtime, n, args.steps) for n in args.streams}
        lines.append(f"gepard-tiny (random weights), {args.threads} torch thread(s) per thread, chunks of "
                     f"{args.chunk} frames; ms are medians of {args.steps} calls; engine: {args.frames} frames per "
                     "stream, in process.\n")
        lines.append("| codec | streams | model step ms | codec call ms | codec ms per frame | frames/s ceiling | "
                     "speed-up ceiling | engine frames/s | engine speed-up |")
        lines.append("|---|---|---|---|---|---|---|---|---|")
        for name in args.codecs:
            codec_path = str(codecs[name][0])
            codec = load_codec(codec_path)
            served = load_runtime(str(gepard), codec=codec_path, name="gepard")
            base = engine_base = 0.0
            for n in args.streams:
                c = codec_ms(codec, n, args.chunk, max(4, args.steps // 4))
                per_frame = max(model[n], c / args.chunk)  # the two threads overlap
                fps = 1000 * n / per_frame
                base = base or fps  # one stream's: the first row
                measured = engine_frames_per_s(served, n, args.frames, args.threads, args.chunk)
                engine_base = engine_base or measured
                lines.append(f"| {name} ({codecs[name][1]}) | {n} | {model[n]:.2f} | {c:.1f} | {c / args.chunk:.2f} | "
                             f"{fps:.0f} | {fps / base:.1f}x | {measured:.0f} | {measured / engine_base:.1f}x |")
                print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(f"`{' '.join(['python', *sys.argv])}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
