"""Graceful stops (``duet.train.runner``, which every training run shares): SIGTERM / SIGINT set a flag that the
skeleton checks after each step, so it can write a checkpoint and exit cleanly (``kill PID`` never loses more than
the current step)."""

from __future__ import annotations

import signal
from typing import Any


class StopOnSignal:
    def __init__(self):
        self.stop = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> "StopOnSignal":
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. a test runner's worker): no handlers, no flag
                pass
        return self

    def _handle(self, signum, frame) -> None:
        self.stop = True

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
