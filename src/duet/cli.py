"""`duet` command line: parses arguments into config dataclasses and calls the library.

Each area owns its subcommands in a small ``cli.py`` of its own exposing ``register(subparsers)``; this file only
assembles them; ``duet.command.run`` turns a :class:`DuetError` into one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from duet.command import run

# Each top-level command and the area whose ``register(subparsers)`` adds it. Imported lazily: a command loads only
# its own area, so `duet speak` with a bad flag answers before torch or a training recipe is imported.
_AREAS = {"speak": "duet.tts.cli", "edit": "duet.tts.edit_cli", "data": "duet.data.cli", "eval": "duet.eval.cli",
          "codec": "duet.codecs.cli", "train": "duet.train.cli", "serve": "duet.serve.cli",
          "voice": "duet.voice.cli"}


def _whisper_scorer(asr_model: str | None = None):
    """What ``duet speak --verify`` and the speech API's ``verify`` hear speech back with (``duet.tts.verify``),
    handed to them by the command: Whisper (``asr_model``, ``--verify-asr``: a CTranslate2 directory; None: the
    bundled tiny.en), its transcript read with Whisper's English normaliser, so a sentence is not made again for a
    spelling ("you're" for "you are"; ``duet.metrics.wer``)."""
    from duet.metrics.clip import ClipScoreConfig, ClipScorer

    return ClipScorer(ClipScoreConfig(asr_model=asr_model, normalizer="whisper"))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser for ``command`` alone when it is a known command, else for all of them (``--help``, typos)."""
    parser = argparse.ArgumentParser(prog="duet", description="duet: Gepard and Luna-TTS text-to-speech")
    parser.set_defaults(verify_scorer=_whisper_scorer)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    areas = [_AREAS[command]] if command in _AREAS else list(_AREAS.values())
    for area in areas:
        importlib.import_module(area).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run(build_parser(argv[0] if argv else None), argv)


if __name__ == "__main__":
    sys.exit(main())
