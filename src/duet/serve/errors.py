"""What the engine and the server's model lookup refuse, as exceptions the HTTP API maps to OpenAI-shaped 4xx
errors (see ``api.py``)."""

from __future__ import annotations

from duet.errors import DuetError, InvalidRequest

# InvalidRequest: duet.errors (HTTP 400)
__all__ = ["InvalidRequest", "QueueFull", "Overloaded", "EngineClosed", "GenerationFailed", "ModelNotFound"]


class QueueFull(DuetError):
    """Admission control: every slot is busy and the waiting queue is at its bound: HTTP 429 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Overloaded(DuetError):
    """Admission control: at the current load the engine estimates the request would not end within its time
    budget (``cost.py``), so it is refused at once rather than timed out later: HTTP 503 with Retry-After."""

    def __init__(self, message: str, retry_after_s: float):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class EngineClosed(DuetError):
    """The engine was stopped or its thread is gone: HTTP 503."""


class GenerationFailed(RuntimeError):
    """A request ended in failure: the model runtime raised while running it (a bug or a broken model, not the
    user's input; ``code`` None), or it ran past its time budget (``code`` "timeout")."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


class ModelNotFound(DuetError):
    """A request named a model the server does not hold: HTTP 404 ``model_not_found``."""

    def __init__(self, name: str, available: tuple[str, ...]):
        super().__init__(f"model {name!r} not found; this server has {', '.join(available)}")
        self.name, self.available = name, available
