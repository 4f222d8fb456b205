"""Speaking while an LLM is still writing: the text-streaming WebSocket against the whole text sent at the end.

    PYTHONPATH=src .venv/bin/python benchmarks/input_streaming_bench.py [--model gepard-tiny] [--rates 20 50 100]
        [--repeats 2] [--out benchmarks/results/input_streaming.md]

One ``duet serve`` process (the built-in engine, one stream at a time) and a simulated LLM that emits the tokens of
a short answer at a fixed rate. A token is what a BPE tokenizer of English yields on average: a word of up to four
letters with its leading space, longer words in pieces of four, punctuation alone (``TOKEN`` below). Per rate, in
one run:

- streamed: a ``/v1/audio/speech/stream`` session gets each token as a ``text.delta`` as the LLM makes it, then
  ``text.done``;
- whole text: the same text as one ``POST /v1/audio/speech`` (raw PCM, streamed back), sent when the LLM finishes.

Reported, from the client's side: first audio (first token sent -> first audio byte) and how many tokens had been
sent by then (and how many the first spoken piece holds); underruns (audio that arrived after a player started at
the first byte had played everything it had, and the seconds it waited in all; and the same for a player that keeps a
0.1 s buffer, starting 0.1 s after the first byte, as the web page's does); and the latency after the last token
(last token sent -> last audio byte).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import websockets
from serve_bench import Server, free_port  # the same server start as the serving benchmark

ANSWER = ("Sure, here is a quick summary. The museum opens at nine in the morning and closes at six, except on "
          "Mondays. Tickets cost twelve dollars for adults, and children under ten get in for free. The new "
          "exhibition about ocean life is on the second floor, right next to the cafe.")
BUFFER_S = 0.1  # the second player's jitter buffer, as the web page's player keeps
TOKEN = re.compile(r"\s?[A-Za-z]{1,4}|\s?\d{1,3}|\s?[^\sA-Za-z\d]|\s+")


@dataclass
class Listen:
    """What a player sees: bytes arriving over time. It starts playing ``lead_s`` after the first byte (a jitter
    buffer; the web page's player keeps 0.1 s) and waits, counting an underrun, whenever it has played all it had."""

    sample_rate: int
    lead_s: float = 0.0
    first: float | None = None
    received: int = 0  # bytes
    underruns: int = 0
    waited_s: float = 0.0
    last: float | None = None

    def audio(self, nbytes: int, now: float) -> None:
        if not nbytes:
            return
        if self.first is None:
            self.first = now
        else:
            played_until = self.first + self.lead_s + self.waited_s + self.received / 2 / self.sample_rate
            if now > played_until:  # the player ran dry before this chunk came
                self.underruns += 1
                self.waited_s += now - played_until
        self.received += nbytes
        self.last = now


async def llm(tokens: list[str], rate: float, send, t0: float) -> list[float]:
    """Call ``send`` with each token at its time; returns the send times."""
    times = []
    for i, token in enumerate(tokens):
        await asyncio.sleep(max(0.0, t0 + i / rate - time.perf_counter()))
        times.append(time.perf_counter())
        await send(token)
    return times


async def streamed(url: str, model: str, sample_rate: int, tokens: list[str], rate: float, seed: int) -> dict:
    async with websockets.connect(url.replace("http", "ws") + "/v1/audio/speech/stream", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.start", "model": model, "seed": seed}))
        json.loads(await ws.recv())  # session.started
        listen, buffered = Listen(sample_rate), Listen(sample_rate, BUFFER_S)
        first_piece: list[str] = []

        async def receive() -> None:
            while True:
                message = await ws.recv()
                if isinstance(message, bytes):
                    now = time.perf_counter()
                    listen.audio(len(message), now)
                    buffered.audio(len(message), now)
                    continue
                event = json.loads(message)
                if event["type"] == "piece.started" and not first_piece:
                    first_piece.append(event["text"])
                if event["type"] == "error":
                    raise RuntimeError(event["message"])
                if event["type"] == "session.done":
                    return

        receiver = asyncio.create_task(receive())
        t0 = time.perf_counter()
        sent = await llm(tokens, rate, lambda t: ws.send(json.dumps({"type": "text.delta", "delta": t})), t0)
        await ws.send(json.dumps({"type": "text.done"}))
        await receiver
    before_audio = sum(1 for t in sent if t <= listen.first)
    return {"first_audio_s": listen.first - t0, "tokens_before_audio": before_audio,
            "first_piece_tokens": len(TOKEN.findall(first_piece[0])) if first_piece else 0,
            "underruns": listen.underruns, "waited_s": listen.waited_s, "buffered_underruns": buffered.underruns,
            "after_last_token_s": listen.last - sent[-1], "audio_s": listen.received / 2 / sample_rate}


async def whole(url: str, model: str, sample_rate: int, tokens: list[str], rate: float, seed: int) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        t0 = time.perf_counter()
        sent = await llm(tokens, rate, lambda t: asyncio.sleep(0), t0)
        listen, buffered = Listen(sample_rate), Listen(sample_rate, BUFFER_S)
        body = {"model": model, "input": "".join(tokens), "seed": seed, "response_format": "pcm"}
        async with client.stream("POST", "/v1/audio/speech", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
            async for chunk in r.aiter_raw():
                now = time.perf_counter()
                listen.audio(len(chunk), now)
                buffered.audio(len(chunk), now)
    return {"first_audio_s": listen.first - t0, "tokens_before_audio": len(tokens), "first_piece_tokens": len(tokens),
            "underruns": listen.underruns, "waited_s": listen.waited_s, "buffered_underruns": buffered.underruns,
            "after_last_token_s": listen.last - sent[-1], "audio_s": listen.received / 2 / sample_rate}


def mean(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


async def run(url: str, model: str, sample_rate: int, rates: list[float], repeats: int) -> list[str]:
    tokens = TOKEN.findall(ANSWER)
    assert "".join(tokens) == ANSWER
    await streamed(url, model, sample_rate, tokens[:12], 100, seed=0)  # warm-up
    lines = [f"{len(tokens)} tokens, {len(ANSWER.split())} words; means over {repeats} runs (seeds 1..{repeats})", "",
             "| tokens/s | mode | first audio | tokens sent by then (first piece) | underruns (waited), player from "
             f"the first byte | underruns, {BUFFER_S * 1000:.0f} ms buffer | after last token | audio |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for rate in rates:
        for name, mode in (("streamed", streamed), ("whole text", whole)):
            rows = [await mode(url, model, sample_rate, tokens, rate, seed) for seed in range(1, repeats + 1)]
            lines.append(f"| {rate:g} | {name} | {mean(rows, 'first_audio_s'):.2f} s | "
                         f"{mean(rows, 'tokens_before_audio'):.0f} ({mean(rows, 'first_piece_tokens'):.0f}) | "
                         f"{mean(rows, 'underruns'):.1f} ({mean(rows, 'waited_s'):.2f} s) | "
                         f"{mean(rows, 'buffered_underruns'):.1f} | "
                         f"{mean(rows, 'after_last_token_s'):.2f} s | {mean(rows, 'audio_s'):.1f} s |")
            print(lines[-1], flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--rates", type=float, nargs="+", default=[20, 50, 100])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the server's engine")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    port = free_port()
    argv_serve = [sys.executable, "-m", "duet.cli", "serve", "--model", args.model, "--port", str(port),
                  "--engine-threads", str(args.threads)]
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(argv_serve, port, Path(tmp) / "server.log")
        try:
            lines = asyncio.run(run(server.url, server.model, server.sample_rate, args.rates, args.repeats))
        finally:
            server.close()
    command = shlex.join(["python", "benchmarks/input_streaming_bench.py", *(argv or sys.argv[1:])])
    table = "\n".join([f"`{command}`", "", *lines]) + "\n"
    if args.out:  # the file and the terminal get the same table
        Path(args.out).write_text(table, encoding="utf-8")
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
