"""``duet train ...``: the training command group; each family adds a stage and its export.

    duet train codec --config fsq|rvq|PATH.json [--manifest data/base/manifest.jsonl] [--out runs/NAME] [--resume]
                     [--init-from checkpoints/duet-fsq]
    duet train codec-export RUN_DIR --out checkpoints/duet-fsq     # training checkpoint -> shipped fp16 codec
    duet train gepard --preset gepard-tiny --shards codes/fsq --out runs/gepard-tiny      (recipes/gepard.py)
    duet train gepard-export RUN_DIR --out checkpoints/gepard-tiny
    duet train luna --preset luna-tiny --shards codes/rvq --out runs/luna-tiny              (recipes/luna.py)
    duet train luna-export RUN_DIR --out checkpoints/luna-tiny
    duet train luna-realtime --init-from checkpoints/luna-tiny --shards codes/rvq --out runs/luna-realtime-tiny
                                                                                   (recipes/luna_realtime.py)
    duet train luna-realtime-export RUN_DIR --out checkpoints/luna-realtime-tiny
    duet train gepard-sft --init-from checkpoints/gepard-tiny --shards codes/fsq --out runs/gepard-sft
                                                                                      (recipes/gepard_post.py)
    duet train gepard-dpo --init-from runs/gepard-sft/export --manifest M --out runs/gepard-dpo
    duet train gepard-export RUN_DIR --out checkpoints/gepard-dpo     # a Gepard run of any stage
                                                                                    (recipes/gepard_export.py)
    duet train luna-grpo --init-from checkpoints/luna-tiny --manifest corpus/manifest.jsonl --out runs/luna-grpo
    duet train luna-grpo-export RUN_DIR --out checkpoints/luna-tiny-grpo                (recipes/luna_grpo.py)

The recipes' flags are ``duet.train.flags``: building the parser imports no recipe, nor torch.
"""

from __future__ import annotations

import argparse
import sys

from duet.train.flags import (
    add_gepard_export,
    add_gepard_post_stages,
    add_gepard_stages,
    add_luna_grpo_stages,
    add_luna_stages,
    add_realtime_stages,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``train`` with every stage."""
    train = subparsers.add_parser("train", help="train models (codec, gepard, luna, luna-realtime, luna-grpo)")
    sub = train.add_subparsers(dest="train_command", metavar="STAGE")
    sub.required = True

    codec = sub.add_parser("codec", help="train duet-fsq or duet-rvq")
    codec.add_argument("--config", default=None,
                       help="preset (fsq, rvq, rvq-semantic, fsq-decoder, fsq-causal-decoder, rvq-decoder, fsq-tiny, "
                            "rvq-tiny) or a JSON file; "
                            "optional with --resume")
    codec.add_argument("--manifest", default="data/base/manifest.jsonl", help="corpus manifest (train/val splits)")
    codec.add_argument("--out", default=None, help="run directory (default runs/duet-fsq or runs/duet-rvq)")
    codec.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    codec.add_argument("--max-steps", type=int, default=None, help="override the schedule length (cosine end)")
    codec.add_argument("--disc-start", type=int, default=None,
                       help="step at which discriminators join (a negative value: never)")
    codec.add_argument("--stop-at", type=int, default=None, help="stop at this step (schedule unchanged)")
    codec.add_argument("--minutes", type=float, default=None, help="stop after this many minutes (checkpointed)")
    codec.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a small, shared CPU)")
    codec.add_argument("--init-from", default=None,
                       help="warm-start a new run from a shipped codec (name or directory; fresh optimizer)")
    codec.add_argument("--teacher", default=None, help="semantic distillation of the first codebook (RVQ): whisper (the "
                       "bundled Whisper tiny.en encoder), whisper:DIR, or a local WavLM directory")
    codec.set_defaults(func=_train_codec)

    export = sub.add_parser("codec-export", aliases=["export"],
                            help="write a codec run's checkpoint as a shipped codec (fp16 safetensors)")
    export.add_argument("run_dir")
    export.add_argument("--out", required=True, help="e.g. checkpoints/duet-fsq")
    export.add_argument("--checkpoint", default=None, help="a specific checkpoint directory (default: latest)")
    export.set_defaults(func=_export)

    add_gepard_stages(sub, _train_gepard)
    add_gepard_export(sub, _export_gepard)
    add_luna_stages(sub, _train_luna, _export_luna)
    add_realtime_stages(sub, _train_realtime, _export_realtime)
    add_gepard_post_stages(sub, _sft, _dpo)
    add_luna_grpo_stages(sub, _grpo, _export_grpo)


# Each action imports its recipe (torch, transformers) only when its stage runs.


def _train_gepard(args: argparse.Namespace) -> int:
    from duet.train.recipes.gepard import train_stage

    return train_stage(args)


def _export_gepard(args: argparse.Namespace) -> int:
    from duet.train.recipes.gepard_export import export_stage

    return export_stage(args)


def _train_luna(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna import train_stage

    return train_stage(args)


def _export_luna(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna import export_stage

    return export_stage(args)


def _train_realtime(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna_realtime import train_stage

    return train_stage(args)


def _export_realtime(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna_realtime import export_stage

    return export_stage(args)


def _sft(args: argparse.Namespace) -> int:
    from duet.train.recipes.gepard_post import sft_stage

    return sft_stage(args)


def _dpo(args: argparse.Namespace) -> int:
    from duet.train.recipes.gepard_post import dpo_stage

    return dpo_stage(args)


def _grpo(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna_grpo import train_stage

    return train_stage(args)


def _export_grpo(args: argparse.Namespace) -> int:
    from duet.train.recipes.luna_grpo import export_stage

    return export_stage(args)


def _train_codec(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from duet.errors import DuetError
    from duet.train.codec_config import CodecTrainConfig, load_config
    from duet.train.codec_loop import train_codec
    from duet.train.runner import read_run_config

    cfg = load_config(args.config) if args.config else None
    out = args.out
    if out is None:
        if cfg is None:
            raise DuetError("--resume without --config needs --out RUN_DIR")
        out = f"runs/{cfg.kind}"
    if cfg is None and args.resume:
        cfg = read_run_config(out, CodecTrainConfig)
    if cfg is None:
        raise DuetError("give --config (fsq, rvq or a JSON file)")
    if args.max_steps is not None:
        cfg = replace(cfg, max_steps=args.max_steps)
    if args.disc_start is not None:
        cfg = replace(cfg, disc_start_step=args.disc_start if args.disc_start >= 0 else None)
    if args.teacher is not None:
        cfg = replace(cfg, semantic_teacher=args.teacher)
    result = train_codec(cfg, args.manifest, out, resume=args.resume, stop_at_step=args.stop_at,
                         max_minutes=args.minutes, threads=args.threads, init_from=args.init_from)
    print(f"{result.run_dir}: step {result.step}, " + ", ".join(f"{k} {v:.4f}" for k, v in result.last.items()))
    return 0


def _export(args: argparse.Namespace) -> int:
    from duet.train.codec_loop import export_codec

    path = export_codec(args.run_dir, args.out, args.checkpoint)
    print(f"exported {args.run_dir} -> {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="duet")
    register(parser.add_subparsers(dest="command"))
    from duet.command import run

    return run(parser, argv)


if __name__ == "__main__":
    sys.exit(main())
