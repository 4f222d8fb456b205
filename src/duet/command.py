"""Running a parsed command line: the one place where a :class:`DuetError` becomes one line on stderr and exit
code 2. Every entry point (``duet`` in ``duet.cli``, and the modules torchrun launches) goes through :func:`run`.
:func:`comma_list` reads the flags that take several names (``--languages en,es``)."""

from __future__ import annotations

import argparse
import sys

from duet.errors import DuetError


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parse ``argv`` and call the chosen command; a DuetError becomes one line on stderr and exit code 2.
    Every entry point (``duet``, and the modules torchrun launches) goes through here."""
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DuetError as err:
        print(f"duet: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("duet: interrupted", file=sys.stderr)
        return 130


def comma_list(value: str | None) -> tuple[str, ...]:
    """A flag's comma-separated names, stripped, empty ones dropped (None: none)."""
    return tuple(x.strip() for x in (value or "").split(",") if x.strip())
