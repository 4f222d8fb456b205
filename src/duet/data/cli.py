"""`duet data build`, `duet data encode` and `duet data align`: flags -> library calls (`build.build_corpus`,
`shards.encode_corpus`, `duet.data.align_corpus.align_corpus`)."""

from __future__ import annotations

import argparse
import os

# The names of duet.data.presets.PRESETS, spelled out: the presets import their renderers (numpy, scipy, soundfile),
# which `duet --help` does not need. tests/test_cli_imports.py keeps the two equal.
CORPUS_PRESETS = ("tiny", "base", "joe", "large", "voices", "expressive")


def register(subparsers: argparse._SubParsersAction) -> None:
    data = subparsers.add_parser("data", help="build a speech corpus offline and encode it into codec codes")
    sub = data.add_subparsers(dest="data_command", metavar="SUBCOMMAND")
    sub.required = True

    build = sub.add_parser("build", help="render a multi-speaker corpus (WAV + manifest.jsonl + summary)")
    build.add_argument(
        "--preset", choices=sorted(CORPUS_PRESETS), required=True, help="corpus recipe (tiny: tests; base: hours)"
    )
    build.add_argument("--out", required=True, help="corpus directory (a rerun resumes and skips finished audio)")
    build.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: all cores)")
    build.add_argument("--seed", type=int, default=0, help="text choice and split seed")
    build.add_argument("--quiet", action="store_true", help="no progress bar or summary on stdout")
    build.add_argument("--max-hours", type=float, default=None,
                       help="stop after rendering this many new hours and write the manifest of what is finished "
                            "(a rerun without it completes the corpus)")
    build.add_argument("--reuse", action="append", default=[], metavar="DIR",
                       help="link finished files from another corpus directory instead of rendering them again "
                            "(repeatable; e.g. build joe first, then large with --reuse)")
    build.set_defaults(func=_build)

    encode = sub.add_parser("encode", help="run a codec over a corpus into resumable safetensors shards")
    encode.add_argument("--codec", required=True, help="codec name as known to duet.codecs.load")
    encode.add_argument("--manifest", required=True, help="manifest.jsonl of a built corpus")
    encode.add_argument("--out", required=True, help="shard directory (index.json + shard-*.safetensors)")
    encode.add_argument("--shard-size", type=int, default=1000, help="utterances per shard")
    encode.add_argument("--batch-size", type=int, default=8, help="utterances per codec call")
    encode.add_argument("--quiet", action="store_true", help="no progress bar")
    encode.set_defaults(func=_encode)

    align = sub.add_parser("align", help="force-align text tokens to code frames (Luna's duration targets)")
    align.add_argument("--manifest", required=True, help="manifest.jsonl of a built corpus")
    align.add_argument("--shards", required=True, help="its code shards (the frame grid to align to)")
    align.add_argument("--tokenizer", required=True,
                       help="the tokenizer.json Luna trains with (a run's or a shipped model's)")
    align.add_argument("--out", required=True, help="alignment file to write (JSON lines)")
    align.add_argument("--languages", default="", help="comma-separated language prefixes, as for training")
    align.add_argument("--iterations", type=int, default=6, help="EM rounds")
    align.add_argument("--limit", type=int, default=None, help="align only the first N utterances (a trial)")
    align.add_argument("--quiet", action="store_true", help="no progress bars")
    align.set_defaults(func=_align)


def _build(args: argparse.Namespace) -> int:
    from duet.data.build import build_corpus
    from duet.data.presets import get_preset
    from duet.errors import DuetError

    if args.workers < 1:
        raise DuetError(f"--workers must be at least 1, got {args.workers}")
    build_corpus(get_preset(args.preset), args.out, workers=args.workers, seed=args.seed, progress=not args.quiet,
                 max_hours=args.max_hours, reuse=args.reuse)
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


def _align(args: argparse.Namespace) -> int:
    from pathlib import Path

    from duet.command import comma_list
    from duet.data.align import AlignerConfig
    from duet.data.align_corpus import align_corpus
    from duet.errors import DuetError

    tokenizer = Path(args.tokenizer)
    if tokenizer.is_dir():
        tokenizer = tokenizer / "tokenizer.json"
    if not tokenizer.is_file():
        raise DuetError(f"--tokenizer {args.tokenizer}: no tokenizer.json there")
    if args.iterations < 1:
        raise DuetError(f"--iterations must be at least 1, got {args.iterations}")
    languages = comma_list(args.languages)
    done = align_corpus(args.manifest, args.shards, tokenizer, args.out, languages=languages,
                        cfg=AlignerConfig(iterations=args.iterations), limit=args.limit, progress=not args.quiet)
    r = done.result
    print(f"{args.out}: {done.utterances} utterances, {done.frames} frames; mean log-likelihood per frame by round "
          f"{', '.join(f'{x:.2f}' for x in r.log_lik)}; {len(r.fallback)} kept the spread (fewer frames than tokens)")
    return 0
