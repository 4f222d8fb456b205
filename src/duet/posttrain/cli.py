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
"""

from __future__ import annotations

import argparse
from functools import partial


def register(subparsers: argparse._SubParsersAction) -> None:
    """``duet train`` (``duet.train.cli.register``) with the post-training stages added to its stages."""
    from duet.posttrain.gepard import add_train_gepard_post_parser, export_gepard_run
    from duet.posttrain.luna import add_train_luna_grpo_parser
    from duet.train import cli as train_cli
    from duet.train.recipe import run_export
    from duet.train.recipes.gepard import export_sampling

    stages = train_cli.register(subparsers)
    add_train_gepard_post_parser(stages)
    add_train_luna_grpo_parser(stages)
    stages.choices["gepard-export"].set_defaults(func=partial(run_export, export_gepard_run, export_sampling))
