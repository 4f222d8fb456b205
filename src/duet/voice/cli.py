"""``duet voice train DATA --out VOICE`` and ``duet voice check DATA``: flags -> ``duet.voice.recipe``.

Building this parser imports nothing heavy (``tests/test_cli_imports.py``): the recipe, torch and the codecs load
when a command runs.
"""

from __future__ import annotations

import argparse
import os

from duet.voice.sources import DATA_HELP

TRAIN_HELP = ("make your own voice from DATA: checks, preparation, forced alignment, fine-tuning of gepard-clone-tiny "
              "and of the codec's decoder within a time budget, held-out scores, and a voice that duet speak --model "
              "VOICE and duet serve load")
EPILOG = ("DATA: " + DATA_HELP + ". Clips that cannot be used (unreadable, missing or empty transcript, too short or "
          "long, clipped, mostly silence, text espeak-ng cannot speak, a poor forced alignment) are listed with their "
          "reason in VOICE/checks.tsv; the rest goes on.")


def register(subparsers: argparse._SubParsersAction) -> None:
    voice = subparsers.add_parser("voice", help="your own voice from recordings with transcripts (train, check)")
    sub = voice.add_subparsers(dest="voice_command", metavar="SUBCOMMAND")
    sub.required = True

    train = sub.add_parser("train", help=TRAIN_HELP, description=TRAIN_HELP, epilog=EPILOG)
    train.add_argument("data", metavar="DATA", help="the folder of recordings with transcripts (see below)")
    train.add_argument("--out", required=True, metavar="VOICE", help="the voice's directory (its build/ holds the work)")
    _data_flags(train)
    train.add_argument("--minutes", type=float, default=None,
                       help="wall-clock budget of the whole command, data preparation and scoring included (default "
                            "60); training gets what the other stages leave")
    train.add_argument("--resume", action="store_true",
                       help="continue the run in VOICE where it stopped (the settings it began with are kept)")
    train.add_argument("--steps", type=int, default=None,
                       help="train exactly this many steps instead of as many as the budget holds")
    train.add_argument("--base", default=None, metavar="MODEL",
                       help="the model to fine-tune (default gepard-clone-tiny): aligned text input, phoneme input")
    train.add_argument("--asr-model", default=None, metavar="DIR",
                       help="a CTranslate2 Whisper directory for the held-out WER (default: the bundled tiny.en; "
                            "another language needs a multilingual model, else it is scored on similarity alone)")
    train.add_argument("--no-eval", action="store_true", default=None, help="skip the held-out scores at the end")
    train.add_argument("--threads", type=int, default=None, help="torch threads (default: all cores)")
    train.add_argument("--quiet", action="store_true", help="no progress bars")
    train.set_defaults(func=_train)

    check = sub.add_parser("check", help="run duet voice train's checks on DATA without training",
                           description="Run the checks of duet voice train on DATA (reading, audio, text, forced "
                                       "alignment) and write the report of the clips that cannot be used.",
                           epilog="DATA: " + DATA_HELP + ".")
    check.add_argument("data", metavar="DATA", help="the folder of recordings with transcripts (see below)")
    check.add_argument("--report", default="voice-check.tsv",
                       help="where to write the clips left out and why (default ./voice-check.tsv; never in DATA)")
    _data_flags(check)
    check.add_argument("--quiet", action="store_true", help="no progress bars")
    check.set_defaults(func=_check)


def _data_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--language", default=None,
                   help="what the recordings speak, as espeak-ng names it: en (default), es, es-419, fr, de, ...")
    p.add_argument("--min-minutes", type=float, default=None,
                   help="usable recordings needed, in minutes (default 20)")
    p.add_argument("--hold-out", type=float, default=None, metavar="SHARE",
                   help="share of the clips held out for the final scores (default 0.1)")


def _given(args: argparse.Namespace) -> dict:
    """The settings given on the command line, by config field (``duet.voice.recipe.VoiceTrainConfig`` and its
    ``data``): a resumed run checks them against its own."""
    pairs = (("language", args.language), ("min_minutes", args.min_minutes), ("test_fraction", args.hold_out),
             ("minutes", getattr(args, "minutes", None)), ("steps", getattr(args, "steps", None)),
             ("base_model", getattr(args, "base", None)), ("asr_model", getattr(args, "asr_model", None)),
             ("evaluate", False if getattr(args, "no_eval", None) else None))
    return {k: v for k, v in pairs if v is not None}


def _train(args: argparse.Namespace) -> int:
    from duet.voice.recipe import config_from, train_voice

    given = _given(args)
    result = train_voice(args.data, args.out, config_from(given), resume=args.resume, given=given,
                         threads=args.threads or os.cpu_count(), progress=not args.quiet)
    scores = result.facts.get("scores")
    if scores:
        wer, sim = scores["wer"], scores["sim"]
        print(f"{result.out}: held-out WER {_pct(wer['voice'])} (recordings {_pct(wer['recordings'])}), similarity "
              f"{_num(sim['voice'])} (recordings to each other {_num(sim['recordings'])}, "
              f"{result.facts['training']['base']} {_num(sim['base'])})")
    else:
        print(f"{result.out}: done")
    return 0


def _check(args: argparse.Namespace) -> int:
    from duet.voice.recipe import check_voice_data, config_from

    summary = check_voice_data(args.data, config_from(_given(args)).data, args.report, progress=not args.quiet)
    print(summary)
    return 0


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
