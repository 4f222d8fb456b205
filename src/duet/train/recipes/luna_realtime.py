"""The Luna-TTS Realtime recipe: continual training of a shipped Luna into block-causal block diffusion.

    duet train luna-realtime --init-from checkpoints/luna-tiny --shards data/base/codes-duet-rvq \\
        --out runs/luna-realtime-tiny [--preset luna-realtime-tiny] [--block-size 32] [--steps N] [--minutes M]
    duet train luna-realtime --out runs/luna-realtime-tiny --resume [--minutes M]
    duet train luna-realtime-export runs/luna-realtime-tiny --out checkpoints/luna-realtime-tiny

Report §3.2 "Block adaptation" (DESIGN.md §B): Realtime initialises from Luna-TTS and keeps its text embedding,
audio tables, backbone and heads; what changes is the attention (block-causal, two-stream) and the corruption (an
independent noise level per block). Here:

- ``--init-from`` (a shipped Luna: name or directory) is required for a new run. Its acoustic weights become
  ``LunaRealtime.luna``, a fresh end-of-speech head joins (``duet.luna.realtime``: trained by BCE, with a terminal
  target even when speech ends on a block boundary), its tokenizer is the run's, and its duration predictor is copied
  and frozen (``duet.luna.bundle.RealtimeBundle``): Realtime stops by the end head, the predicted length only sets a
  serving bound. The model's shape is the shipped Luna's; ``--preset`` (default ``luna-realtime-tiny``) picks the
  training settings and the block size (``--block-size`` overrides it).
- the loss is ``duet.luna.realtime_loss.realtime_training_loss`` through ``duet.train.objectives.luna.
  LunaRealtimeDiffusion``; the data (``duet.luna.data``) is the Luna recipe's, and the run directory, tokenizer
  handling and loop every recipe's (``duet.train.recipe.run_recipe``), so checkpoints and exact resume work as there.

Batch sizes: ``batch_frames`` counts text + audio positions per row as in Luna, but a Realtime row runs
S + 2 N B_k positions (the noisy and the clean stream, N = floor(T / B_k) + 1 blocks), about twice as many, hence the
smaller budget of the tiny preset.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from duet.data.token_rows import LunaDataConfig
from duet.errors import DuetError
from duet.luna.bundle import RealtimeBundle
from duet.luna.config import LunaConfig
from duet.luna.data import LunaData
from duet.luna.duration import DurationConfig, duration_preset
from duet.luna.realtime import PRESETS, RealtimeConfig, realtime_preset
from duet.luna.realtime_loss import RealtimeObjective
from duet.luna.shipped import load_luna, save_luna_realtime
from duet.train import recipe as driver
from duet.train.checkpoint import latest_checkpoint
from duet.train.flags import REALTIME_DEFAULT_PRESET, add_realtime_stages, run_export, run_train, stage_main
from duet.train.loop import LoopConfig
from duet.train.objectives.luna import LunaRealtimeDiffusion
from duet.train.recipes.luna import export_decode, luna_data_options
from duet.train.runner import LoopResult


@dataclass(frozen=True)
class RealtimeTrainConfig:
    name: str  # the recipe preset (luna-realtime-tiny, luna-realtime-0.6b)
    model: RealtimeConfig  # the shipped Luna's config plus the block size
    duration: DurationConfig  # the shipped Luna's duration predictor (frozen)
    shards: str  # encoded codes (duet data encode --codec duet-rvq --out)
    manifest: str  # the corpus manifest the shards were encoded from
    data: LunaDataConfig = field(default_factory=LunaDataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    objective: RealtimeObjective = field(default_factory=RealtimeObjective)


def recipe(name: str, shards: str = "", manifest: str = "", model: RealtimeConfig | None = None,
           duration: DurationConfig | None = None) -> RealtimeTrainConfig:
    """Default settings per preset; ``model`` / ``duration`` (the shipped Luna's, with a block size) replace the
    preset's shapes. Built one by one in ``tests/luna/test_luna_realtime_recipe.py``."""
    model = model or realtime_preset(name)
    duration = duration or duration_preset(name.replace("realtime-", ""))
    if name == "luna-realtime-tiny":
        # Continual training from luna-tiny, not from scratch: a short schedule at a lower peak LR than Luna's 5e-4
        # (the weights are already good; the new parts are the block-causal attention pattern and the end head).
        # A row costs S + 2 N B_k positions, about twice its Luna cost; 3,000 steps is ~3 epochs of the 10-hour
        # base corpus.
        loop = LoopConfig(max_steps=3000, lr=2e-4, warmup_steps=100, weight_decay=0.1, log_every=10,
                          val_every=250, diag_every=0, checkpoint_every=250, checkpoint_minutes=10.0, patience=6)
        data = LunaDataConfig(batch_frames=1200, max_batch_size=16, max_frames=400)
    else:  # luna-realtime-0.6b: sized for one large GPU in bf16, not measured here
        loop = LoopConfig(max_steps=50_000, lr=1e-4, warmup_steps=1000, weight_decay=0.1, bf16=True,
                          log_every=50, val_every=2000, diag_every=0, checkpoint_every=2000,
                          checkpoint_minutes=30.0)
        data = LunaDataConfig(batch_frames=10_000, max_batch_size=64)
    return RealtimeTrainConfig(name=name, model=model, duration=duration, shards=shards, manifest=manifest,
                               data=data, loop=loop)


def shipped_configs(init_from: str | Path) -> tuple[Path, dict[str, Any]]:
    """-> (directory, config.json) of a shipped Luna, without loading its weights."""
    from duet.luna.shipped import TYPE
    from duet.shipped import model_type

    path, kind = model_type(init_from)
    if kind != TYPE:
        raise DuetError(f"{init_from} holds a {kind!r} model; Luna Realtime continues from a Luna ({TYPE!r}) model")
    return path, json.loads((path / "config.json").read_text())


def train_luna_realtime(cfg: RealtimeTrainConfig | None, run_dir: str | Path, *,
                        init_from: str | Path | None = None, resume: bool = False, stop_at_step: int | None = None,
                        max_minutes: float | None = None, threads: int | None = None,
                        progress: bool = True) -> LoopResult:
    """Continue a shipped Luna (``init_from``) as Luna Realtime in ``run_dir``, or resume the run there (``cfg``
    may then be None: the run's config is used, and ``init_from`` is ignored: the checkpoint holds the weights)."""
    run_dir = Path(run_dir)
    cfg = driver.run_config(run_dir, cfg, resume, RealtimeTrainConfig, "Luna Realtime")
    if resume and latest_checkpoint(run_dir) is None:  # nothing saved yet: never train a random Luna by mistake
        if init_from is None:
            raise DuetError(f"{run_dir} has no checkpoint to resume; start it with --init-from (a shipped Luna)")
        resume = False
    shipped = None
    if not resume:
        if init_from is None:
            raise DuetError("Luna Realtime continues a trained Luna: give --init-from (a shipped Luna model)")
        from duet.shipped import resolve_model

        shipped = load_luna(resolve_model(init_from))
        if (shipped.bundle.acoustic.config, shipped.bundle.duration.config) != (cfg.model.luna, cfg.duration):
            raise DuetError(f"{init_from} is a different model than the run's {cfg.name}; cannot continue it")

    def build() -> RealtimeBundle:
        if shipped is None:  # a resume: the checkpoint overwrites every weight
            return RealtimeBundle(cfg.model, cfg.duration)
        return RealtimeBundle.from_luna(shipped.bundle, cfg.model.block_size)

    tokenizer = str(shipped.path / "tokenizer.json") if shipped is not None else None
    objective = LunaRealtimeDiffusion(cfg.objective)
    return driver.run_recipe(cfg, run_dir, model=cfg.model.luna, data=LunaData,
                             data_options=luna_data_options(cfg.data), build=build, objective=objective,
                             tokenizer=tokenizer,
                             init_from=None if resume else init_from, resume=resume,
                             stop_at_step=stop_at_step, max_minutes=max_minutes, threads=threads,
                             progress=progress)


def export_luna_realtime(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None,
                         best: bool = True, decode: dict[str, Any] | None = None) -> Path:
    """A run's checkpoint (best by validation loss by default, else the latest) -> the shipped format
    (``duet.luna.shipped.save_luna_realtime``: fp16, ``"type": "luna-realtime"``, tokenizer, codec, the frozen
    duration predictor). ``duet.load`` speaks with it through ``duet.tts.luna_realtime.RealtimeRuntime``.
    ``decode``: its decoding defaults per block (``duet.luna.shipped.DECODE_KEYS``)."""
    run = driver.load_run(run_dir, RealtimeTrainConfig, lambda cfg: RealtimeBundle(cfg.model, cfg.duration),
                          "Luna Realtime", checkpoint, best)
    info = {"preset": run.config.name, "init_from": run.state.get("init_from"), **run.info}
    return save_luna_realtime(run.module, run.tokenizer, out_dir, codec=run.codec, info=info, decode=decode)


# ---- command line --------------------------------------------------------------------------------------------------


def train_stage(args: argparse.Namespace) -> int:
    """``duet train luna-realtime``'s action (its flags: ``duet.train.flags.add_realtime_stages``)."""
    return run_train(train_luna_realtime, config_from_args, False, args)


def export_stage(args: argparse.Namespace) -> int:
    """``duet train luna-realtime-export``'s action."""
    return run_export(export_luna_realtime, export_decode, args)


def config_from_args(args: argparse.Namespace) -> RealtimeTrainConfig:
    """Flags -> RealtimeTrainConfig. A new run takes the model from ``--init-from`` (preset default
    luna-realtime-tiny); a resume without ``--preset`` the run's config, with the given overrides."""
    if args.preset is None and not args.resume:
        args = argparse.Namespace(**{**vars(args), "preset": REALTIME_DEFAULT_PRESET})
    shipped = None
    if args.preset is not None:
        if args.init_from is None:
            raise DuetError("give --init-from (a shipped Luna: name or directory) for a new Luna Realtime run")
        shipped = shipped_configs(args.init_from)[1]

    def from_preset(name: str, shards: str = "", manifest: str = "") -> RealtimeTrainConfig:
        block = args.block_size or realtime_preset(name).block_size
        model = RealtimeConfig(luna=LunaConfig.from_dict(shipped["config"]), block_size=block)
        return recipe(name, shards, manifest, model=model, duration=DurationConfig.from_dict(shipped["duration"]))

    cfg = driver.config_from_args(args, from_preset, RealtimeTrainConfig, ", ".join(PRESETS))
    if args.preset is None and args.block_size is not None:  # a resume: merge_resume refuses a change
        cfg = replace(cfg, model=replace(cfg.model, block_size=args.block_size))
    if args.end_weight is not None:
        cfg = replace(cfg, objective=replace(cfg.objective, end_weight=args.end_weight))
    return cfg


def add_train_realtime_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``luna-realtime`` and ``luna-realtime-export`` to the ``duet train`` sub-commands, bound to this module."""
    add_realtime_stages(subparsers, train_stage, export_stage)


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.train.recipes.luna_realtime luna-realtime ...`` (what torchrun launches)."""
    return stage_main(add_train_realtime_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
