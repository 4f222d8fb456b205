"""`duet` command line: parses arguments into config dataclasses and calls the library.

Each area owns its subcommands in a small ``cli.py`` of its own exposing ``register(subparsers)``; this file only
assembles them; ``duet.command.run`` turns a :class:`DuetError` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from duet.command import run

# Areas whose ``register(subparsers)`` adds top-level commands. Imported lazily so `duet --help` stays fast.
_AREAS = ("duet.tts.cli", "duet.tts.edit_cli", "duet.data.cli", "duet.eval.cli", "duet.codecs.cli", "duet.train.cli",
          "duet.serve.cli")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="duet", description="duet: Gepard and Luna-TTS text-to-speech")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for area in _AREAS:
        importlib.import_module(area).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
