"""The flags of the ``duet train`` recipe stages, free of torch: building the parser (``duet --help``, ``duet train
gepard --help``) must not import the recipes, which import torch and transformers.

Each ``add_*`` adds a family's stages (pretraining, export, post-training: ``duet.train.recipes``) and binds them to
the actions it is given: ``duet.train.cli`` passes actions that import the recipe when the stage runs; a recipe's own
``main`` (``python -m duet.train.recipes.NAME``, what torchrun launches) passes its functions directly. The shared
pieces:

- :func:`add_train_parser` / :func:`add_recipe_arguments`: ``duet train FAMILY`` with the flags every recipe takes
  (parsed into a recipe config by ``duet.train.recipe.config_from_args`` when the stage runs);
- :func:`add_export_parser`: ``duet train FAMILY-export RUN --out DIR``;
- :func:`run_train` / :func:`run_export`: what those actions do once the recipe is imported;
- :func:`stage_main`: a recipe's stages alone as a command.

Preset names are spelled out here because the registries behind them (``duet.gepard.config.PRESETS``,
``duet.luna.config.PRESETS``, ``duet.luna.realtime.PRESETS``, ``duet.luna.diffusion.OBJECTIVES``) import torch;
``tests/test_cli_imports.py`` keeps the two equal.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from duet.text import QWEN3

if TYPE_CHECKING:
    from duet.train.runner import LoopResult

Action = Callable[[argparse.Namespace], int]  # what ``args.func`` runs

TRAIN_BPE = "train-bpe"
TRAIN_PHONEME_BPE = "train-phoneme-bpe"  # the same BPE over espeak-ng's IPA of the texts (duet.text.phonemes)

GEPARD_PRESETS = ("gepard-500m", "gepard-tiny")
LUNA_PRESETS = ("luna-0.6b", "luna-tiny", "luna-tiny-fsq", "luna-tiny-rvq4")
REALTIME_PRESETS = ("luna-realtime-0.6b", "luna-realtime-tiny")
REALTIME_DEFAULT_PRESET = "luna-realtime-tiny"
LUNA_OBJECTIVES = ("elbo", "maskgit")
LUNA_GRPO = "luna-grpo"


# ---- shared --------------------------------------------------------------------------------------------------------


def add_train_parser(subparsers: Any, name: str, help: str, presets: tuple[str, ...], out_example: str,
                     action: Action, *, tokenizer: bool = True, preset_help: str | None = None,
                     init_from_help: str | None = None) -> argparse.ArgumentParser:
    """``duet train NAME`` with the flags every recipe takes, run by ``action``. Returns the sub-parser, for the
    family's own flags. ``tokenizer=False`` leaves out ``--tokenizer`` / ``--bpe-vocab`` for a stage whose
    tokenizer comes with ``--init-from``."""
    p = subparsers.add_parser(name, help=help)
    add_recipe_arguments(p, presets, out_example, tokenizer=tokenizer, preset_help=preset_help,
                         init_from_help=init_from_help)
    p.set_defaults(func=action)
    return p


def add_recipe_arguments(p: argparse.ArgumentParser, presets: tuple[str, ...], out_example: str, *,
                         tokenizer: bool = True, preset_help: str | None = None,
                         init_from_help: str | None = None) -> None:
    """The flags every ``duet train FAMILY`` stage takes (a family adds its own after these)."""
    p.add_argument("--preset", choices=sorted(presets), default=None,
                   help=preset_help or "model + recipe (omit with --resume)")
    p.add_argument("--shards", default=None, help="encoded codes directory (duet data encode --out)")
    p.add_argument("--manifest", default=None, help="manifest.jsonl (default: the one the shards name)")
    if tokenizer:
        p.add_argument("--tokenizer", default=None,
                       help=f"{TRAIN_BPE} (default), {TRAIN_PHONEME_BPE} (phoneme input: espeak-ng IPA), {QWEN3}, "
                            "or a tokenizer.json; copied into the run directory")
        p.add_argument("--bpe-vocab", type=int, default=None,
                       help="BPE bytes + merges for train-bpe and train-phoneme-bpe (default 2048)")
    p.add_argument("--out", required=True, help=f"run directory, e.g. {out_example}")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    p.add_argument("--init-from", default=None, help=init_from_help or
                   "warm-start a new run from a shipped model (name or directory): weights and tokenizer")
    p.add_argument("--steps", type=int, default=None, help="schedule length in optimizer steps (cosine end)")
    p.add_argument("--stop-at", type=int, default=None, help="stop this invocation at this step")
    p.add_argument("--minutes", type=float, default=None, help="stop this invocation after so many minutes")
    p.add_argument("--batch-frames", type=int, default=None, help="padded text + audio positions per batch")
    p.add_argument("--max-batch", type=int, default=None, help="rows per batch at most")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (base group)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps")
    p.add_argument("--accum", type=int, default=None, help="gradient accumulation steps")
    p.add_argument("--bf16", action="store_true", default=None, help="bfloat16 autocast")
    p.add_argument("--val-every", type=int, default=None, help="steps between validations (0: none)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints")
    p.add_argument("--patience", type=int, default=None, help="early stop after N validations without gain (0: off)")
    p.add_argument("--languages", default=None, help="comma-separated manifest languages to keep, e.g. en")
    p.add_argument("--hold-out-speakers", default=None, metavar="S1,S2",
                   help="comma-separated manifest speakers to leave out of training and validation (voices kept "
                        "unseen, e.g. to measure cloning on them)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_export_parser(subparsers: Any, name: str, help: str, out_example: str,
                      action: Action) -> argparse.ArgumentParser:
    """``duet train NAME RUN --out DIR [--checkpoint C] [--latest]``, run by ``action`` (:func:`run_export`); returns
    the sub-parser, for the family's own export flags."""
    e = subparsers.add_parser(name, help=help)
    e.add_argument("run_dir")
    e.add_argument("--out", required=True, help=f"e.g. {out_example}")
    e.add_argument("--checkpoint", default=None, help="a specific checkpoint directory")
    e.add_argument("--latest", action="store_true", help="the latest checkpoint instead of the best by val loss")
    e.set_defaults(func=action)
    return e


def summary_line(result: LoopResult) -> str:
    """One line for the end of ``duet train FAMILY``."""
    last = ", ".join(f"{k} {v:.4f}" for k, v in result.last.items())
    best = f", best val loss {result.best_val:.4f}" if result.best_val is not None else ""
    return (f"{result.run_dir}: step {result.step} ({result.stopped}), {last}{best}, "
            f"{result.skipped_steps} skipped steps")


def run_train(train_fn: Callable[..., LoopResult], config_fn: Callable[[argparse.Namespace], Any], tokenizer: bool,
              args: argparse.Namespace) -> int:
    """``duet train FAMILY``'s action: ``train_fn(config_fn(args), --out, ...)`` with the shared flags (and
    ``--tokenizer`` where the stage has it), then one summary line (rank 0 only under torchrun)."""
    cfg = config_fn(args)
    options = {"tokenizer": args.tokenizer} if tokenizer else {}
    result = train_fn(cfg, args.out, resume=args.resume, stop_at_step=args.stop_at, max_minutes=args.minutes,
                      threads=args.threads, progress=not args.quiet, init_from=args.init_from, **options)
    if int(os.environ.get("RANK", "0")) == 0:
        print(summary_line(result))
    return 0


def run_export(export_fn: Callable[..., Path], options: Callable[[argparse.Namespace], dict[str, Any]] | None,
               args: argparse.Namespace) -> int:
    """``duet train FAMILY-export RUN --out DIR [--checkpoint C] [--latest]``'s action: ``export_fn(run_dir,
    out_dir, checkpoint, best=)`` with the keywords ``options(args)`` adds (a family's own export flags)."""
    more = options(args) if options else {}
    path = export_fn(args.run_dir, args.out, args.checkpoint, best=not args.latest, **more)
    print(f"exported {args.run_dir} -> {path}")
    return 0


def stage_main(add_parsers: Callable[[Any], None], argv: list[str] | None = None) -> int:
    """``python -m duet.FAMILY.train ...`` (what torchrun launches): the family's ``duet train`` stages alone."""
    parser = argparse.ArgumentParser(prog="duet train")
    sub = parser.add_subparsers(dest="train_command", metavar="STAGE")
    sub.required = True
    add_parsers(sub)
    from duet.command import run

    return run(parser, argv)


# ---- the families --------------------------------------------------------------------------------------------------


def add_gepard_stages(subparsers: Any, train: Action) -> None:
    """``gepard`` (``duet.train.recipes.gepard``)."""
    p = add_train_parser(subparsers, "gepard", "pretrain a Gepard model on encoded codes (DDP under torchrun)",
                         GEPARD_PRESETS, "runs/gepard-tiny", train)
    p.add_argument("--no-augment", action="store_true", default=None, help="no short-register text repetition")
    p.add_argument("--guided-attention", type=float, default=None, metavar="WEIGHT",
                   help="weight of the guided-attention loss on a few heads (duet.gepard.alignment; 0 = off)")
    p.add_argument("--guided-target", choices=("diagonal", "aligned"), default=None,
                   help="what the guided heads are drawn to: the diagonal (default) or each frame's own text token "
                        "from the corpus timing (attention supervision; needs timing files and a phoneme tokenizer)")
    p.add_argument("--text-dropout", type=float, default=None, metavar="P",
                   help="drop a row's text with probability P, training the unconditional path that CFG "
                        "(--cfg-scale at inference) needs (default: the preset's, 0)")
    p.add_argument("--aligned", type=int, default=None, metavar="WINDOW",
                   help="aligned text input with WINDOW tokens either side and a duration predictor "
                        "(duet.gepard.aligned; reads the corpus's timing files; a divergence from the report)")
    p.add_argument("--voice-prefix", action="store_true", default=None,
                   help="add the voice-cloning compressor (Gepard §2.6: a Q-Former turns a reference clip of the "
                        "same speaker into K = 8 prefix vectors; duet.gepard.voice); needs a multi-speaker corpus")
    p.add_argument("--voice-lr-multiplier", type=float, default=None, metavar="X",
                   help="the compressor's and null prefix's learning rate as a multiple of --lr (default 0.1, the "
                        "report's; a compressor added to a trained model may need 1)")
    p.add_argument("--supcon-weight", type=float, default=None, metavar="W",
                   help="L_supcon's weight with --voice-prefix (default 1, the report's; 0 trains the compressor by "
                        "the decoder's loss and L_div alone)")
    p.add_argument("--max-reference-frames", type=int, default=None, metavar="N",
                   help="longest reference window in training with --voice-prefix (default: the compressor's, 1024)")


def add_gepard_export(subparsers: Any, export: Action) -> None:
    """``gepard-export`` (``duet.train.recipes.gepard_export``), for a Gepard run of any stage."""
    e = add_export_parser(subparsers, "gepard-export", "write a Gepard run as a shipped model (fp16 safetensors)",
                          "checkpoints/gepard-tiny", export)
    e.add_argument("--temperature", type=float, default=None,
                   help="the sampling temperature duet speak and duet serve use for this model by default (0: greedy)")
    e.add_argument("--top-k", type=int, default=None, help="their default top-k for this model (0: off)")


def add_luna_stages(subparsers: Any, train: Action, export: Action) -> None:
    """``luna`` (``duet.train.recipes.luna``) and ``luna-export``."""
    p = add_train_parser(subparsers, "luna", "train a Luna-TTS model and its duration predictor on encoded codes "
                         "(RVQ, or duet-fsq for the FSQ grid)", LUNA_PRESETS, "runs/luna-tiny", train)
    p.add_argument("--codebook-weights", type=_weights, default=None, metavar="W0,W1,...",
                   help="per-codebook loss weights, one per codebook, normalised to mean 1 (duet.luna.diffusion; "
                        "default: the preset's)")
    p.add_argument("--objective", choices=LUNA_OBJECTIVES, default=None,
                   help="elbo: the report's masked-diffusion bound (uniform noise level, 1/t weight); maskgit: a "
                        "cosine mask ratio and the mean CE of the masked cells (default: the preset's)")
    p.add_argument("--tie-heads", action=argparse.BooleanOptionalAction, default=None,
                   help="tie each code head to its codebook's embedding table (a new run only; default: the preset's)")
    p.add_argument("--aligned", type=int, default=None, metavar="WINDOW",
                   help="aligned text input with WINDOW tokens either side, laid out by the corpus's timing files "
                        "in training and by the duration predictor at inference (duet.nn.aligned; needs a phoneme "
                        "tokenizer; a divergence from the report; a new run only)")
    p.add_argument("--alignments", default=None,
                   help="duration targets from `duet data align` (made with the run's tokenizer; default: the "
                        "character spread)")
    p.add_argument("--duration-only", action="store_true", default=None,
                   help="train the duration predictor alone (with --init-from: retrain a shipped model's predictor)")

    add_decode_flags(add_export_parser(subparsers, "luna-export", "write a Luna run as a shipped model (fp16 "
                                       "safetensors)", "checkpoints/luna-tiny", export))


def add_realtime_stages(subparsers: Any, train: Action, export: Action) -> None:
    """``luna-realtime`` (``duet.train.recipes.luna_realtime``) and ``luna-realtime-export``."""
    p = add_train_parser(subparsers, "luna-realtime", "continue a shipped Luna as Luna-TTS Realtime (block "
                         "diffusion)", REALTIME_PRESETS, "runs/luna-realtime-tiny", train, tokenizer=False,
                         preset_help=f"training settings and block size (default {REALTIME_DEFAULT_PRESET}; the "
                                     "model's shape is --init-from's; omit with --resume)",
                         init_from_help="the shipped Luna to continue (name or directory): weights, tokenizer, "
                                        "duration predictor; required for a new run")
    p.add_argument("--block-size", type=int, default=None, help="frames per block (default 32 = 1.28 s)")
    p.add_argument("--end-weight", type=float, default=None, help="weight of the end-of-speech BCE (default 1)")

    add_decode_flags(add_export_parser(subparsers, "luna-realtime-export", "write a Luna Realtime run as a shipped "
                                       "model (fp16)", "checkpoints/luna-realtime-tiny", export))


# ---- post-training -------------------------------------------------------------------------------------------------


def add_gepard_post_stages(subparsers: Any, sft: Action, dpo: Action) -> None:
    """``gepard-sft`` and ``gepard-dpo`` (their export is ``gepard-export``)."""
    start = "the shipped Gepard (name or directory) the stage starts from: weights and tokenizer"
    s = add_train_parser(subparsers, "gepard-sft", "fine-tune a Gepard on selected data at a lower LR", GEPARD_PRESETS,
                         "runs/gepard-sft", sft, tokenizer=False, init_from_help=start,
                         preset_help="whose pretraining recipe the defaults scale (default: the model's own)")
    s.add_argument("--select", default=None, metavar="IDS", help="a file of utterance ids to train on, one per line")
    s.add_argument("--speakers", default=None, help="comma-separated speakers to train on")

    p = subparsers.add_parser("gepard-dpo", help="distil two-pass CFG into a single-pass Gepard: CFG / no-CFG "
                                                 "pairs, Whisper scoring, DPO with LoRA (export: gepard-export)")
    p.add_argument("--init-from", default=None, help=start + " (omit with --resume)")
    p.add_argument("--out", required=True, help="run directory, e.g. runs/gepard-dpo")
    p.add_argument("--resume", action="store_true", help="continue the pairs, then the training")
    p.add_argument("--manifest", default=None, help="prompts: texts of this corpus manifest's --split")
    p.add_argument("--split", default="train")
    p.add_argument("--languages", default=None, help="comma-separated manifest languages to keep, e.g. en")
    p.add_argument("--hold-out-speakers", default=None, metavar="S1,S2",
                   help="manifest speakers never used as prompts (voices kept unseen for evaluation)")
    p.add_argument("--texts", default=None, help="prompts: a text file, one per line (instead of --manifest)")
    p.add_argument("--prompts", type=int, default=None, help="prompts at most (default 256)")
    p.add_argument("--clone", action="store_true", help="each manifest prompt clones another recording of its "
                                                        "speaker (a model with the voice compressor); scored by SIM too")
    p.add_argument("--cfg-scale", type=float, default=None, help="guidance of the chosen side (default 2)")
    p.add_argument("--temperature", type=float, default=None, help="sampling of both sides (default: the model's)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--asr-model", default=None, help="CTranslate2 Whisper directory (default: bundled tiny.en)")
    p.add_argument("--rank", type=int, default=None, help="LoRA rank (default 16; alpha = 2 x rank)")
    p.add_argument("--beta", type=float, default=None, help="DPO beta (default 0.1)")
    p.add_argument("--max-wer-loss", type=float, default=None, metavar="X",
                   help="leave out pairs whose guided side's WER is more than X above the other's (default 1: none; "
                        "0 when cloning: no pair that trades words for voice)")
    p.add_argument("--val-pairs", type=int, default=None, help="pairs held out for validation (default 0)")
    p.add_argument("--val-every", type=int, default=None, help="steps between validations (default: 50 with "
                                                               "--val-pairs)")
    p.add_argument("--steps", type=int, default=None, help="schedule length in optimizer steps (default 500)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate of the adapters (default 5e-5)")
    p.add_argument("--stop-at", type=int, default=None, help="stop this invocation at this step")
    p.add_argument("--minutes", type=float, default=None, help="stop this invocation after so many minutes")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=dpo)


def add_luna_grpo_stages(subparsers: Any, train: Action, export: Action) -> None:
    """``luna-grpo`` and ``luna-grpo-export``."""
    p = subparsers.add_parser(LUNA_GRPO, help="GRPO post-training of a Luna model over its denoising trajectories")
    p.add_argument("--init-from", default=None, help="the shipped Luna model to post-train (name or directory)")
    p.add_argument("--manifest", default=None, help="manifest.jsonl whose texts are the prompts")
    p.add_argument("--out", required=True, help="run directory, e.g. runs/luna-grpo")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    p.add_argument("--codec", default=None, help="codec for the reward's audio (default: the one the model names)")
    p.add_argument("--split", default=None, help="manifest split of the training prompts (default train)")
    p.add_argument("--val-split", default=None, help="held-out prompts (default val; '' for none)")
    p.add_argument("--val-items", type=int, default=None, help="held-out prompts to validate on (default 8)")
    p.add_argument("--max-prompts", type=int, default=None, help="use the first N training prompts (0: all)")
    p.add_argument("--languages", default=None, help="comma-separated manifest languages to keep (default en)")
    p.add_argument("--no-sim", action="store_true", default=None, help="WER alone: no speaker-similarity tie-break")
    p.add_argument("--group-size", type=int, default=None, help="G candidates per prompt (>= 2; default 4)")
    p.add_argument("--prompts-per-step", type=int, default=None, help="prompt groups per optimizer step (default 2)")
    p.add_argument("--ppo-epochs", type=int, default=None, help="updates per rollout (default 1)")
    p.add_argument("--clip-eps", type=float, default=None, help="PPO clip epsilon (default 0.2)")
    p.add_argument("--kl-coef", type=float, default=None,
                   help="weight of a KL penalty to the --init-from model (default 0: none, as in the report)")
    p.add_argument("--wer-tie", type=float, default=None, help="WERs this close tie and SIM decides (default 0)")
    p.add_argument("--max-frames", type=int, default=None, help="longest grid a rollout decodes (default 400)")
    p.add_argument("--decode-steps", type=int, default=None, help="MaskGIT steps S of the rollouts (default 16)")
    p.add_argument("--temperature", type=float, default=None, help="rollout sampling temperature (> 0; default 1)")
    p.add_argument("--top-k", type=int, default=None, help="rollout top-k (0: off, the default)")
    p.add_argument("--cfg-scale", type=float, default=None, help="rollout CFG scale (1: none; default 2)")
    p.add_argument("--asr-model", default=None, help="CTranslate2 Whisper directory (default: bundled tiny.en)")
    p.add_argument("--speaker", default=None, help="speaker model: resemblyzer (default) or wavlm:DIR")
    p.add_argument("--steps", type=int, default=None, help="schedule length in optimizer steps (default 200)")
    p.add_argument("--stop-at", type=int, default=None, help="stop this invocation at this step")
    p.add_argument("--minutes", type=float, default=None, help="stop this invocation after so many minutes")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default 1e-5)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up steps (default 10)")
    p.add_argument("--val-every", type=int, default=None, help="steps between validations (0: none; default 25)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between checkpoints (default 25)")
    p.add_argument("--device", default=None, help="auto (default), cpu or cuda")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=train)

    add_export_parser(subparsers, f"{LUNA_GRPO}-export", "write a Luna GRPO run as a shipped Luna model (fp16 "
                      "safetensors)", "checkpoints/luna-tiny-grpo", export)


def add_decode_flags(export: argparse.ArgumentParser) -> None:
    """The decoding defaults a Luna export carries (``luna-export``, ``luna-realtime-export``)."""
    export.add_argument("--steps", type=int, default=None, help="the refinement steps duet speak and duet serve use "
                        "for this model by default (Realtime: per block)")
    export.add_argument("--temperature", type=float, default=None, help="their default token temperature (0: greedy)")
    export.add_argument("--cfg-scale", type=float, default=None, help="their default CFG scale (1: off)")


def _weights(text: str) -> tuple[float, ...]:
    try:
        weights = tuple(float(w) for w in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if min(weights) < 0 or sum(weights) <= 0:
        raise argparse.ArgumentTypeError(f"weights must be >= 0 with a positive sum, got {text!r}")
    return weights
