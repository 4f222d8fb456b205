"""`duet data build` and `duet data encode`: flags -> library calls (`build.build_corpus`, `shards.encode_corpus`)."""

from __future__ import annotations

import argparse
import os


def register(subparsers: argparse._SubParsersAction) -> None:
    from duet.data.presets import PRESETS

    data = subparsers.add_parser("data", help="build a speech corpus offline and encode it into codec codes")
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    sub.required = True

    build = sub.add_parser("build", help="render a multi-speaker corpus (WAV + manifest.jsonl + summary)")
    build.add_argument(
        "--preset", choices=sorted(PRESETS), required=True, help="corpus recipe (tiny: tests; base: hours)"
    )
    build.add_argument("--out", required=True, help="corpus directory (a rerun resumes and skips finished audio)")
    build.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    build.add_argument("--seed", type=int, default=0, help="text choice and split seed")
    build.add_argument("--quiet", action="store_true", help="no progress bar or summary on stdout")
    build.set_defaults(func=_build)

    encode = sub.add_parser("encode", help="run a codec over a corpus into resumable safetensors shards")
    encode.add_argument("--codec", required=True, help="codec name as known to duet.codecs.load")
    encode.add_argument("--manifest", required=True, help="manifest.jsonl of a built corpus")
    encode.add_argument("--out", required=True, help="shard directory (index.json + shard-*.safetensors)")
    encode.add_argument("--shard-size", type=int, default=1000, help="utterances per shard")
    encode.add_argument("--batch-size", type=int, default=8, help="utterances per codec call")
    encode.add_argument("--quiet", action="store_true", help="no progress bar")
    encode.set_defaults(func=_encode)


def _build(args: argparse.Namespace) -> int:
    from duet.data.build import build_corpus
    from duet.data.presets import get_preset
    from duet.errors import DuetError

    if args.workers < 1:
        raise DuetError(f"--workers must be at least 1, got {args.workers}")
    build_corpus(get_preset(args.preset), args.out, workers=args.workers, seed=args.seed, progress=not args.quiet)
    return 0


def _encode(args: argparse.Namespace) -> int:
    from duet.data.shards import encode_corpus
    from duet.errors import DuetError

    try:
        from duet.codecs import load  # the codec registry lives with the codecs; imported only when encoding
    except ImportError as err:
        raise DuetError(f"codec registry unavailable (duet.codecs.load): {err}") from err
    if args.shard_size < 1:
        raise DuetError(f"--shard-size must be at least 1, got {args.shard_size}")
    codec = load(args.codec)
    index = encode_corpus(
        codec,
        args.manifest,
        args.out,
        shard_size=args.shard_size,
        batch_size=args.batch_size,
        codec_name=args.codec,
        progress=not args.quiet,
    )
    if not args.quiet:
        n = sum(len(shard["ids"]) for shard in index["shards"])
        print(f"{n} utterances in {len(index['shards'])} shards under {args.out}")
    return 0
