"""Soak and disconnect test of a real ``duet serve`` with the shipped gepard-tiny, on 127.0.0.1 only, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/soak_bench.py [--streams 64] [--seconds 60] [--cut 100]
        [--model gepard-tiny] [--max-batch 16]

One server process (``duet serve --model MODEL``, its default flags but ``--port`` and ``--max-queue``, so that
every stream of the run is queued rather than refused) runs three phases:

1. soak: ``--streams`` clients each loop for ``--seconds`` (post a sentence, stream its raw PCM to the end, repeat;
   requests in flight at the deadline finish), after one warm-up round of the same clients. Sentences are drawn,
   seeded, from a fixed list of everyday ones; each request samples with the model's own defaults and ends by
   itself (no ``max_frames``). An error is a non-200 answer, a transfer that does not end cleanly (the server cuts
   one that failed, ran past its time budget or was cut at its frame bound) or a stream with no audio.
   Reported: requests completed, errors, audio x real time, TTFA p50/p95, ``/health`` latency (sampled every 0.5 s
   during the soak) and the server's resident memory (``VmRSS``) after the warm-up, at the end and its peak, with
   growth = end / start - 1 (target: 0 errors, growth under 10%).
2. cut streams: ``--cut`` streams, ``--max-batch`` at a time, each closed by its client after its first 8 KiB of
   audio. Then the server is polled until it holds nothing: ``/health`` running = waiting = 0, ``/metrics``
   ``duet_active_streams`` 0 and ``duet_kv_cache_reserved_bytes`` 0; reported: the cancelled count the engine gives
   (``duet_engine_finished_total{reason="cancelled"}``, its growth over the phase) and how long freeing took.
3. ``/health`` during the 4,000-digit request (``"2," + ",".join(["000"] * 1000)``, refused with a 400): ``/health``
   is polled every 20 ms while the request is in flight; reported: its answer and the slowest ``/health``
   (target: under 100 ms).

Load is bounded by ``--streams``, ``--seconds`` and ``--cut``, and never leaves 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_bench import Server, free_port, pct, rss_bytes, sample_rss  # noqa: E402

SENTENCES = (
    "Good morning, how are you today?",
    "Could you pass me the salt, please?",
    "The train leaves at half past seven.",
    "I will call you back in a few minutes.",
    "Thank you for waiting, your table is ready.",
    "It looks like it is going to rain this afternoon.",
    "Please turn off the lights when you leave the room.",
    "We are meeting at the library after lunch.",
    "Where did you put the keys to the car?",
    "That was the best soup I have had in years.",
    "The shop around the corner closes early on Sundays.",
    "Let me know if there is anything else you need.",
)
DIGITS = "2," + ",".join(["000"] * 1000)


def duet_serve_argv(model: str, port: int, max_batch: int, max_queue: int) -> list[str]:
    duet = Path(sys.executable).parent / "duet"
    return [str(duet), "serve", "--model", model, "--host", "127.0.0.1", "--port", str(port),
            "--max-batch", str(max_batch), "--max-queue", str(max_queue), "--log-level", "warning"]


async def one_stream(client: httpx.AsyncClient, model: str, text: str, seed: int,
                     sample_rate: int) -> tuple[float, float]:
    """Post one sentence and stream it to its end -> (seconds to the first audio byte, seconds of audio).
    Raises on anything but a clean 200 with audio."""
    body = {"model": model, "input": text, "seed": seed, "response_format": "pcm", "stream_format": "audio"}
    t0 = time.perf_counter()
    first = None
    received = 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:200]!r}")
        async for chunk in r.aiter_raw():
            if first is None:
                first = time.perf_counter()
            received += len(chunk)
    if received == 0:
        raise RuntimeError("a stream with no audio")
    return (first or time.perf_counter()) - t0, received / 2 / sample_rate


async def soak_client(client: httpx.AsyncClient, server: Server, rng: random.Random, deadline: float,
                      done: list[tuple[float, float]], errors: list[str]) -> None:
    while time.perf_counter() < deadline:
        try:
            done.append(await one_stream(client, server.model, rng.choice(SENTENCES), rng.randrange(2**31),
                                         server.sample_rate))
        except (httpx.HTTPError, RuntimeError) as err:
            errors.append(f"{type(err).__name__}: {err}")
            await asyncio.sleep(0.1)  # a broken server is not hammered in a tight loop


async def health_latencies(client: httpx.AsyncClient, every: float, out: list[float]) -> None:
    """Time ``GET /health`` every ``every`` seconds into ``out`` until cancelled."""
    while True:
        t0 = time.perf_counter()
        r = await client.get("/health")
        if r.status_code == 200:
            out.append(time.perf_counter() - t0)
        await asyncio.sleep(every)


async def soak(server: Server, n: int, seconds: float) -> dict:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as client, \
            httpx.AsyncClient(base_url=server.url, timeout=60) as probe:
        warm = await asyncio.gather(*(one_stream(client, server.model, SENTENCES[i % len(SENTENCES)], i,
                                                 server.sample_rate) for i in range(n)), return_exceptions=True)
        warm_errors = [w for w in warm if isinstance(w, BaseException)]
        start_rss = rss_bytes(server.proc.pid)
        samples: list[int] = []
        health: list[float] = []
        sampler = asyncio.create_task(sample_rss(server.proc.pid, samples))
        prober = asyncio.create_task(health_latencies(probe, 0.5, health))
        done: list[tuple[float, float]] = []
        errors: list[str] = []
        t0 = time.perf_counter()
        await asyncio.gather(*(soak_client(client, server, random.Random(i), t0 + seconds, done, errors)
                               for i in range(n)))
        wall = time.perf_counter() - t0
        sampler.cancel()
        prober.cancel()
        end_rss = rss_bytes(server.proc.pid)
    mb = 1024**2
    ttfa = [t * 1000 for t, _ in done] or [float("nan")]
    return {"streams": n, "wall_s": wall, "warm_errors": len(warm_errors), "completed": len(done),
            "errors": len(errors), "error_samples": sorted(set(errors))[:5],
            "audio_s": sum(a for _, a in done), "x_realtime": sum(a for _, a in done) / wall,
            "ttfa_p50_ms": pct(ttfa, 0.5), "ttfa_p95_ms": pct(ttfa, 0.95),
            "health_p50_ms": 1000 * pct(health, 0.5), "health_max_ms": 1000 * max(health),
            "rss_start_mb": start_rss / mb, "rss_end_mb": end_rss / mb,
            "rss_peak_mb": max(samples + [start_rss, end_rss]) / mb, "rss_growth_pct": 100 * (end_rss / start_rss - 1)}


def metric(text: str, name: str) -> float:
    """One sample of the Prometheus text ``text`` (a name with its labels, exactly as written)."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    if m is None:
        raise KeyError(name)
    return float(m.group(1))


async def cut_one(client: httpx.AsyncClient, server: Server, seed: int, cut_bytes: int) -> bool:
    """Open a stream, read ``cut_bytes`` of audio, close the connection -> whether it got that far."""
    body = {"model": server.model, "input": SENTENCES[seed % len(SENTENCES)] + " " + SENTENCES[-1], "seed": seed,
            "response_format": "pcm"}
    got = 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            return False
        async for chunk in r.aiter_raw():
            got += len(chunk)
            if got >= cut_bytes:
                break
    return got >= cut_bytes


async def cut_streams(server: Server, n: int, at_once: int, cut_bytes: int = 8192) -> dict:
    cancelled = f'duet_engine_finished_total{{model="{server.model}",reason="cancelled"}}'
    before = metric(httpx.get(f"{server.url}/metrics").text, cancelled)

    async def one(seed: int) -> bool:  # a client of its own per stream: leaving it closes the connection
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            return await cut_one(client, server, seed, cut_bytes)

    reached = 0
    for start in range(0, n, at_once):
        reached += sum(await asyncio.gather(*(one(s) for s in range(start, min(n, start + at_once)))))
    t0 = time.perf_counter()
    while True:
        health = httpx.get(f"{server.url}/health").json()
        text = httpx.get(f"{server.url}/metrics").text
        free = (health["running"] == health["waiting"] == 0 and metric(text, "duet_active_streams") == 0
                and metric(text, f'duet_kv_cache_reserved_bytes{{model="{server.model}"}}') == 0)
        if free or time.perf_counter() - t0 > 60:
            break
        await asyncio.sleep(0.05)
    return {"cut": n, "reached_cut_point": reached, "cancelled": int(metric(text, cancelled) - before),
            "all_free": free, "free_after_s": time.perf_counter() - t0, "running": health["running"],
            "waiting": health["waiting"], "active_streams": metric(text, "duet_active_streams"),
            "kv_reserved_bytes": metric(text, f'duet_kv_cache_reserved_bytes{{model="{server.model}"}}')}


async def health_during_digits(server: Server) -> dict:
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client, \
            httpx.AsyncClient(base_url=server.url, timeout=60) as probe:
        latencies: list[float] = []
        prober = asyncio.create_task(health_latencies(probe, 0.02, latencies))
        t0 = time.perf_counter()
        r = await client.post("/v1/audio/speech", json={"model": server.model, "input": DIGITS})
        wall = time.perf_counter() - t0
        prober.cancel()
    return {"status": r.status_code, "message": r.json()["error"]["message"] if r.status_code >= 400 else "",
            "request_s": wall, "health_polls": len(latencies), "health_p50_ms": 1000 * pct(latencies, 0.5),
            "health_max_ms": 1000 * max(latencies)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--streams", type=int, default=64)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--cut", type=int, default=100)
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--phases", default="soak,cut,digits", help="which of soak, cut, digits to run (comma-separated)")
    args = p.parse_args(argv)
    phases = set(args.phases.split(","))
    if not phases or phases - {"soak", "cut", "digits"}:
        p.error("--phases: a comma-separated subset of soak, cut, digits")
    if not (1 <= args.streams <= 256 and 0 < args.seconds <= 600 and 0 <= args.cut <= 1000):
        p.error("bounded load only: --streams 1..256, --seconds up to 600, --cut up to 1000")
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="soak_bench_")) / "server.log"
    server = Server(duet_serve_argv(args.model, port, args.max_batch, max(args.streams, args.cut) + 16), port, log)
    try:
        s = asyncio.run(soak(server, args.streams, args.seconds)) if "soak" in phases else None
        c = asyncio.run(cut_streams(server, args.cut, args.max_batch)) if args.cut and "cut" in phases else None
        d = asyncio.run(health_during_digits(server)) if "digits" in phases else None
    finally:
        server.close()
    print(f"model {args.model}, {args.streams} streams for {args.seconds:g} s, batch {args.max_batch}; server log {log}")
    print()
    if s is not None:
        head = ("streams", "seconds", "warm-up errors", "completed", "errors", "audio s", "x real time", "TTFA p50 ms",
                "TTFA p95 ms", "/health p50 ms", "/health max ms", "RSS start MB", "RSS end MB", "RSS peak MB",
                "RSS growth")
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        print(f"| {s['streams']} | {s['wall_s']:.1f} | {s['warm_errors']} | {s['completed']} | {s['errors']} | "
              f"{s['audio_s']:.0f} | {s['x_realtime']:.2f} | {s['ttfa_p50_ms']:.0f} | {s['ttfa_p95_ms']:.0f} | "
              f"{s['health_p50_ms']:.1f} | {s['health_max_ms']:.1f} | {s['rss_start_mb']:.0f} | {s['rss_end_mb']:.0f} | "
              f"{s['rss_peak_mb']:.0f} | {s['rss_growth_pct']:+.1f}% |")
        for e in s["error_samples"]:
            print(f"error: {e}")
    if c is not None:
        print()
        head = ("cut streams", "reached the cut", "cancelled", "all slots free", "freed after s", "running", "waiting",
                "active streams", "KV reserved bytes")
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join("---" for _ in head) + "|")
        print(f"| {c['cut']} | {c['reached_cut_point']} | {c['cancelled']} | {'yes' if c['all_free'] else 'NO'} | "
              f"{c['free_after_s']:.2f} | {c['running']} | {c['waiting']} | {c['active_streams']:.0f} | "
              f"{c['kv_reserved_bytes']:.0f} |")
    if d is not None:
        print()
        print("| 4,000-digit request | its time s | /health polls | /health p50 ms | /health max ms |")
        print("|---|---|---|---|---|")
        print(f"| {d['status']} | {d['request_s']:.2f} | {d['health_polls']} | {d['health_p50_ms']:.1f} | "
              f"{d['health_max_ms']:.1f} |")
        print(f"\n4,000-digit answer: {d['message'][:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
