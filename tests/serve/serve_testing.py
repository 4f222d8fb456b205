"""Helpers for the serving tests: mock-backed engines and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import torch

from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.scheduler import SchedulerConfig


def make_engine(mock: MockConfig = MockConfig(), script=None, chunk_frames: int = 1, max_chunk_frames: int = 16,
                **scheduler) -> tuple[Engine, MockRuntime]:
    runtime = MockRuntime(mock, script=script)
    config = EngineConfig(scheduler=SchedulerConfig(**scheduler), chunk_frames=chunk_frames,
                          max_chunk_frames=max_chunk_frames)
    return Engine(runtime, config), runtime


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


@contextmanager
def uvicorn_server(app, http="auto") -> Iterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1 at a free port (the socket is bound first: no race);
    ``http``: uvicorn's protocol name or class."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", http=http))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def drive(runtime, jobs: list[tuple[int, object]]) -> list[torch.Tensor]:
    """Prefill/step an runtime like the engine; job i = (step at which it joins, request). -> codes (Q, T) per job,
    all its steps' frames joined. A request ends on ``final`` or when its frames reach its bound, as in the engine."""
    running: dict[int, object] = {}
    got: dict[int, list[torch.Tensor]] = {i: [] for i in range(len(jobs))}
    bounds = [r.params.max_frames or runtime.frame_bound(r) for _, r in jobs]
    done: set[int] = set()
    step = 0
    while len(done) < len(jobs):
        for i, (at, req) in enumerate(jobs):
            if at == step:
                running[i] = runtime.prefill([req], [req.params.seed])[0]
        if running:
            order = list(running)
            for i, out in zip(order, runtime.step([running[i] for i in order])):
                got[i].append(out.codes)
                if out.final or sum(c.shape[1] for c in got[i]) >= bounds[i]:
                    done.add(i)
                    runtime.release(running.pop(i))
        step += 1
    return [torch.cat(got[i], dim=1) for i in range(len(jobs))]
