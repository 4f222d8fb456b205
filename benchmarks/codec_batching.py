"""The serving engine's codec work at N streams, on one torch thread: each stream's chunk decoded alone against the
chunks of a step decoded in batched calls, side by side in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/codec_batching.py [--streams 1 8 32] [--codecs duet-fsq-causal duet-fsq]
        [--schedules equal engine] [--chunk 16] [--frames 64] [--spread 16] [--repeats 5] [--threads 1]
        [--out benchmarks/results/codec_batching.md]
    PYTHONPATH=src .venv/bin/python benchmarks/codec_batching.py --smoke   # tiny random codecs: checks it runs

N streams of ``--frames`` random frames each go through the codec's stream decoders tick by tick, as the engine's
codec thread gets them (``duet.serve.decode_worker``: a step's chunks in one message). Schedules:

- ``equal``: every stream pushes a chunk of ``--chunk`` frames at every tick (the steady state, all in phase);
- ``engine``: the engine's chunk sizes (single frames through the decoder's look-ahead, then 2, 4, ... up to
  ``--chunk``, then the rest; ``EngineConfig``), one frame per stream per tick, the streams' first steps spread over
  ``--spread`` ticks (as requests arrive), so a tick holds chunks of several lengths (or none).

Modes, each over the same codes, with fresh decoders:

- ``per stream``: each stream's chunk through its own decoder, one codec call per chunk;
- ``by length``: ``push_many`` with one call per chunk length (``call_frames`` 0; what the engine did before chunks of
  several lengths shared a call);
- ``by cost``: ``push_many`` as the engine runs it (``StatefulStreamDecoder.call_frames`` of the codec: chunks padded
  into a longer chunk's call when that saves more than the padding costs);
- ``one call``: ``push_many`` with every tick's chunks in one padded call.

A decoder that re-decodes context (duet-fsq) is batched by window shape only, so its ``by cost`` and ``one call``
equal ``by length`` and are left out. Frames/s = N x ``--frames`` / the schedule's wall time (median of
``--repeats`` runs after one warm-up run); the calls column counts codec calls per run. For the ``equal`` schedule
of a stateful decoder the run also fits one call's time as ``a + b x frame-rows`` over N and prints ``a / b``: the
``call_frames`` that ``duet.codecs.trained.TrainedCodec.stream_call_frames`` should hold on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

MODES = ("per stream", "by length", "by cost", "one call")


def engine_chunks(frames: int, largest: int, lookahead: int = 0) -> list[int]:
    """The engine's chunk sizes for a stream of ``frames`` frames (``duet.serve.engine``): single frames until more
    than the decoder's ``lookahead`` frames went in, then 2, 4, ... up to ``largest``, then the rest."""
    sizes, size = [], 1
    while sum(sizes) < frames:
        sizes.append(min(size, frames - sum(sizes)))
        if sum(sizes) > lookahead:
            size = min(2 * size, largest)
    return sizes


def schedule(kind: str, streams: int, frames: int, chunk: int, spread: int,
             lookahead: int = 0) -> list[list[tuple[int, int, int]]]:
    """Ticks of (stream, first frame, frames) chunks; a stream's last chunk is its last frames."""
    ticks: dict[int, list[tuple[int, int, int]]] = {}
    for i in range(streams):
        if kind == "equal":  # chunk k at tick k
            sizes = [chunk] * (frames // chunk) + ([frames % chunk] if frames % chunk else [])
            at_tick = list(range(len(sizes)))
        else:
            start = spread * i // streams if spread else 0
            sizes = engine_chunks(frames, chunk, lookahead)
            ends = [sum(sizes[: k + 1]) - 1 for k in range(len(sizes))]  # the frame whose step completes the chunk
            at_tick = [start + e for e in ends]
        at = 0
        for tick, n in zip(at_tick, sizes):
            ticks.setdefault(tick, []).append((i, at, n))
            at += n
    return [ticks[t] for t in sorted(ticks)]


def run(codec, codes: list[torch.Tensor], ticks, mode: str) -> tuple[float, int]:
    """One pass of the schedule in ``mode`` -> (wall seconds, codec calls)."""
    from duet.codecs.streaming import StatefulStreamDecoder, push_many

    calls = [0]

    def counted(inner):
        def call(*args):
            calls[0] += 1
            return inner(*args)
        return call

    decoders = []
    for _ in codes:
        dec = codec.stream_decoder()
        if isinstance(dec, StatefulStreamDecoder):
            if mode == "by length":
                dec.call_frames = 0.0
            elif mode == "one call":
                dec.call_frames = 1e12
            dec.decode_chunk = counted(dec.decode_chunk)
        else:
            dec.decode_window = counted(dec.decode_window)
        decoders.append(dec)
    last = {i: max(at for tick in ticks for j, at, _ in tick if j == i) for i in range(len(codes))}
    with torch.inference_mode():
        start = time.perf_counter()
        for tick in ticks:
            chunks = [codes[i][None, :, at : at + n] for i, at, n in tick]  # (1, K, n) each
            final = [at == last[i] for i, at, _ in tick]
            if mode == "per stream":
                for (i, _, _), c, end in zip(tick, chunks, final):
                    decoders[i].push(c)
                    if end:
                        decoders[i].flush()
            else:
                push_many([decoders[i] for i, _, _ in tick], chunks, final)
        return time.perf_counter() - start, calls[0]


def measure(codec, streams: int, kind: str, args) -> dict[str, tuple[float, int]]:
    """Frames/s and calls of each mode for ``streams`` streams of one schedule."""
    from duet.codecs.streaming import StatefulStreamDecoder

    gen = torch.Generator().manual_seed(streams)
    codes = [torch.stack([torch.randint(0, k, (args.frames,), generator=gen) for k in codec.codebook_sizes])
             for _ in range(streams)]  # (K, frames) each
    from duet.serve.decode_worker import lookahead_frames

    probe = codec.stream_decoder()
    ticks = schedule(kind, streams, args.frames, args.chunk, args.spread, lookahead_frames(probe))
    stateful = isinstance(probe, StatefulStreamDecoder)
    out = {}
    for mode in MODES if stateful else MODES[:2]:
        run(codec, codes, ticks, mode)  # warm-up
        times, calls = [], 0
        for _ in range(args.repeats):
            seconds, calls = run(codec, codes, ticks, mode)
            times.append(seconds)
        out[mode] = (streams * args.frames / statistics.median(times), calls)
    return out


def call_cost(rows_ms: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``ms = a + b x frame-rows`` -> (a, b)."""
    n = len(rows_ms)
    mx = sum(r for r, _ in rows_ms) / n
    my = sum(m for _, m in rows_ms) / n
    sxx = sum((r - mx) ** 2 for r, _ in rows_ms)
    b = sum((r - mx) * (m - my) for r, m in rows_ms) / sxx if sxx else 0.0
    return my - b * mx, b


def codecs_for(args, root: Path) -> dict[str, tuple[object, str]]:
    from duet.codecs import load as load_codec

    if args.smoke:
        from dataclasses import replace

        from duet.codecs.registry import build
        from duet.train.codec_config import preset

        cfg = preset("fsq-tiny")
        return {name: (build(cfg.kind, replace(cfg.model, causal_decoder=name.endswith("-causal"))).eval(),
                       "fsq-tiny, random weights") for name in args.codecs}
    from serve_bench import codec_dir

    out = {}
    for name in args.codecs:
        path, what = codec_dir(name, root)
        out[name] = (load_codec(str(path)), what)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--codecs", nargs="+", default=["duet-fsq-causal", "duet-fsq"])
    p.add_argument("--schedules", nargs="+", choices=["equal", "engine"], default=["equal", "engine"])
    p.add_argument("--chunk", type=int, default=16, help="largest chunk (the engine's max_chunk_frames)")
    p.add_argument("--frames", type=int, default=64, help="frames per stream")
    p.add_argument("--spread", type=int, default=16, help="ticks over which the streams start (engine schedule)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per measurement (median)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (the engine's codec thread has 1)")
    p.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    p.add_argument("--smoke", action="store_true", help="tiny random codecs, 1 and 2 streams, 8 frames, one run")
    args = p.parse_args(argv)
    if args.smoke:
        args.streams, args.frames, args.repeats, args.chunk, args.spread = [1, 2], 8, 1, 4, 2
    torch.set_num_threads(args.threads)

    lines = [f"{args.threads} torch thread(s); {args.frames} frames per stream, chunks up to {args.chunk} frames, "
             f"engine schedule spread over {args.spread} ticks; frames/s are medians of {args.repeats} runs; calls "
             "per run in brackets.\n",
             "| codec | schedule | streams | " + " | ".join(f"{m} frames/s" for m in MODES) +
             " | best batched / per stream |",
             "|---|---|---|" + "---|" * len(MODES) + "---|"]
    fits = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (codec, what) in codecs_for(args, Path(tmp)).items():
            for kind in args.schedules:
                per_tick = []
                for n in args.streams:
                    got = measure(codec, n, kind, args)
                    cells = [f"{got[m][0]:.0f} ({got[m][1]})" if m in got else "-" for m in MODES]
                    best = max(fps for m, (fps, _) in got.items() if m != "per stream")
                    lines.append(f"| {name} ({what}) | {kind} | {n} | " + " | ".join(cells) +
                                 f" | {best / got['per stream'][0]:.2f}x |")
                    print(lines[-1], file=sys.stderr, flush=True)
                    if kind == "equal" and "one call" in got:  # one call per tick: its time fits a + b x rows
                        ms_per_call = 1000 * n * args.frames / got["one call"][0] / got["one call"][1]
                        per_tick.append((n * args.chunk, ms_per_call))
                if len(per_tick) >= 2:
                    a, b = call_cost(per_tick)
                    fits.append(f"- {name}: one call ~ {a:.2f} ms + {b:.4f} ms per frame-row -> call_frames ~ "
                                f"{a / b if b > 0 else float('inf'):.1f} (TrainedCodec.stream_call_frames)")
    text = "\n".join(lines + ([""] + fits if fits else []))
    print(text)
    if args.out is not None:
        args.out.write_text(f"`{' '.join(['python', *sys.argv])}`\n\n{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
