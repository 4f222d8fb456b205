"""The one exception type that user-facing code raises for bad input.

The CLI prints ``str(err)`` on one line and exits non-zero; the HTTP API maps it to a 4xx JSON body.
Anything else escaping is a bug in duet, not a user mistake.
"""


class DuetError(ValueError):
    """Bad input or a missing optional dependency, described in one line a user can act on."""


class MissingDependency(DuetError):
    """An optional extra or a system package is not installed."""

    def __init__(self, what: str, install_hint: str):
        super().__init__(f"{what} is not installed: {install_hint}")
        self.what, self.install_hint = what, install_hint


class InvalidRequest(DuetError):
    """A request no model run can satisfy (unknown voice, too long for the model, ...), naming the field at fault:
    ``duet speak`` prints it, the speech API answers HTTP 400 with ``param`` and ``code``."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code
