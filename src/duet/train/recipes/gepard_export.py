"""``duet train gepard-export``: a Gepard run of any stage -> a shipped Gepard (``duet.gepard.checkpoint``: fp16
weights, config, tokenizer).

    duet train gepard-export runs/gepard-tiny --out checkpoints/gepard-tiny [--latest] [--temperature T] [--top-k K]

One export for every Gepard run, told apart by its ``config.json`` (:func:`post_stage`): a pretraining run
(``duet.train.recipes.gepard``) as it is; a gepard-sft run (``duet.train.recipes.gepard_post``) as it is; a
gepard-dpo run with its LoRA adapters merged (``merge_lora``): a stock Gepard. By default the best checkpoint by
validation loss (``best/``), else the latest; ``checkpoint`` picks one. ``--temperature`` / ``--top-k`` set the
sampling ``duet speak`` and ``duet serve`` use for the model by default; a post-training run falls back to its
starting model's.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from duet.gepard.checkpoint import save_gepard
from duet.gepard.model import GepardModel
from duet.nn.lora import merge_lora
from duet.sampling import SamplingParams
from duet.train import recipe as driver
from duet.train.flags import add_gepard_export, run_export, stage_main
from duet.train.recipes.gepard import GepardTrainConfig
from duet.train.recipes.gepard_post import GepardDPOConfig, GepardSFTConfig, build_policy
from duet.train.runner import CONFIG


def post_stage(run_dir: str | Path) -> str | None:
    """"sft" or "dpo" for a post-training run directory, None for any other."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        return None
    keys = set(json.loads(path.read_text()))
    if "lora" in keys and "pairs" in keys:
        return "dpo"
    if "selection" in keys and "init_from" in keys:
        return "sft"
    return None


def export_gepard(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None,
                  best: bool = True, sampling: dict[str, Any] | None = None) -> Path:
    """A Gepard run of any stage -> a shipped Gepard (module docstring)."""
    stage = post_stage(run_dir)
    if stage is None:
        run = driver.load_run(run_dir, GepardTrainConfig, lambda cfg: GepardModel(cfg.model), "Gepard", checkpoint,
                              best)
        return save_gepard(run.module, run.tokenizer, out_dir, codec=run.codec, info=run.info, sampling=sampling)
    if stage == "dpo":
        run = driver.load_run(run_dir, GepardDPOConfig, build_policy, "Gepard DPO", checkpoint, best)
        model = run.module.gepard
        merged = merge_lora(model)
        info = {**run.info, "stage": "dpo", "lora_layers_merged": merged, "pairs": run.state.get("pairs")}
    else:
        run = driver.load_run(run_dir, GepardSFTConfig, lambda c: GepardModel(c.model), "Gepard SFT", checkpoint,
                              best)
        model, info = run.module, {**run.info, "stage": "sft"}
    info["init_from"] = run.config.init_from
    if not sampling:
        sampling = json.loads((Path(run.config.init_from) / "config.json").read_text()).get("sampling", {})
    return save_gepard(model.eval(), run.tokenizer, out_dir, codec=run.codec, info=info, sampling=sampling)


def export_sampling(args: argparse.Namespace) -> dict[str, Any]:
    """``gepard-export``'s own flags -> ``export_gepard``'s ``sampling``: the defaults a shipped model carries."""
    given = {k: v for k, v in (("temperature", args.temperature), ("top_k", args.top_k)) if v is not None}
    SamplingParams(**given)  # the same checks as at inference: one clear line if bad
    return {"sampling": given}


def export_stage(args: argparse.Namespace) -> int:
    """``duet train gepard-export``'s action."""
    return run_export(export_gepard, export_sampling, args)


def add_train_gepard_export_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``gepard-export`` to the ``duet train`` sub-commands, bound to this module."""
    add_gepard_export(subparsers, export_stage)


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.train.recipes.gepard_export gepard-export RUN --out DIR``."""
    return stage_main(add_train_gepard_export_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
