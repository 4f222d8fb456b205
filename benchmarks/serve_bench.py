"""Streaming speech through ``duet serve`` at several concurrencies, measured from the client's side, in one run.

    PYTHONPATH=src .venv/bin/python benchmarks/serve_bench.py [--streams 1 4 16] [--frames 64]
        [--models mock gepard-tiny] [--engine builtin|vllm|both]

For each engine, model and concurrency N, a fresh server process runs on 127.0.0.1 (``--engine builtin``: duet's
own continuous-batching engine; ``--engine vllm``: ``duet serve --engine vllm`` in the venv named by
``DUET_VLLM_PYTHON``, Gepard only), gets one warm-up request, then N clients post at once and stream raw PCM
(``stream_format="audio"``). Every utterance is exactly ``--frames`` frames (``max_frames`` with a stop threshold the
random stop head never crosses), so all rows do the same work. Per stream:

- TTFA: request sent -> first audio byte (includes prefill, the first decode step and the codec's lookahead);
- RTF: request sent -> last byte, over the audio's duration (< 1 is faster than real time);
- underrun: a chunk that arrived after a player that started at the first byte would have run dry;
and for the run: aggregate x real time (all audio seconds / wall seconds) and decoded frames per second.

Models: ``mock`` (uniform logits, a toy codec: the serving stack's own overhead) and ``gepard-tiny`` with random
weights (``duet.gepard.config.gepard_tiny``, 5.5M parameters) and the duet FSQ codec (the shipped ``duet-fsq`` if
present, else random weights of the same shape: the same compute). Load goes to loopback only, bounded by
``--streams`` and ``--frames``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


# --- the server side -------------------------------------------------------------------------------------------------


def make_gepard_tiny(root: Path) -> tuple[Path, Path, str]:
    """A random-init gepard-tiny checkpoint and an FSQ codec directory under ``root``: (checkpoint, codec, note)."""
    import torch

    from duet.codecs.registry import build, resolve, save_pretrained
    from duet.errors import DuetError
    from duet.gepard.checkpoint import save_gepard
    from duet.gepard.config import gepard_tiny
    from duet.gepard.model import GepardModel
    from duet.text.bpe import BPEConfig, save_bpe, train_bpe

    torch.manual_seed(0)
    corpus = ["the quick brown fox jumps over the lazy dog, and then it speaks a few words"] * 20
    tokenizer = save_bpe(train_bpe(corpus, BPEConfig(vocab_size=400)), root / "tokenizer.json")
    checkpoint = save_gepard(GepardModel(gepard_tiny()), tokenizer, root / "gepard-tiny",
                             codec={"name": "duet-fsq", "frame_rate": 22050 / 1024})
    try:
        return checkpoint, resolve("duet-fsq"), "shipped duet-fsq codec"
    except DuetError:
        return checkpoint, save_pretrained(build("duet-fsq"), root / "codec"), "duet-fsq codec, random weights"


def serve_builtin(model: str, checkpoint: str | None, codec: str | None, port: int, max_batch: int) -> None:
    """The builtin-engine server process (``--_serve``)."""
    import uvicorn

    from duet.serve.api import ServeConfig, create_app
    from duet.serve.engine import Engine, EngineConfig
    from duet.serve.scheduler import SchedulerConfig

    if model == "mock":
        from duet.serve.mock import MockAdapter, MockConfig

        adapter = MockAdapter(MockConfig(max_frames=4096))
    else:
        from duet.codecs import load
        from duet.gepard.checkpoint import load_gepard
        from duet.serve.gepard_adapter import GepardAdapter, GepardServeConfig, text_encoder

        loaded = load_gepard(checkpoint)
        adapter = GepardAdapter(loaded.model, load(codec), text_encoder(loaded.tokenizer),
                                GepardServeConfig(name="gepard"))
    engine = Engine(adapter, EngineConfig(scheduler=SchedulerConfig(max_running=max_batch, max_waiting=256,
                                                                     cache_budget_bytes=4 * 1024**3)))
    uvicorn.run(create_app(engine, ServeConfig()), host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, argv: list[str], port: int, log: Path, timeout: float = 600):
        env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2")}
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


async def one_stream(client: httpx.AsyncClient, server: Server, frames: int, seed: int) -> StreamResult:
    body = {"model": server.model, "input": "the quick brown fox jumps over the lazy dog " * 3, "seed": seed,
            "max_frames": frames, "stop_threshold": NEVER, "response_format": "pcm", "stream_format": "audio"}
    t0 = time.perf_counter()
    first = None
    received = 0  # bytes
    underruns = 0
    async with client.stream("POST", "/v1/audio/speech", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
        async for chunk in r.aiter_raw():
            now = time.perf_counter()
            if first is None:
                first = now
            elif now > first + received / 2 / server.sample_rate:  # the player has played all it had
                underruns += 1
            received += len(chunk)
    end = time.perf_counter()
    audio_s = received / 2 / server.sample_rate
    return StreamResult(ttfa_s=(first or end) - t0, wall_s=end - t0, audio_s=audio_s, underruns=underruns)


async def concurrent(server: Server, n: int, frames: int) -> tuple[list[StreamResult], float]:
    limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
    async with httpx.AsyncClient(base_url=server.url, timeout=600, limits=limits) as client:
        await one_stream(client, server, min(frames, 16), seed=0)  # warm-up
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one_stream(client, server, frames, seed=1 + i) for i in range(n)))
        return list(results), time.perf_counter() - t0


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(engine: str, model: str, n: int, results: list[StreamResult], wall: float, frame_rate: float) -> dict:
    ttfa = [r.ttfa_s * 1000 for r in results]
    rtf = [r.wall_s / r.audio_s for r in results if r.audio_s > 0]
    audio = sum(r.audio_s for r in results)
    return {"engine": engine, "model": model, "streams": n, "ttfa_p50_ms": pct(ttfa, 0.5),
            "ttfa_p95_ms": pct(ttfa, 0.95), "rtf_p50": statistics.median(rtf), "rtf_p95": pct(rtf, 0.95),
            "x_realtime": audio / wall, "frames_per_s": audio * frame_rate / wall,
            "underruns": sum(r.underruns for r in results), "audio_s": audio, "wall_s": wall}


def print_table(rows: list[dict]) -> None:
    head = ("engine", "model", "streams", "TTFA p50 ms", "TTFA p95 ms", "RTF p50", "RTF p95", "x real time",
            "frames/s", "underruns")
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for r in rows:
        print(f"| {r['engine']} | {r['model']} | {r['streams']} | {r['ttfa_p50_ms']:.0f} | {r['ttfa_p95_ms']:.0f} | "
              f"{r['rtf_p50']:.3f} | {r['rtf_p95']:.3f} | {r['x_realtime']:.2f} | {r['frames_per_s']:.0f} | "
              f"{r['underruns']} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--streams", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--frames", type=int, default=64, help="frames per utterance (gepard: 21.5 per second)")
    p.add_argument("--models", nargs="+", default=["mock", "gepard-tiny"], choices=["mock", "gepard-tiny"])
    p.add_argument("--engine", choices=["builtin", "vllm", "both"], default="builtin")
    p.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    p.add_argument("--_serve", nargs=4, metavar=("MODEL", "CHECKPOINT", "CODEC", "PORT"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    max_batch = max(args.streams)
    if args._serve:
        model, checkpoint, codec, port = args._serve
        serve_builtin(model, checkpoint, codec, int(port), max_batch)
        return 0

    engines = ["builtin", "vllm"] if args.engine == "both" else [args.engine]
    vllm_python = os.environ.get("DUET_VLLM_PYTHON", "")
    if "vllm" in engines and not (vllm_python and os.access(vllm_python, os.X_OK)):
        print("vllm: skipped (set DUET_VLLM_PYTHON to a venv made by scripts/setup_vllm_cpu.sh)", file=sys.stderr)
        engines.remove("vllm")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="duet-serve-bench-") as tmp:
        root = Path(tmp)
        checkpoint, codec, note = make_gepard_tiny(root) if "gepard-tiny" in args.models else (None, None, "")
        if note:
            print(f"gepard-tiny: random weights, {note}", file=sys.stderr)
        for engine in engines:
            for model in args.models:
                if engine == "vllm" and model == "mock":
                    continue  # vLLM serves Gepard only
                for n in args.streams:
                    port = free_port()
                    if engine == "builtin":
                        argv = [sys.executable, __file__, "--streams", str(max_batch), "--_serve", model,
                                str(checkpoint), str(codec), str(port)]
                    else:
                        argv = [vllm_python, "-m", "duet.cli", "serve", "--engine", "vllm", "--model", "gepard",
                                "--checkpoint", str(checkpoint), "--codec", str(codec), "--port", str(port),
                                "--max-batch", str(max_batch), "--log-level", "warning"]
                    server = Server(argv, port, root / f"{engine}-{model}-{n}.log")
                    try:
                        frame_rate = 50.0 if model == "mock" else 22050 / 1024
                        results, wall = asyncio.run(concurrent(server, n, args.frames))
                        rows.append(row(engine, model, n, results, wall, frame_rate))
                        print(f"{engine} {model} x{n}: done in {wall:.1f} s", file=sys.stderr)
                    finally:
                        server.close()
    print(f"\n{args.frames} frames per stream; TTFA includes the codec's lookahead; RTF < 1 is faster than real time.")
    print_table(rows)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
