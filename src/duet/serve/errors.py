"""What the engine refuses, as exceptions the HTTP API maps to OpenAI-shaped 4xx errors (see ``api.py``)."""

from __future__ import annotations

from duet.errors import DuetError, InvalidRequest

__all__ = ["InvalidRequest", "QueueFull", "EngineClosed", "GenerationFailed"]  # InvalidRequest: duet.errors (HTTP 400)


class QueueFull(DuetError):
    """Admission control: every slot is busy and the waiting queue is at its bound: HTTP 429 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineClosed(DuetError):
    """The engine was stopped or its thread is gone: HTTP 503."""


class GenerationFailed(RuntimeError):
    """A request ended in failure: the model adapter raised while running it (a bug or a broken model, not the
    user's input; ``code`` None), or it ran past its time budget (``code`` "timeout")."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code
