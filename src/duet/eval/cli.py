"""`duet eval ...` subcommands. Heavy imports (faster-whisper) happen inside the command, not at registration."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(subparsers) -> None:
    sub = subparsers.add_parser("eval", help="evaluate TTS: test sets, runs, reports, comparisons, listening arena")
    evsub = sub.add_subparsers(dest="eval_command", metavar="COMMAND")
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
        "--asr-model", type=Path, default=None,
        help="CTranslate2 Whisper directory, or 'base' (Whisper base from the eval extra; default: bundled tiny.en)",
    )
    wer.add_argument("--limit", type=int, default=None, help="score only the first N English entries")
    wer.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON result file (default: wer_<manifest name>_<split>.json in the current directory)",
    )
    wer.set_defaults(func=run_wer)
    _register_sets_and_runs(evsub)
    _register_arena(evsub)
    from duet.eval.expressive_cli import register as register_expressive

    register_expressive(evsub)


def run_wer(args: argparse.Namespace) -> int:
    from duet.eval.manifest_wer import evaluate_manifest, format_table, to_json
    from duet.metrics.asr import ASRConfig, Transcriber

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


def _register_sets_and_runs(evsub) -> None:
    build = evsub.add_parser(
        "build-set",
        help="build a Seed-TTS-eval meta.lst from a corpus manifest (clone pairs or the short register)",
        description="Targets of one split, each paired with a prompt read by the same speaker. 'clone': targets "
        "of more than --max-short-words words; 'short': targets of 1..--max-short-words words. 'words': --limit "
        "(default 100) one- or two-word prompts, no voice prompt: the common words of --manifest, else --words.",
    )
    build.add_argument("--manifest", type=Path, default=None, help="corpus manifest (JSONL; clone and short)")
    build.add_argument("--kind", required=True, choices=("clone", "short", "words"))
    build.add_argument("--words", default=None,
                       help="word list for --kind words without --manifest (default /usr/share/dict/words)")
    build.add_argument("--out", required=True, type=Path, help="directory for meta.lst")
    build.add_argument("--split", default="test", help="targets' split ('all': every split, e.g. of voices held "
                       "out of training with --hold-out-speakers)")
    build.add_argument("--speakers", default=None, metavar="S1,S2", help="targets of these speakers only")
    build.add_argument("--per-speaker", type=int, default=None, metavar="N",
                       help="the first N targets of each speaker")
    build.add_argument("--language", default="en")
    build.add_argument("--max-short-words", type=int, default=2)
    build.add_argument("--reference-voice", default=None, metavar="VOICE",
                       help="--kind words: read every item in this corpus voice (e.g. piper-joe) as its ground "
                            "truth, so late stops and a reference WER can be measured")
    build.add_argument("--min-prompt-s", type=float, default=2.0)
    build.add_argument("--max-prompt-s", type=float, default=10.0)
    build.add_argument("--limit", type=int, default=None, help="keep the first N targets")
    build.add_argument("--seed", type=int, default=0, help="prompt choice")
    build.set_defaults(func=run_build_set)

    run = evsub.add_parser(
        "run",
        help="synthesise a test set with one model, score it and write a report (resumable)",
        description="Models: ground-truth, codec:NAME_OR_DIR (resynthesis through duet.codecs.load), mock "
        "(weightless pipeline check), or a name registered by a model family. Finished <utt>.wav files and "
        "cached scores in --out are kept, so an interrupted run resumes where it stopped.",
    )
    run.add_argument("--model", required=True, help="ground-truth | codec:NAME_OR_DIR | mock | registered name")
    run.add_argument("--set", required=True, type=Path, dest="test_set", help="meta.lst or its directory")
    run.add_argument("--out", required=True, type=Path, help="run directory")
    run.add_argument("--batch-size", type=int, default=8)
    run.add_argument("--device", default="cpu")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--steps", type=int, default=None, help="refinement steps of diffusion models (Luna: 32|16|8)")
    run.add_argument("--cfg-scale", type=float, default=None,
                     help="classifier-free guidance scale for --model speaker:NAME (1 = off; default: the model's)")
    run.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the model's)")
    run.add_argument("--top-k", type=int, default=None, help="sampling top-k, 0 = off (default: the model's)")
    run.add_argument("--limit", type=int, default=None, help="only the first N items of the set")
    run.add_argument("--metrics", default=",".join(_METRICS),
                     help=f"comma-separated subset of {','.join(_METRICS)} (default: all)")
    run.add_argument("--asr-model", type=Path, default=None,
                     help="CTranslate2 Whisper directory, or 'base' (Whisper base from the eval extra; default: "
                          "bundled Whisper tiny.en)")
    run.add_argument("--speaker-model", default="resemblyzer",
                     help="resemblyzer, or wavlm:DIR for a local WavLMForXVector checkpoint")
    run.add_argument("--late-factor", type=float, default=2.0, help="late stop: duration > this x expected")
    run.add_argument("--no-progress", action="store_true")
    run.set_defaults(func=run_run)

    compare = evsub.add_parser("compare", help="put several runs side by side in one table")
    compare.add_argument("runs", nargs="+", type=Path, help="run directories (ground truth is listed first)")
    compare.add_argument("--out", type=Path, default=None, help="also write the table to this Markdown file")
    compare.set_defaults(func=run_compare)

    ranks = evsub.add_parser("ranks", help="effective rank of the embedding tables of a checkpoint")
    ranks.add_argument("checkpoint", type=Path, help=".safetensors file or directory holding model.safetensors")
    ranks.add_argument("--pattern", default=r"embed|table|codebook", help="regex on tensor names")
    ranks.add_argument("--out", type=Path, default=None, help="JSON result file")
    ranks.set_defaults(func=run_ranks)


def _register_arena(evsub) -> None:
    arena = evsub.add_parser("arena", help="pairwise listening tests: serve the page, fit Bradley-Terry ratings")
    asub = arena.add_subparsers(dest="arena_command", metavar="ACTION")
    asub.required = True
    serve = asub.add_parser("serve", help="serve the listening page on 127.0.0.1")
    serve.add_argument("--runs", nargs="+", required=True, type=Path, help="two or more run directories")
    serve.add_argument("--judgments", required=True, type=Path, help="JSONL file the choices are appended to")
    serve.add_argument("--port", type=int, default=8765)
    serve.add_argument("--seed", type=int, default=None, help="pair order (default: random)")
    serve.set_defaults(func=run_arena_serve)
    fit = asub.add_parser("fit", help="Bradley-Terry ratings (Elo-like, mean 1500) with bootstrap intervals")
    fit.add_argument("--judgments", required=True, type=Path)
    fit.add_argument("--bootstrap", type=int, default=300)
    fit.add_argument("--seed", type=int, default=0)
    fit.add_argument("--l2", type=float, default=1e-4, help="L2 penalty on the logits (keeps a sweep finite)")
    fit.add_argument("--out", type=Path, default=None, help="JSON result file")
    fit.set_defaults(func=run_arena_fit)


_METRICS = ("wer", "sim", "dnsmos", "signal")


def run_build_set(args: argparse.Namespace) -> int:
    from duet.command import comma_list
    from duet.errors import DuetError
    from duet.eval.testset import WORD_LIST, BuildConfig, build_set, build_word_set, corpus_words

    if args.kind == "words":
        words = args.words or (corpus_words(args.manifest, args.language) if args.manifest else WORD_LIST)
        reference = None
        if args.reference_voice:
            from duet.data.presets import synth_speaker

            reference = synth_speaker(args.reference_voice)
        built = build_word_set(args.out, args.limit or 100, words, seed=args.seed, reference=reference)
        print(f"wrote {built.path}: {built.items} items")
        return 0
    if args.manifest is None:
        raise DuetError(f"--kind {args.kind} needs --manifest (the corpus to draw targets and prompts from)")
    config = BuildConfig(kind=args.kind, split=args.split, language=args.language,
                         max_short_words=args.max_short_words, min_prompt_s=args.min_prompt_s,
                         max_prompt_s=args.max_prompt_s, limit=args.limit, seed=args.seed,
                         speakers=comma_list(args.speakers),
                         per_speaker=args.per_speaker)
    built = build_set(args.manifest, args.out, config)
    print(f"wrote {built.path}: {built.items} items")
    for reason, n in sorted(built.skipped.items()):
        print(f"  left out: {n} ({reason})")
    return 0


def run_run(args: argparse.Namespace) -> int:
    from duet.command import comma_list
    from duet.eval.run import RunConfig, run_eval
    from duet.eval.scoring import ScoreConfig
    from duet.eval.synth import SynthOptions

    metrics = comma_list(args.metrics)
    config = RunConfig(
        model=args.model, test_set=args.test_set, out_dir=args.out,
        synth=SynthOptions(batch_size=args.batch_size, device=args.device, seed=args.seed,
                           steps=args.steps, cfg_scale=args.cfg_scale, temperature=args.temperature,
                           top_k=args.top_k),
        score=ScoreConfig(metrics=metrics, asr_model=str(args.asr_model) if args.asr_model else None,
                          speaker=args.speaker_model, late_factor=args.late_factor, device=args.device),
        limit=args.limit, progress=not args.no_progress)
    result = run_eval(config)
    from duet.eval.report import compare_runs

    print(compare_runs([args.out]).markdown)
    skipped = result.summary["skipped"]
    if any(skipped.values()):
        print(f"skipped: {skipped} (see {args.out / 'report.md'})")
    print(f"synthesised {result.synthesized}, scored {result.scored} in this pass; report: {args.out / 'report.md'}")
    return 0


def run_compare(args: argparse.Namespace) -> int:
    from duet.eval.report import compare_runs

    table = compare_runs(args.runs).markdown
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


def run_ranks(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from duet.eval.ranks import embedding_ranks, format_ranks, load_state_dict

    ranks = embedding_ranks(load_state_dict(args.checkpoint), args.pattern)
    if not ranks:
        print(f"no 2-D tensor matches {args.pattern!r}")
        return 1
    print(format_ranks(ranks))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps([asdict(r) | {"ceiling": r.ceiling} for r in ranks], indent=2) + "\n")
    return 0


def run_arena_serve(args: argparse.Namespace) -> int:
    from duet.errors import MissingDependency

    try:
        import uvicorn
    except ImportError as err:
        raise MissingDependency("uvicorn", "pip install fastapi uvicorn") from err
    from duet.eval.arena import Arena, create_app, load_systems

    systems, texts = load_systems(args.runs)
    arena = Arena(systems, texts, args.judgments, seed=args.seed)
    print(f"arena: {len(systems)} systems, {len(arena.utterances)} utterances; http://127.0.0.1:{args.port}/ "
          f"(judgments -> {args.judgments})")
    uvicorn.run(create_app(arena), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


def run_arena_fit(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from duet.eval.bradley_terry import fit_arena, format_arena, judgments_from_records, read_judgments

    records, problems = read_judgments(args.judgments)
    for p in problems:
        print(p.describe(str(args.judgments)))
    result = fit_arena(judgments_from_records(records), bootstrap=args.bootstrap, seed=args.seed, l2=args.l2)
    print(format_arena(result))
    if problems:
        print(f"skipped {len(problems)} malformed line(s)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**asdict(result), "skipped_lines": len(problems)}, indent=2) + "\n")
    return 0
