"""What bounds N concurrent streams on the engine's one thread: the model step and the codec, each timed at N streams.

    PYTHONPATH=src .venv/bin/python benchmarks/batch_scaling.py [--streams 1 8 32 64] [--chunk 16] [--steps 32]
        [--codecs duet-fsq duet-fsq-causal] [--threads 1] [--out benchmarks/results/batch_scaling.md]

The built-in engine runs everything a stream needs on one thread (``duet.serve.engine``): each step it decodes one
frame for every running stream (``FamilyAdapter.step``: the batched model step and the sampler) and hands each
stream's new frames to its codec stream decoder, batched across streams (``duet.codecs.streaming.push_many``). So
N streams cost, per frame of each,

    t(N) = t_model(N) + t_codec(N) / chunk

where ``t_model(N)`` is one engine step at N streams and ``t_codec(N)`` one batched decoder call over N chunks of
``--chunk`` frames. Both are measured here, outside the server (gepard-tiny with random weights, as in
``serve_bench.py``: the same compute; the shipped codec weights when present), median of ``--steps`` calls after
warm-up, with ``--threads`` torch threads (the engine's default is 1). The frames per second the engine thread can
give N streams is at most N / t(N), and the speed-up over one stream at most (N / t(N)) / (1 / t(1)); the
concurrency sweep (``serve_bench.py``) measures what the server reaches, with HTTP, chunk sizes that grow from one
frame, and the clients on the same cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
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


def model_step_ms(adapter, n: int, steps: int) -> float:
    """One engine step (model + sampler) with ``n`` streams running, each well inside its frame bound."""
    from duet.tts.request import SynthesisRequest
    from duet.tts.sampling import SamplingParams

    params = SamplingParams(seed=0, max_frames=steps + 8)  # the engine, not the step, applies the stop rule
    states = adapter.prefill([SynthesisRequest(text=TEXT, params=params) for _ in range(n)], list(range(n)))
    try:
        return median_ms(lambda: adapter.step(states), steps)
    finally:
        for s in states:
            adapter.release(s)


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
    p.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    args = p.parse_args(argv)
    args.streams = sorted({1, *args.streams})  # the speed-up is over one stream
    torch.set_num_threads(args.threads)

    from duet.codecs import load as load_codec
    from duet.serve.adapter import load_adapter

    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        gepard = make_gepard_tiny(root)
        codecs = {name: codec_dir(name, root) for name in args.codecs}
        adapter = load_adapter(str(gepard), codec=str(codecs[args.codecs[0]][0]), name="gepard")
        model = {n: model_step_ms(adapter, n, args.steps) for n in args.streams}
        lines.append(f"gepard-tiny (random weights), {args.threads} torch thread(s), chunks of {args.chunk} frames; "
                     "ms are medians of " f"{args.steps} calls.\n")
        lines.append("| codec | streams | model step ms | codec call ms | ms per frame of each stream | "
                     "frames/s ceiling | speed-up ceiling | model share |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for name in args.codecs:
            codec = load_codec(str(codecs[name][0]))
            base = 0.0
            for n in args.streams:
                c = codec_ms(codec, n, args.chunk, max(4, args.steps // 4))
                per_frame = model[n] + c / args.chunk
                fps = 1000 * n / per_frame
                base = base or fps  # one stream's ceiling: the first row
                lines.append(f"| {name} ({codecs[name][1]}) | {n} | {model[n]:.2f} | {c:.1f} | {per_frame:.2f} | "
                             f"{fps:.0f} | {fps / base:.1f}x | {model[n] / per_frame:.0%} |")
    text = "\n".join(lines)
    print(text)
    if args.out is not None:
        args.out.write_text(f"`{' '.join(['python', *sys.argv])}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
