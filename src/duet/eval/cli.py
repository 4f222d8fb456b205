"""`duet eval ...` subcommands. Heavy imports (faster-whisper) happen inside the command, not at registration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    sub = subparsers.add_parser("eval", help="evaluate speech: WER through ASR")
    evsub = sub.add_subparsers(dest="eval_command", metavar="METRIC")
    evsub.required = True

    wer = evsub.add_parser(
        "wer",
        help="transcribe a manifest's audio with Whisper and report WER per source",
        description="WER of the English entries of a JSONL manifest (mean of per-utterance WER, Seed-TTS-eval "
        "normalisation); other languages are counted but not scored.",
    )
    wer.add_argument("--manifest", required=True, type=Path, help="JSONL manifest (paths relative to it)")
    wer.add_argument("--split", default="test", help="split to score (default: test; 'all' = every entry)")
    wer.add_argument(
        "--asr-model", type=Path, default=None, help="CTranslate2 Whisper directory (default: bundled Whisper tiny.en)"
    )
    wer.add_argument("--limit", type=int, default=None, help="score only the first N English entries")
    wer.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON result file (default: wer_<manifest name>_<split>.json in the current directory)",
    )
    wer.set_defaults(func=run_wer)


def run_wer(args: argparse.Namespace) -> int:
    from duet.eval.asr import ASRConfig, Transcriber
    from duet.eval.manifest_wer import evaluate_manifest, format_table, to_json

    split = None if args.split == "all" else args.split
    transcriber = Transcriber(ASRConfig(model_path=str(args.asr_model) if args.asr_model else None))
    model_path = transcriber.model_path  # a bad --asr-model fails here, before any audio is read
    result = evaluate_manifest(args.manifest, transcriber, split=split, limit=args.limit)
    out = args.out or Path(f"wer_{args.manifest.stem}_{args.split}.json")
    payload = {"manifest": str(args.manifest), "split": args.split, "asr_model": str(model_path), **to_json(result)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_table(result))
    print(f"wrote {out}")
    return 0
