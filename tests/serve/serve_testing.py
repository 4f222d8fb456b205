"""Helpers for the serving tests: mock-backed engines and a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockAdapter, MockConfig
from duet.serve.scheduler import SchedulerConfig


def make_engine(mock: MockConfig = MockConfig(), script=None, **scheduler) -> tuple[Engine, MockAdapter]:
    adapter = MockAdapter(mock, script=script)
    return Engine(adapter, EngineConfig(scheduler=SchedulerConfig(**scheduler))), adapter


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.005)


@contextmanager
def uvicorn_server(app) -> Iterator[str]:
    """Serve ``app`` with a real uvicorn on 127.0.0.1 at a free port (the socket is bound first: no race)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started, what="uvicorn to start")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()

