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
