"""Running a parsed command line: the one place where a :class:`DuetError` becomes one line on stderr and exit
code 2. Every entry point (``duet`` in ``duet.cli``, and the modules torchrun launches) goes through :func:`run`."""

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
