"""Streaming speech through ``duet serve`` at several concurrencies, measured from the client's side, in one run;
and, on request, Gepard's decode step against the memory roofline, and a soak test of one server.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_bench.py [--streams 1 4 16] [--frames 64]
        [--models mock gepard-tiny luna-tiny luna-realtime-tiny] [--codecs duet-fsq duet-fsq-causal]
        [--engine builtin|vllm|both] [--max-chunk-frames 1 16] [--engine-threads 0 1] [--wide-step-threads 0 2]
        [--buffer 0.2] [--retry-busy]
    PYTHONPATH=src .venv/bin/python benchmarks/serve_bench.py --roofline [--device cpu|cuda]
        [--roofline-dtype float32|bfloat16] [--roofline-steps 32]
    PYTHONPATH=src .venv/bin/python benchmarks/serve_bench.py --soak 60 --soak-streams 64 [--frames 64]

With no ``--roofline`` or ``--soak`` the run is the concurrency sweep; with either, it is just those measurements.

Sweep. For each engine, model and concurrency N, a fresh server process runs on 127.0.0.1 (``--engine builtin``:
duet's own continuous-batching engine; ``--engine vllm``: ``duet serve --engine vllm`` in the venv named by
``DUET_VLLM_PYTHON``, Gepard only), gets one warm-up request, then N clients post at once and stream raw PCM
(``stream_format="audio"``). Every utterance is exactly ``--frames`` frames (``max_frames`` with a stop threshold the
random stop head never crosses), so all rows do the same work. Per stream:

- TTFA: request sent -> first audio byte (includes prefill, the first decode step and the codec's lookahead);
- RTF: request sent -> last byte, over the audio's duration (< 1 is faster than real time);
- underrun: a chunk that arrived after a player would have run dry, a player that starts once it holds
  ``--buffer`` seconds of audio (0: at the first byte);
- failed streams: requests the server answered with an error (e.g. past the engine's time budget, or refused
  at once by its admission control: 503 ``server_overloaded``), left out of the other columns; with
  ``--retry-busy`` a client told 429 or 503 with a Retry-After waits that long and sends the request again (its
  TTFA and RTF count from its first try), and ``refusals`` counts those answers;
and for the run: aggregate x real time (all audio seconds / wall seconds) and decoded frames per second.
``--max-chunk-frames``, ``--engine-threads`` and ``--wide-step-threads`` (several values each) sweep the engine's
largest audio chunk (``EngineConfig.max_chunk_frames``), the engine and codec threads' torch threads and the engine
thread's threads for wide steps (``EngineConfig.wide_step_threads``, 0: off), every combination in the same run.

Models: ``mock`` (uniform logits, a toy codec: the serving stack's own overhead) and ``gepard-tiny`` with random
weights (``duet.gepard.config.gepard_tiny``, 5.5M parameters) and each codec of ``--codecs`` (``duet-fsq``: the
non-causal decoder, re-decoding context around every chunk; ``duet-fsq-causal``: the causal decoder that carries
its state; the shipped weights if present, else random weights of the same shape: the same compute);
``luna-tiny`` and ``luna-realtime-tiny``: the shipped checkpoints (the builtin engine only; every stream says the
same text, so the predicted length, and so the work, is equal across streams and rows; ``--frames`` does not
apply). Load goes to loopback only, bounded by ``--streams`` and ``--frames``.

Roofline (``--roofline``), in this process, no server: Gepard's single-stream decode step is memory-bound (batch 1:
every weight is read once per frame for ~2 FLOPs), so its floor is the time to stream the weights from memory.

- weight bytes: the parameters one decode step reads, i.e. all of ``--roofline-preset`` (default ``gepard-500m``,
  random weights, ``--roofline-dtype`` on ``--device``) except the text embedding table, which a decode step does
  not touch (it embeds an audio frame). The KV cache it also reads (a 16-token prompt + the steps, well under 1% of
  the weights) is left out, so the ideal is a slight under-estimate;
- bandwidth: the median over ``--roofline-copies`` copies of a ``--roofline-copy-mb`` float32 tensor into another
  (``dst.copy_(src)``, torch's own threads, after two warm-up copies), counted STREAM-style as bytes read + bytes
  written (2 x size) per copy time. It is measured in the same run, so it sees the same machine load;
- ideal step = weight bytes / bandwidth; measured step = the median wall time of ``--roofline-steps`` KV-cached
  ``GepardModel.step`` calls (batch 1, after ``--roofline-warmup`` steps and a prefill of a 16-token prompt,
  ``torch.inference_mode()``, the device synchronised around each step); ratio = measured / ideal (the issue's
  target: at most 1.5x).

Soak (``--soak SECONDS --soak-streams N``): one builtin-engine server with gepard-tiny (random weights, as in the
sweep; batch limit N), one warm-up round of N concurrent streams, then N clients each loop for SECONDS (post a
``--frames`` request, stream it to the end, repeat; requests in flight at the deadline finish). Reported: requests
completed; errors (a non-200 answer, a broken stream, or a stream whose audio length differs from the warm-up's);
x real time, TTFA p50/p95 and underruns over the completed requests; and the server process's resident memory
(``VmRSS`` in ``/proc/PID/status``) at the start (after the warm-up), at the end (all clients done) and its peak
(sampled each second), with growth = end / start - 1 (the issue's target: 0 errors and growth under 10% for 60 s at
64 streams).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

SRC = Path(__file__).resolve().parents[1] / "src"
NEVER = 0.999  # stop threshold the random stop head never crosses: lengths are set by max_frames alone


@dataclass(frozen=True)
class StreamResult:
    ttfa_s: float
    wall_s: float
    audio_s: float
    underruns: int
    error: str | None = None  # the server's answer when it was not audio (e.g. "HTTP 504 timeout")
    refusals: int = 0  # 429 / 503 answers with a Retry-After before this one (--retry-busy)


# --- the server side -------------------------------------------------------------------------------------------------


LUNA_MODELS = ("luna-tiny", "luna-realtime-tiny")  # shipped checkpoints, served as they are


def codec_dir(name: str, root: Path) -> tuple[Path, str]:
    """The shipped codec ``name`` (duet-fsq or duet-fsq-causal), else random weights of its shape under ``root``."""
    from dataclasses import replace

    from duet.codecs.fsq_codec import FSQCodecConfig
    from duet.codecs.registry import build, resolve, save_pretrained
    from duet.errors import DuetError

    try:
        return resolve(name), f"shipped {name}"
    except DuetError:
        cfg = replace(FSQCodecConfig(), causal_decoder=name.endswith("-causal"))
        return save_pretrained(build("duet-fsq", cfg), root / name), f"{name}, random weights"


def make_gepard_tiny(root: Path) -> Path:
    """A random-init gepard-tiny checkpoint under ``root``."""
    import torch

    from duet.gepard.checkpoint import save_gepard
    from duet.gepard.config import gepard_tiny
    from duet.gepard.model import GepardModel
    from duet.text.bpe import BPEConfig, save_bpe, train_bpe

    torch.manual_seed(0)
    corpus = ["the quick brown fox jumps over the lazy dog, and then it speaks a few words"] * 20
    tokenizer = save_bpe(train_bpe(corpus, BPEConfig(vocab_size=400)), root / "tokenizer.json")
    return save_gepard(GepardModel(gepard_tiny()), tokenizer, root / "gepard-tiny",
                       codec={"name": "duet-fsq", "frame_rate": 22050 / 1024})


def serve_builtin(model: str, checkpoint: str | None, codec: str | None, port: int, max_batch: int,
                  max_chunk: int = 16, threads: int = 0, wide: int = 0) -> None:
    """The builtin-engine server process (``--_serve``); ``Server`` starts it with ``duet serve``'s default
    ``MALLOC_ARENA_MAX=2`` (``duet.serve.memory``)."""
    import uvicorn

    from duet.serve.api import ServeConfig, create_app
    from duet.serve.engine import Engine, EngineConfig
    from duet.serve.scheduler import SchedulerConfig

    if model == "mock":
        from duet.serve.mock import MockConfig, MockRuntime

        runtime = MockRuntime(MockConfig(max_frames=4096))
    else:
        from duet.tts import load_runtime

        name = model if model in LUNA_MODELS else "gepard"
        runtime = load_runtime(str(checkpoint), codec=str(codec) if codec != "None" else None, name=name)
    scheduler = SchedulerConfig(max_running=max_batch, max_waiting=256, cache_budget_bytes=4 * 1024**3)
    engine = Engine(runtime, EngineConfig(scheduler=scheduler, max_chunk_frames=max_chunk,
                                          torch_threads=threads or None, wide_step_threads=wide or None))
    uvicorn.run(create_app(engine, ServeConfig()), host="127.0.0.1", port=port, log_level="warning")


def builtin_argv(model: str, checkpoint: Path | None, codec: Path | None, port: int, max_batch: int,
                 max_chunk: int = 16, threads: int = 0, wide: int = 0) -> list[str]:
    """The command line of a builtin-engine server process (this script with ``--_serve``)."""
    return [sys.executable, __file__, "--streams", str(max_batch), "--_serve", model, str(checkpoint), str(codec),
            str(port), str(max_chunk), str(threads), str(wide)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv: list[str], port: int, log: Path, timeout: float = 600):
        # MALLOC_ARENA_MAX: what duet serve runs with (--malloc-arenas); a caller's own value wins. vLLM's KV cache
        # is sized by duet serve from the model and --max-batch unless the caller sets VLLM_CPU_KVCACHE_SPACE.
        env = {"MALLOC_ARENA_MAX": "2", **os.environ,
               "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited; see {log}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"server did not start; see {log}")
            time.sleep(0.5)
        self.model = httpx.get(f"{self.url}/v1/models").json()["data"][0]["id"]
        self.sample_rate = httpx.get(f"{self.url}/v1/audio/voices").json()["sample_rate"]

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
        self.log.close()


# --- the client side -------------------------------------------------------------------------------------------------


async def one_stream(client: httpx.AsyncClient, server: Server, frames: int | None, seed: int, buffer_s: float = 0.0,
                     retry_busy: bool = False) -> StreamResult:
    """One streamed request; ``frames`` None: a Luna model, whose length its duration predictor sets. The player
    starts once it holds ``buffer_s`` of audio; with ``retry_busy`` a 429 / 503 with Retry-After is waited out and
    the request sent again."""
    body = {"model": server.model, "input": "the quick brown fox jumps over the lazy dog " * 3, "seed": seed,
            "response_format": "pcm", "stream_format": "audio"}
    if frames is not None:
        body.update(max_frames=frames, stop_threshold=NEVER)
    t0 = time.perf_counter()
    refusals = 0
    while True:
        first = start = None  # the first byte; when the player starts
        received = 0  # bytes
        underruns = 0
        async with client.stream("POST", "/v1/audio/speech", json=body) as r:
            if r.status_code != 200:
                answer = await r.aread()
                retry = r.headers.get("retry-after")
                if retry_busy and r.status_code in (429, 503) and retry is not None:
                    refusals += 1
                    await asyncio.sleep(float(retry))
                    continue
                try:
                    code = json.loads(answer)["error"]["code"]
                except (ValueError, KeyError, TypeError):
                    code = answer[:80].decode(errors="replace")
                end = time.perf_counter()
                return StreamResult(ttfa_s=end - t0, wall_s=end - t0, audio_s=0.0, underruns=0,
                                    error=f"HTTP {r.status_code} {code}", refusals=refusals)
            async for chunk in r.aiter_raw():
                now = time.perf_counter()
                first = now if first is None else first
                if start is not None and now > start + received / 2 / server.sample_rate:
                    underruns += 1  # the player has played all it had
                received += len(chunk)
                if start is None and received / 2 / server.sample_rate >= buffer_s:
                    start = now
        break
    end = time.perf_counter()
    audio_s = received / 2 / server.sample_rate
    return StreamResult(ttfa_s=(first or end) - t0, wall_s=end - t0, audio_s=audio_s, underruns=underruns,
                        refusals=refusals)


async def concurrent(server: Server, n: int, frames: int | None, buffer_s: float = 0.0,
                     retry_busy: bool = False) -> tuple[list[StreamResult], float]:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as client:
        await one_stream(client, server, None if frames is None else min(frames, 16), seed=0)  # warm-up
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, server, frames, 1 + i, buffer_s, retry_busy)
                                         for i in range(n)))
        return list(results), time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(engine: str, model: str, codec: str, n: int, results: list[StreamResult], wall: float, frame_rate: float,
        max_chunk: int, threads: int, wide: int = 0) -> dict:
    failed = [r.error for r in results if r.error is not None]
    refusals = sum(r.refusals for r in results)
    results = [r for r in results if r.error is None] or [StreamResult(math.nan, math.nan, math.nan, 0)]
    ttfa = [r.ttfa_s * 1000 for r in results]
    rtf = [r.wall_s / r.audio_s for r in results if r.audio_s > 0] or [math.nan]
    audio = sum(r.audio_s for r in results)
    return {"engine": engine, "model": model, "codec": codec, "max_chunk": max_chunk, "threads": threads or "default",
            "wide": wide or "-", "streams": n,
            "ttfa_p50_ms": pct(ttfa, 0.5), "ttfa_p95_ms": pct(ttfa, 0.95), "rtf_p50": statistics.median(rtf),
            "rtf_p95": pct(rtf, 0.95),
            "x_realtime": audio / wall, "frames_per_s": audio * frame_rate / wall,
            "underruns": sum(r.underruns for r in results), "audio_s": audio, "wall_s": wall,
            "refusals": refusals, "errors": f"{len(failed)} ({sorted(set(failed))[0]})" if failed else "0"}


def print_table(rows: list[dict]) -> None:
    head = ("engine", "model", "codec", "max chunk", "engine threads", "wide step threads", "streams", "TTFA p50 ms",
            "TTFA p95 ms", "RTF p50", "RTF p95", "x real time", "frames/s", "underruns", "refusals", "failed streams")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print(f"| {r['engine']} | {r['model']} | {r['codec']} | {r['max_chunk']} | {r['threads']} | {r['wide']} | "
              f"{r['streams']} | {r['ttfa_p50_ms']:.0f} | {r['ttfa_p95_ms']:.0f} | "
              f"{r['rtf_p50']:.3f} | {r['rtf_p95']:.3f} | {r['x_realtime']:.2f} | {r['frames_per_s']:.0f} | "
              f"{r['underruns']} | {r['refusals']} | {r['errors']} |")


# --- the soak test ---------------------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int | None:
    """A process's resident memory (``VmRSS``), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return None


async def sample_rss(pid: int, samples: list[int], every: float = 1.0) -> None:
    """Append ``pid``'s resident memory to ``samples`` every ``every`` seconds until cancelled."""
    while True:
        rss = rss_bytes(pid)
        if rss is not None:
            samples.append(rss)
        await asyncio.sleep(every)


async def soak_client(client: httpx.AsyncClient, server: Server, frames: int, expect_s: float, deadline: float,
                      first_seed: int, results: list[StreamResult], errors: list[str]) -> None:
    """One client: post, stream to the end, repeat until ``deadline``; a stream of the wrong length is an error."""
    seed = first_seed
    while time.perf_counter() < deadline:
        seed += 1
        try:
            r = await one_stream(client, server, frames, seed)
        except (httpx.HTTPError, RuntimeError) as e:
            errors.append(f"{type(e).__name__}: {e}")
            await asyncio.sleep(0.1)  # a dead server is not hammered in a tight loop
            continue
        if r.audio_s != expect_s:
            errors.append(f"stream of {r.audio_s:.3f} s, expected {expect_s:.3f} s")
        else:
            results.append(r)


async def soak(server: Server, n: int, frames: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as client:
        warm = await asyncio.gather(*(one_stream(client, server, frames, seed=i) for i in range(n)))
        expect_s = warm[0].audio_s
        start_rss = rss_bytes(server.proc.pid)
        samples: list[int] = []
        sampler = asyncio.create_task(sample_rss(server.proc.pid, samples))
        results: list[StreamResult] = []
        errors: list[str] = []
        t0 = time.perf_counter()
        await asyncio.gather(*(soak_client(client, server, frames, expect_s, t0 + seconds, 1_000_000 * (i + 1),
                                           results, errors) for i in range(n)))
        wall = time.perf_counter() - t0
        sampler.cancel()
        end_rss = rss_bytes(server.proc.pid)
    ttfa = [r.ttfa_s * 1000 for r in results] or [float("nan")]
    mb = 1024**2
    return {"streams": n, "frames": frames, "seconds": seconds, "wall_s": wall, "completed": len(results),
            "errors": len(errors), "error_samples": sorted(set(errors))[:5],
            "x_realtime": sum(r.audio_s for r in results) / wall, "ttfa_p50_ms": pct(ttfa, 0.5),
            "ttfa_p95_ms": pct(ttfa, 0.95), "underruns": sum(r.underruns for r in results),
            "rss_start_mb": start_rss / mb if start_rss else None, "rss_end_mb": end_rss / mb if end_rss else None,
            "rss_peak_mb": max(samples + [start_rss or 0, end_rss or 0]) / mb,
            "rss_growth_pct": 100 * (end_rss / start_rss - 1) if start_rss and end_rss else None}


def print_soak(r: dict) -> None:
    def num(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    head = ("streams", "seconds", "completed", "errors", "x real time", "TTFA p50 ms", "TTFA p95 ms", "underruns",
            "RSS start MB", "RSS end MB", "RSS peak MB", "RSS growth")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    print(f"| {r['streams']} | {r['wall_s']:.1f} | {r['completed']} | {r['errors']} | {r['x_realtime']:.2f} | "
          f"{r['ttfa_p50_ms']:.0f} | {r['ttfa_p95_ms']:.0f} | {r['underruns']} | {num(r['rss_start_mb'], '.0f')} | "
          f"{num(r['rss_end_mb'], '.0f')} | {r['rss_peak_mb']:.0f} | {num(r['rss_growth_pct'], '+.1f')}% |")
    for e in r["error_samples"]:
        print(f"error: {e}", file=sys.stderr)


# --- the roofline ----------------------------------------------------------------------------------------------------


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def copy_bandwidth(device, size_mb: int, copies: int) -> float:
    """Bytes per second of ``dst.copy_(src)`` on a ``size_mb`` float32 tensor: (read + written) / median time."""
    import torch

    src = torch.ones(size_mb * 1024**2 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for i in range(copies + 2):  # the first two warm up (page faults, allocator)
        synchronize(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        synchronize(device)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 2 * src.nbytes / statistics.median(times)


def step_weight_bytes(model) -> tuple[int, int]:
    """(parameters, bytes) a decode step reads: every parameter but the text embedding table."""
    skip = model.embed_tokens.weight
    params = [p for p in model.parameters() if p is not skip]
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def decode_step_times(model, device, steps: int, warmup: int, prompt_tokens: int = 16) -> list[float]:
    """Wall seconds of ``steps`` batch-1 KV-cached ``GepardModel.step`` calls after a prefill and ``warmup`` steps."""
    import torch

    from duet.gepard.model import NUM_SERVICE_TOKENS, GepardPrompt

    gen = torch.Generator().manual_seed(0)
    vocab = model.embed_tokens.num_embeddings
    text_ids = torch.randint(0, vocab, (1, prompt_tokens + NUM_SERVICE_TOKENS), generator=gen).to(device)
    frame = torch.zeros(1, model.config.num_channels, dtype=torch.long, device=device)  # code 0: valid everywhere
    times = []
    with torch.inference_mode():
        _, cache = model.prefill(GepardPrompt(text_ids))
        for i in range(warmup + steps):
            synchronize(device)
            t0 = time.perf_counter()
            model.step(frame, cache)
            synchronize(device)
            if i >= warmup:
                times.append(time.perf_counter() - t0)
    return times


def roofline(preset_name: str, device_name: str, dtype_name: str, steps: int, warmup: int, copy_mb: int,
             copies: int) -> dict:
    import torch

    from duet.gepard.config import preset
    from duet.gepard.model import GepardModel

    device = torch.device(device_name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA device visible to torch")
    dtype = getattr(torch, dtype_name)
    torch.manual_seed(0)
    model = GepardModel(preset(preset_name)).eval().to(device=device, dtype=dtype)
    params, weight_bytes = step_weight_bytes(model)
    step_s = statistics.median(decode_step_times(model, device, steps, warmup))
    del model
    bandwidth = copy_bandwidth(device, copy_mb, copies)
    ideal_s = weight_bytes / bandwidth
    return {"model": preset_name, "device": str(device), "dtype": dtype_name, "threads": torch.get_num_threads(),
            "step_params": params, "weight_bytes": weight_bytes, "bandwidth_gb_s": bandwidth / 1e9,
            "ideal_step_ms": 1000 * ideal_s, "step_ms": 1000 * step_s, "ratio": step_s / ideal_s, "steps": steps}


def print_roofline(r: dict) -> None:
    head = ("model", "device", "dtype", "threads", "weights/step MB", "bandwidth GB/s", "ideal step ms",
            "step p50 ms", "measured/ideal")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    print(f"| {r['model']} | {r['device']} | {r['dtype']} | {r['threads']} | {r['weight_bytes'] / 1e6:.0f} | "
          f"{r['bandwidth_gb_s']:.1f} | {r['ideal_step_ms']:.1f} | {r['step_ms']:.1f} | {r['ratio']:.2f}x |")


def model_frame_rate(model: str, codec: Path | None) -> float:
    """Codec frames per second of a model's audio."""
    if model == "mock":
        return 50.0
    import duet.codecs
    from duet.tts import load_runtime

    if model in LUNA_MODELS:
        return load_runtime(model).codec.frame_rate
    return duet.codecs.load(codec).frame_rate


def run_sweep(args: argparse.Namespace, root: Path) -> list[dict]:
    engines = ["builtin", "vllm"] if args.engine == "both" else [args.engine]
    vllm_python = os.environ.get("DUET_VLLM_PYTHON", "")
    if "vllm" in engines and not (vllm_python and os.access(vllm_python, os.X_OK)):
        print("vllm: skipped (set DUET_VLLM_PYTHON to a venv made by scripts/setup_vllm_cpu.sh)", file=sys.stderr)
        engines.remove("vllm")
    max_batch = max(args.streams)
    checkpoint = make_gepard_tiny(root) if "gepard-tiny" in args.models else None
    codecs: dict[str, Path] = {}
    if checkpoint is not None:
        for name in args.codecs:
            codecs[name], note = codec_dir(name, root)
            print(f"gepard-tiny: random weights; {note}", file=sys.stderr)
    rows: list[dict] = []
    for engine in engines:
        for model in args.models:
            if engine == "vllm" and model != "gepard-tiny":
                continue  # vLLM serves Gepard only
            pairs = [(checkpoint, name, path) for name, path in codecs.items()] if model == "gepard-tiny" else \
                [(model if model in LUNA_MODELS else None, "-", None)]
            for (ckpt, codec_name, codec), threads, wide, max_chunk, n in itertools.product(
                    pairs, args.engine_threads, args.wide_step_threads, args.max_chunk_frames, args.streams):
                port = free_port()
                if engine == "builtin":
                    argv = builtin_argv(model, ckpt, codec, port, max_batch, max_chunk, threads, wide)
                else:  # the same duet engine around vLLM's model runner, so the same chunking
                    argv = [vllm_python, "-m", "duet.cli", "serve", "--engine", "vllm", "--model", "gepard",
                            "--checkpoint", str(ckpt), "--codec", str(codec), "--port", str(port),
                            "--max-batch", str(max_batch), "--max-chunk-frames", str(max_chunk),
                            *(["--engine-threads", str(threads)] if threads else []),
                            *(["--wide-step-threads", str(wide)] if wide else []),
                            "--log-level", "warning"]
                server = Server(argv, port, root / f"{engine}-{model}-{codec_name}-{n}-{max_chunk}-{threads}-{wide}.log")
                try:
                    frames = None if model in LUNA_MODELS else args.frames
                    results, wall = asyncio.run(concurrent(server, n, frames, args.buffer, args.retry_busy))
                    rows.append(row(engine, model, codec_name, n, results, wall, model_frame_rate(model, codec),
                                    max_chunk, threads, wide))
                    print(f"{engine} {model} {codec_name} x{n}: done in {wall:.1f} s", file=sys.stderr)
                finally:
                    server.close()
    return rows


def run_soak(args: argparse.Namespace, root: Path) -> dict:
    checkpoint = make_gepard_tiny(root)
    codec, note = codec_dir(args.codecs[0], root)
    print(f"gepard-tiny: random weights; {note}", file=sys.stderr)
    port = free_port()
    server = Server(builtin_argv("gepard-tiny", checkpoint, codec, port, args.soak_streams), port, root / "soak.log")
    try:
        return asyncio.run(soak(server, args.soak_streams, args.frames, args.soak))
    finally:
        server.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--frames", type=int, default=64, help="frames per utterance (gepard: 21.5 per second)")
    p.add_argument("--models", nargs="+", default=["mock", "gepard-tiny"],
                   choices=["mock", "gepard-tiny", *LUNA_MODELS])
    p.add_argument("--codecs", nargs="+", default=["duet-fsq"], choices=["duet-fsq", "duet-fsq-causal"],
                   help="gepard-tiny's codec; several values sweep each (the soak takes the first)")
    p.add_argument("--engine", choices=["builtin", "vllm", "both"], default="builtin")
    p.add_argument("--out", type=Path, default=None,
                   help="also write the results as JSON here (the sweep: its rows; else roofline and/or soak)")
    p.add_argument("--roofline", action="store_true", help="time Gepard's decode step against weight bytes / bandwidth")
    p.add_argument("--roofline-preset", default="gepard-500m", help="Gepard preset for --roofline")
    p.add_argument("--roofline-dtype", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--device", default="cpu", help="torch device for --roofline (cpu, cuda, cuda:1, ...)")
    p.add_argument("--roofline-steps", type=int, default=32, help="timed decode steps (median reported)")
    p.add_argument("--roofline-warmup", type=int, default=4, help="untimed decode steps first")
    p.add_argument("--roofline-copy-mb", type=int, default=512, help="size of the tensor copied for the bandwidth")
    p.add_argument("--roofline-copies", type=int, default=10, help="timed copies (median reported)")
    p.add_argument("--soak", type=float, default=0, metavar="SECONDS", help="soak one gepard-tiny server this long")
    p.add_argument("--soak-streams", type=int, default=64, help="concurrent streaming clients during --soak")
    p.add_argument("--max-chunk-frames", type=int, nargs="+", default=[16],
                   help="builtin engine's largest audio chunk; several values sweep each (1 = a chunk per frame)")
    p.add_argument("--buffer", type=float, default=0.0,
                   help="seconds of audio a client's player holds before it starts (underruns count after that)")
    p.add_argument("--retry-busy", action="store_true",
                   help="a client answered 429 / 503 with Retry-After waits and sends its request again")
    p.add_argument("--engine-threads", type=int, nargs="+", default=[1],
                   help="torch threads of the engine thread (0 = torch's default); several values sweep each")
    p.add_argument("--wide-step-threads", type=int, nargs="+", default=[0],
                   help="torch threads of the engine thread for wide steps (EngineConfig.wide_step_threads; 0: off); "
                   "several values sweep each")
    p.add_argument("--_serve", nargs=7,
                   metavar=("MODEL", "CHECKPOINT", "CODEC", "PORT", "MAX_CHUNK", "THREADS", "WIDE"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args._serve:
        model, checkpoint, codec, port, max_chunk, threads, wide = args._serve
        serve_builtin(model, checkpoint, codec, int(port), max(args.streams), int(max_chunk), int(threads), int(wide))
        return 0

    sweep = not (args.roofline or args.soak > 0)  # the sweep is the default measurement, the others on request
    results: dict = {}
    rows: list[dict] = []
    if args.roofline:
        results["roofline"] = roofline(args.roofline_preset, args.device, args.roofline_dtype, args.roofline_steps,
                                       args.roofline_warmup, args.roofline_copy_mb, args.roofline_copies)
    with tempfile.TemporaryDirectory(prefix="duet-serve-bench-") as tmp:
        if args.soak > 0:
            results["soak"] = run_soak(args, Path(tmp))
        if sweep:
            rows = run_sweep(args, Path(tmp))
    if "roofline" in results:
        print(f"\nroofline: batch-1 decode step vs weight bytes / copy bandwidth (read + written); "
              f"median of {args.roofline_steps} steps; target <= 1.5x.")
        print_roofline(results["roofline"])
    if "soak" in results:
        print(f"\nsoak: {args.soak_streams} streams looping {args.frames}-frame requests for {args.soak:g} s; "
              "target: 0 errors, RSS growth < 10%.")
        print_soak(results["soak"])
    if sweep:
        print(f"\n{args.frames} frames per stream; TTFA includes the codec's lookahead; "
              "RTF < 1 is faster than real time.")
        print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(rows if sweep else results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
