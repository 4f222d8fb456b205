"""``duet train ...`` with the post-training stages: ``duet.train.cli``'s stages, then these.

    duet train gepard-sft --init-from checkpoints/gepard-tiny --shards codes/fsq --out runs/gepard-sft    (gepard.py)
    duet train gepard-dpo --init-from runs/gepard-sft/export --manifest M --out runs/gepard-dpo            (gepard.py)
    duet train gepard-export RUN_DIR --out checkpoints/gepard-dpo     # any Gepard run: see below
    duet train luna-grpo --init-from checkpoints/luna-tiny --manifest corpus/manifest.jsonl --out runs/luna-grpo
                                                                                                         (luna.py)
    duet train luna-grpo-export RUN_DIR --out checkpoints/luna-tiny-grpo

``gepard-export`` stays one command for every Gepard run. ``duet.train`` cannot import these stages (they sit above
``duet.eval``), so its pretraining recipe's ``gepard-export`` exports pretraining runs only; here its handler is
replaced by one over ``duet.posttrain.gepard.export_gepard_run``, which sends a gepard-sft or gepard-dpo run to the
post-training export and any other run to the pretraining one, with the same flags.

The flags are ``duet.posttrain.flags``: building the parser imports no stage, nor torch.
"""

from __future__ import annotations

import argparse

from duet.posttrain.flags import add_gepard_post_stages, add_luna_grpo_stages
from duet.train import cli as train_cli


def register(subparsers: argparse._SubParsersAction) -> None:
    """``duet train`` (``duet.train.cli.register``) with the post-training stages added to its stages."""
    stages = train_cli.register(subparsers)
    add_gepard_post_stages(stages, _sft, _dpo)
    add_luna_grpo_stages(stages, _grpo, _export_grpo)
    stages.choices["gepard-export"].set_defaults(func=_export_gepard)


# Each action imports its stage (torch, transformers, the eval metrics) only when it runs.


def _sft(args: argparse.Namespace) -> int:
    from duet.posttrain.gepard import sft_stage

    return sft_stage(args)


def _dpo(args: argparse.Namespace) -> int:
    from duet.posttrain.gepard import dpo_stage

    return dpo_stage(args)


def _export_gepard(args: argparse.Namespace) -> int:
    from duet.posttrain.gepard import export_stage

    return export_stage(args)


def _grpo(args: argparse.Namespace) -> int:
    from duet.posttrain.luna import train_stage

    return train_stage(args)


def _export_grpo(args: argparse.Namespace) -> int:
    from duet.posttrain.luna import export_stage

    return export_stage(args)
