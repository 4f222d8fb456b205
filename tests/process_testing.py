"""Processes for tests that launch servers or torchrun: process trees (Linux /proc: who a process's children are, and
killing a launch with everything it started, since its children may run in sessions of their own), a free port, and
``duet serve`` started as a user starts it (``duet_serve``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _parents() -> dict[int, list[int]]:
    """parent pid -> its children's pids, one pass over /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return children


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid``."""
    return _parents().get(pid, [])


def descendant_pids(pid: int) -> list[int]:
    """Every process below ``pid``, whatever its session or group."""
    children = _parents()
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process below it (a group kill misses workers started with a session of their own,
    and one of them left alive keeps the launcher's pipes open)."""
    for p in [pid, *descendant_pids(pid)]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def free_port() -> int:
    """A localhost TCP port nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def duet_serve(*args: str, timeout_s: float = 300.0) -> Iterator[str]:
    """``duet serve ARGS --port P`` in its own process, as a user starts it, from this checkout's ``src`` -> its URL
    (``http://127.0.0.1:P``) once ``/health`` answers 200; stopped (then killed) on exit. ``timeout_s``: a loaded CI
    machine can take minutes to import torch."""
    import httpx

    port = free_port()
    src = Path(__file__).resolve().parents[1] / "src"
    env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "duet.cli", "serve", *args, "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"duet serve exited: {proc.stdout.read().decode(errors='replace')}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("duet serve did not come up")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        proc.stdout.close()
