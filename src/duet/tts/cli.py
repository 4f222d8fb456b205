"""``duet speak "Hello there" -o hello.wav [--model gepard-tiny] [--voice V] [--stream] [--seed N]``.

``--stream`` writes the file as audio is decoded (a reader can follow it) and reports the time to first audio;
without it the file is written once at the end. Text ``-`` is read from standard input. Bad input (empty text,
unknown model or voice, an output path that cannot be written) ends with one line on stderr and exit code 2,
before any model is loaded where possible.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from duet.errors import DuetError

FORMATS = {".wav": "WAV", ".flac": "FLAC", ".ogg": "OGG"}


def register(subparsers) -> None:
    p = subparsers.add_parser("speak", help="text to a sound file with a shipped model (offline)",
                              description="Speak text with a shipped model; long text is split at sentences.")
    p.add_argument("text", help="what to say ('-' reads standard input)")
    p.add_argument("-o", "--output", required=True, help="output file: .wav, .flac or .ogg")
    p.add_argument("--model", default="gepard-tiny", help="shipped model name or checkpoint directory")
    p.add_argument("--voice", default=None, help="a voice of the model (see --list-voices)")
    p.add_argument("--stream", action="store_true", help="write audio as it is decoded; print time to first audio")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same audio)")
    p.add_argument("--temperature", type=float, default=None)
    p.add_argument("--top-k", type=int, default=None)
    p.set_defaults(func=run_speak)


def check_output(path: Path) -> str:
    """The soundfile format for ``path``; a DuetError if the file cannot be written there."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DuetError(f"cannot write {path}: use a .wav, .flac or .ogg file name")
    if path.is_dir():
        raise DuetError(f"cannot write {path}: it is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise DuetError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise DuetError(f"cannot write {path}: permission denied")
    return fmt


def run_speak(args: argparse.Namespace) -> int:
    import soundfile as sf

    from duet.tts import load

    text = sys.stdin.read() if args.text == "-" else args.text
    if not text.strip():
        raise DuetError("the text is empty")
    out = Path(args.output)
    fmt = check_output(out)
    speaker = load(args.model)
    if args.voice is not None and args.voice not in speaker.voices:
        raise DuetError(f"unknown voice {args.voice!r} for {args.model}: {', '.join(speaker.voices)}")
    options = dict(voice=args.voice, seed=args.seed, temperature=args.temperature, top_k=args.top_k)
    started = time.perf_counter()
    if args.stream:
        first, samples, ended = None, 0, []
        with sf.SoundFile(out, "w", samplerate=speaker.sample_rate, channels=1, format=fmt) as f:
            for chunk in speaker.stream(text, ended=ended, **options):
                if first is None and len(chunk):
                    first = time.perf_counter() - started
                f.write(chunk)
                f.flush()
                samples += len(chunk)
        seconds = samples / speaker.sample_rate
        ttfa = f", first audio after {first * 1000:.0f} ms" if first is not None else ""
    else:
        speech = speaker.speak(text, **options)
        sf.write(out, speech.audio, speech.sample_rate, format=fmt)
        seconds, ended, ttfa = speech.seconds, list(speech.ended), ""
    wall = time.perf_counter() - started
    bound = sum(e != "stop" for e in ended)
    note = f"; {bound} of {len(ended)} pieces hit the length bound" if bound else ""
    print(f"{out}: {seconds:.2f} s of audio in {wall:.2f} s (RTF {wall / max(seconds, 1e-9):.3f}){ttfa}{note}")
    return 0
