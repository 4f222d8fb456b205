"""Where the time of one streamed request goes, stage by stage, for each family.

    PYTHONPATH=src .venv/bin/python benchmarks/stage_profile.py [--model gepard-tiny --model luna-tiny
        --model luna-realtime-tiny] [--text "..."] [--threads 1] [--out benchmarks/results/stage_profile.md]

Each model speaks a warm-up sentence, then ``--text`` unprofiled, then another sentence under ``cProfile`` through
``Speaker.chunks`` (the family runtime's own prefill / step code that ``duet serve`` runs, and the codec's stream
decoder), and ``--text`` once more through the HTTP API in this process (``create_app`` over a fresh runtime,
FastAPI's TestClient, raw PCM).
Stages are the runtime protocol's methods (``duet.tts.runtime``), so every family is cut the same way:

- text + plan: ``check``, ``frame_bound`` and ``prompt_positions``: normalisation, tokenizer or phonemes, and the
  duration predictor of an aligned model;
- prefill: ``prefill`` (Gepard: the prompt through the KV cache; Luna: the grid and its layout);
- steps: ``step`` (Gepard: one frame; Luna: one refinement pass; Realtime: one pass of a block), split into the
  sampler's share (``duet.gepard.sampling.sample_requests``; ``duet.luna.decode.guide`` + ``unmask_step``) and the
  model's rest;
- codec: the stream decoder's ``push`` / ``flush``;
- HTTP: the API's wall time beside the in-process wall time of the same text (request parsing, the engine and codec
  threads, PCM encoding and the transfer; FastAPI's TestClient, so no socket). The engine also cuts audio into other chunks
  than the Speaker does (growing chunks from one frame, against four frames), so the difference is the serving
  path's cost as a whole, and can be negative.

Then each family's decode step against its roofline (``roofline_rows``): Gepard's batch-1 frame step is memory-bound,
so its floor is the weights it reads (all but the text embedding) over the measured copy bandwidth; a Luna
refinement pass and a Realtime block pass are compute-bound, so theirs is the step's FLOPs (counted by torch's
``FlopCounterMode``) over a measured float32 matmul peak.

Calls of the text normaliser and of the tokenizer are counted: a count above the number of pieces means the text is
prepared more than once per request. Profiling adds overhead to Python-heavy stages; the shares, not the absolute
milliseconds, are the point.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch
from serve_bench import copy_bandwidth, step_weight_bytes  # the roofline's bandwidth and weight bytes
from torch.utils.flop_counter import FlopCounterMode

TEXT = "The museum opens at nine in the morning and closes at six."
WARM_UP = "Hello there, how are you today?"
PROFILED = "Tickets cost twelve dollars for adults, and children get in for free."
STAGES = {  # stage -> (file suffix, function name) whose cumulative time counts
    "text + plan": [("runtime.py", "check_request"), ("/tts/gepard.py", "frame_bound"),
                    ("/tts/luna.py", "frame_bound"), ("/tts/luna_realtime.py", "frame_bound"),
                    ("/tts/gepard.py", "prompt_positions"), ("/tts/luna.py", "prompt_positions"),
                    ("/tts/luna_realtime.py", "prompt_positions")],
    "prefill": [("/tts/gepard.py", "prefill"), ("/tts/luna.py", "prefill"), ("/tts/luna_realtime.py", "prefill")],
    "steps": [("/tts/gepard.py", "step"), ("/tts/luna.py", "step"), ("/tts/luna_realtime.py", "step")],
    # the samplers: Gepard's per-request frame sampler; MaskGIT's CFG combination and unmasking (Luna and Realtime)
    "of which sampling": [("/gepard/sampling.py", "sample_requests"), ("/luna/decode.py", "guide"),
                          ("/luna/decode.py", "unmask_step")],
    "codec": [("streaming.py", "push"), ("streaming.py", "flush")],  # every duet codec streams through it
}
COUNTED = {"normalize_text calls": ("normalize.py", "normalize_text"),
           "tokenizer encode calls": ("", "encode")}


def stage_times(stats: pstats.Stats) -> tuple[dict[str, float], dict[str, int]]:
    times = {stage: 0.0 for stage in STAGES}
    counts = {name: 0 for name in COUNTED}
    for (path, _, func), (_, ncalls, _, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        for stage, keys in STAGES.items():
            if any(path.endswith(suffix) and func == name for suffix, name in keys):
                times[stage] += cumtime
        for name, (suffix, fname) in COUNTED.items():
            if func == fname and path.endswith(suffix) and ("text" in path or "tokenizers" in path):
                counts[name] += ncalls
    return times, counts


def http_wall(name: str, warm: str, text: str, seed: int) -> float:
    """Wall time of ``text`` through the speech API over a freshly loaded runtime (its per-text plans not cached),
    after one warm-up request of another text."""
    from fastapi.testclient import TestClient

    from duet.serve.api import create_app
    from duet.serve.engine import Engine, EngineConfig
    from duet.tts import load_runtime

    engine = Engine(load_runtime(name), EngineConfig(torch_threads=torch.get_num_threads()))
    with TestClient(create_app(engine)) as client:
        def post(words: str):
            body = {"model": engine.name, "input": words, "seed": seed, "response_format": "pcm"}
            r = client.post("/v1/audio/speech", json=body)
            assert r.status_code == 200, r.text

        post(warm)
        t0 = time.perf_counter()
        post(text)
        return time.perf_counter() - t0


def profile_model(name: str, text: str) -> list[str]:
    """Warm up on one text, time another unprofiled, profile a third (a runtime caches each text's plan, so every
    measured text is new to it), then the unprofiled text again through HTTP on a fresh runtime."""
    import duet

    speaker = duet.load(name)
    list(speaker.chunks(WARM_UP, seed=0))
    t0 = time.perf_counter()
    plain_audio = sum(len(c.audio) for c in speaker.chunks(text, seed=0)) / speaker.sample_rate
    plain = time.perf_counter() - t0
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    chunks = list(speaker.chunks(PROFILED, seed=0))
    profiler.disable()
    total = time.perf_counter() - t0
    times, counts = stage_times(pstats.Stats(profiler))
    audio_s = sum(len(c.audio) for c in chunks) / speaker.sample_rate
    http = http_wall(name, WARM_UP, text, 0)
    rows = [f"### {name}", "", f"Unprofiled: {plain_audio:.2f} s of audio in {plain * 1000:.0f} ms in process (RTF "
            f"{plain / plain_audio:.3f}), {http * 1000:.0f} ms through HTTP. Profiled: {audio_s:.2f} s of audio in "
            f"{total * 1000:.0f} ms.", "", "| stage | ms (profiled) | share |", "| --- | ---: | ---: |"]
    shown = {"text + plan": times["text + plan"], "prefill": times["prefill"],
             "steps: model": times["steps"] - times["of which sampling"], "steps: sampling": times["of which sampling"],
             "codec": times["codec"]}
    shown["other (speaker loop, gaps, profiler)"] = max(0.0, total - sum(shown.values()))
    for stage, t in shown.items():
        rows.append(f"| {stage} | {t * 1000:.1f} | {t / total:.0%} |")
    rows.append(f"| serving path (API wall - in-process wall, unprofiled) | {(http - plain) * 1000:.1f} | |")
    rows += ["", ", ".join(f"{k}: {v}" for k, v in counts.items()) + " (profiled request, one piece)", ""]
    return rows


def matmul_peak(n: int = 512, repeats: int = 20) -> float:
    """FLOP/s of a float32 (n x n) @ (n x 4n) matmul, the shape of a transformer's MLP at width n: the compute roof
    this process can reach with its torch threads (median of ``repeats`` after two warm-ups)."""
    a, b = torch.randn(n, n), torch.randn(n, 4 * n)
    times = []
    for i in range(repeats + 2):
        t0 = time.perf_counter()
        torch.mm(a, b)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * n * n * 4 * n / statistics.median(times)


def step_costs(speaker, text: str) -> tuple[float, float, int]:
    """(median wall seconds of one ``runtime.step`` call, its FLOPs, calls) over one request of ``text``; the FLOPs
    are counted (``FlopCounterMode``) on the second call, whose time is left out."""
    runtime = speaker.runtime
    step = runtime.step
    times: list[float] = []
    flops: list[int] = []

    def timed(states):
        if len(times) == 1 and not flops:
            with FlopCounterMode(display=False) as counter:
                out = step(states)
            flops.append(counter.get_total_flops())
            return out
        t0 = time.perf_counter()
        out = step(states)
        times.append(time.perf_counter() - t0)
        return out

    runtime.step = timed  # an instance attribute: the Speaker calls runtime.step
    try:
        list(speaker.chunks(text, seed=0))
    finally:
        del runtime.step
    return statistics.median(times), float(flops[0] if flops else 0), len(times) + len(flops)


def roofline_rows(names: list[str], text: str) -> list[str]:
    """Each family's step against its roofline: Gepard's batch-1 step is memory-bound (every weight read once per
    frame), so its floor is weight bytes over copy bandwidth; a Luna refinement pass (the whole grid, two CFG rows)
    and a Realtime block pass are compute-bound, so theirs is counted FLOPs over the matmul peak."""
    import duet

    bandwidth = copy_bandwidth(torch.device("cpu"), 256, 8)
    peak = matmul_peak()
    rows = ["### Decode step against its roofline", "",
            f"Copy bandwidth {bandwidth / 1e9:.1f} GB/s (read + write), float32 matmul peak {peak / 1e9:.1f} GFLOP/s, "
            f"{torch.get_num_threads()} torch thread(s).", "",
            "| model | step | calls | median step | FLOPs / step | weight MB read | floor | measured / floor |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in names:
        speaker = duet.load(name)
        list(speaker.chunks(WARM_UP, seed=0))
        median, flops, calls = step_costs(speaker, text)
        model = speaker.runtime.model
        if hasattr(model, "embed_tokens"):  # Gepard: memory-bound
            _, nbytes = step_weight_bytes(model)
            floor, what, kind = nbytes / bandwidth, f"{nbytes / 1e6:.1f}", "one frame (batch 1)"
        else:
            block = "Realtime" in type(speaker.runtime).__name__
            floor, what, kind = flops / peak, "", "one refinement pass" + (" of a block" if block else " (whole grid)")
        rows.append(f"| {name} | {kind} | {calls} | {median * 1000:.2f} ms | {flops / 1e6:.1f} M | {what} | "
                    f"{floor * 1000:.3f} ms | {median / floor:.1f}x |")
    return rows + [""]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", default=None)
    p.add_argument("--text", default=TEXT)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    models = args.model or ["gepard-tiny", "luna-tiny", "luna-realtime-tiny"]
    lines = [f"`{shlex.join(['python', 'benchmarks/stage_profile.py', *(argv or sys.argv[1:])])}`", "",
             f"Text: \"{args.text}\"; torch threads {args.threads}.", ""]
    for name in models:
        lines += profile_model(name, args.text)
        print("\n".join(lines[-12:]), flush=True)
    lines += roofline_rows(models, args.text)
    print("\n".join(lines[-len(models) - 6:]), flush=True)
    table = "\n".join(lines)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
