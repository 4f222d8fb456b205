"""Process trees for tests that launch servers or torchrun (Linux /proc): who a process's children are, and killing
a launch with everything it started, since its children may run in sessions of their own."""

from __future__ import annotations

import os
import signal
from pathlib import Path


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
