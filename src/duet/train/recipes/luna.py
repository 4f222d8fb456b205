"""The Luna-TTS training recipe: ``duet train luna`` -> config dataclasses -> the shared loop.

    duet train luna --preset luna-tiny --shards data/base/codes-duet-rvq --manifest data/base/manifest.jsonl \\
        --out runs/luna-tiny [--resume] [--steps N] [--batch-frames N] [--lr LR] [--minutes M] [--init-from DIR]
    torchrun --nproc-per-node 2 -m duet.train.recipes.luna luna ...          # DDP (gloo on CPU, nccl on GPU)
    duet train luna-export runs/luna-tiny --out checkpoints/luna-tiny   # fp16 weights + config + tokenizer

The pieces: ``duet.luna.data`` (shards + manifest text -> length-bucketed ``LunaBatch``es with duration targets),
``duet.luna.bundle`` (the acoustic model and the duration predictor, trained side by side),
``duet.train.objectives.luna`` (masked-diffusion loss with 1/t weighting, text dropout 0.1 for CFG, prompt splits,
the predictor's bin cross-entropy), ``duet.train.loop`` (AdamW, warm-up + cosine, clipping, bf16, non-finite guard,
accumulation, checkpoints, exact resume, DDP, metrics and plots), ``duet.train.recipe`` (the driver every recipe
shares: run directory, resume merging, the run's tokenizer, data, seeding, loop; the export skeleton; the parsing of
the shared flags). This file holds the config, the presets and the stages' actions, and hands the driver what is
Luna's own (:func:`luna_data_options` is also Luna-TTS Realtime's, ``duet.train.recipes.luna_realtime``); the flags
are ``duet.train.flags``, which ``duet train`` builds without importing this module.

Duration predictor supervision: forced alignments (``duet data align --tokenizer RUN_OR_MODEL ... --out FILE``,
then ``--alignments FILE``; ``duet.data.align``), or without them the character-proportional spread
(``duet.luna.data``). Either way the per-token targets add up to the frame count exactly, so the predicted total
length, the only thing decoding uses, is supervised exactly; check ``length_err`` / ``val_length_err`` in
``metrics.jsonl`` (the mean relative error of the predicted total). ``--duration-only --init-from MODEL`` retrains a
shipped model's predictor alone (the acoustic model frozen and not run), e.g. on alignments made with its tokenizer.

Run directory (``--out``): ``config.json`` (the :class:`LunaTrainConfig`; a resumed run keeps it), ``tokenizer.json``
(the run's own copy: ``--tokenizer train-bpe`` by default; use ``qwen3`` for luna-0.6b, whose 151,936-row text
embedding is Qwen3's), and the loop's ``metrics.jsonl``, ``loss.png``, ``checkpoints/``, ``best/``.

Not wired here: initialising luna-0.6b's backbones from a local Qwen3-0.6B checkpoint (``LunaModel.init_from`` and
``DurationPredictor.init_from`` exist); luna-tiny starts from scratch, as the report's recipe cannot on a CPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from duet.data.token_rows import LunaDataConfig
from duet.errors import DuetError
from duet.luna.bundle import LunaBundle
from duet.luna.config import PRESETS, LunaConfig, luna_preset
from duet.luna.data import LunaData
from duet.luna.decode import DecodeConfig
from duet.luna.diffusion import DiffusionConfig
from duet.luna.duration import DurationConfig, duration_preset
from duet.luna.shipped import load_luna, save_luna
from duet.train import recipe as driver
from duet.train.flags import add_luna_stages, run_export, run_train, stage_main
from duet.train.loop import LoopConfig
from duet.train.objectives.luna import LunaDiffusion
from duet.train.runner import LoopResult


@dataclass(frozen=True)
class LunaTrainConfig:
    name: str  # the preset the model and predictor come from (luna-tiny, luna-0.6b)
    model: LunaConfig
    duration: DurationConfig
    shards: str  # encoded codes (duet data encode --codec duet-rvq --out)
    manifest: str  # the corpus manifest the shards were encoded from (text, split, language)
    data: LunaDataConfig = field(default_factory=LunaDataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    duration_weight: float = 1.0  # the predictor's CE joins the diffusion loss with this weight
    duration_only: bool = False  # train the duration predictor alone (acoustic model frozen), e.g. on alignments
    bpe_vocab: int = 2048  # with --tokenizer train-bpe


def recipe(name: str, shards: str = "", manifest: str = "") -> LunaTrainConfig:
    """Default training settings per preset (built one by one in ``tests/luna/test_luna_train_recipe.py``)."""
    model, duration = luna_preset(name), duration_preset(name)
    if name in ("luna-tiny-fsq", "luna-tiny-rvq4"):
        # The FSQ channel grid (or 4 codebooks of an anchored RVQ) at luna-tiny's size, with the settings of the
        # probe that first made a tiny Luna follow the text (DESIGN.md §F: lr 1e-3, AdamW betas (0.9, 0.98),
        # weight decay 0.01, every cell alike). 400 frames are 18.6 s at 21.5 frames/s, 16 s at 25.
        loop = LoopConfig(max_steps=20_000, lr=1e-3, warmup_steps=200, weight_decay=0.01, betas=(0.9, 0.98),
                          log_every=10, val_every=250, diag_every=0, checkpoint_every=500, checkpoint_minutes=5.0,
                          patience=0)
        data = LunaDataConfig(batch_frames=2000, max_batch_size=32, max_frames=400)
        diffusion = DiffusionConfig()
    elif name == "luna-tiny":
        # Sized for a CPU: 2,000 positions per step, so the 12-hour `joe` corpus is about 900 steps per epoch.
        # DESIGN §D: small models on little text overfit, so validate every 250 steps and stop early on held-out
        # loss.
        loop = LoopConfig(max_steps=6000, lr=5e-4, warmup_steps=300, weight_decay=0.1, log_every=10,
                          val_every=250, diag_every=0, checkpoint_every=500, checkpoint_minutes=10.0, patience=6)
        data = LunaDataConfig(batch_frames=2000, max_batch_size=32, max_frames=400)
        # The first (coarse) codebook carries most of what is said; the deep ones sit near their unigram entropy.
        # Weighted up (with phoneme input and tied heads), the first codebook's validation CE reached
        # 4.53 nats after 1,750 steps, against 5.09 for the equal-weight, untied, BPE run after as many.
        diffusion = DiffusionConfig(codebook_weights=(4.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    else:  # luna-0.6b: the report's shape in bf16; sized for one large GPU, not measured here (no GPU in reach)
        loop = LoopConfig(max_steps=200_000, lr=2e-4, warmup_steps=2000, weight_decay=0.1, bf16=True,
                          log_every=50, val_every=2000, diag_every=0, checkpoint_every=2000,
                          checkpoint_minutes=30.0)
        data = LunaDataConfig(batch_frames=16_000, max_batch_size=128)
        diffusion = DiffusionConfig()  # the report's: every cell weighs the same
    return LunaTrainConfig(name=name, model=model, duration=duration, shards=shards, manifest=manifest, data=data,
                           loop=loop, diffusion=diffusion)


def luna_data_options(data: LunaDataConfig) -> Callable[[Path], dict[str, Any]]:
    """``LunaData.from_shards``'s own keywords for the driver: the duration targets of ``data.alignments`` (made
    with the run's tokenizer), read once the run's tokenizer is in place."""

    def options(tokenizer: Path) -> dict[str, Any]:
        if not data.alignments:
            return {"alignments": None}
        from duet.data.align import read_alignments

        return {"alignments": read_alignments(data.alignments, tokenizer)}

    return options


def train_luna(cfg: LunaTrainConfig | None, run_dir: str | Path, *, tokenizer: str | None = None,
               resume: bool = False, stop_at_step: int | None = None, max_minutes: float | None = None,
               threads: int | None = None, progress: bool = True,
               init_from: str | Path | None = None) -> LoopResult:
    """Train (or resume) Luna in ``run_dir``; ``cfg`` may be None on resume (the run's config is used).

    ``init_from`` (a shipped model name or directory) warm-starts a new run from its fp16 weights (acoustic model
    and duration predictor) and tokenizer, with fresh optimizer state: how training continues on another machine,
    where only the export travels.
    """
    run_dir = Path(run_dir)
    cfg = driver.run_config(run_dir, cfg, resume, LunaTrainConfig, "Luna")
    shipped = None
    if init_from is not None and not resume:
        from duet.shipped import resolve_model

        shipped = load_luna(resolve_model(init_from))
        if (shipped.bundle.acoustic.config, shipped.bundle.duration.config) != (cfg.model, cfg.duration):
            raise DuetError(f"{init_from} is a different model than the run's {cfg.name}; cannot warm-start")
        tokenizer = str(shipped.path / "tokenizer.json")

    def build() -> LunaBundle:
        bundle = LunaBundle(cfg.model, cfg.duration)
        if shipped is not None:
            bundle.load_state_dict(shipped.bundle.state_dict())
        if cfg.duration_only:
            bundle.acoustic.requires_grad_(False)  # the loop's optimizer skips it; it is not even run
        return bundle

    objective = LunaDiffusion(cfg.diffusion, cfg.duration_weight, duration_only=cfg.duration_only)
    return driver.run_recipe(cfg, run_dir, model=cfg.model, data=LunaData, data_options=luna_data_options(cfg.data),
                             build=build, objective=objective, tokenizer=tokenizer,
                             init_from=None if resume else init_from, resume=resume,
                             stop_at_step=stop_at_step, max_minutes=max_minutes, threads=threads,
                             progress=progress)


def export_luna(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None,
                best: bool = True, decode: dict[str, Any] | None = None) -> Path:
    """A run's checkpoint -> the shipped format (``duet.luna.shipped``: fp16 weights, config, tokenizer, codec).

    By default the best checkpoint by validation loss (``best/``), else the latest; ``checkpoint`` picks one.
    ``decode``: the decoding defaults the model ships with (``duet.luna.shipped.DECODE_KEYS``).
    Load it with ``duet.luna.shipped.load_luna`` (the model) or ``duet.load`` (a speaker).
    """
    run = driver.load_run(run_dir, LunaTrainConfig, lambda cfg: LunaBundle(cfg.model, cfg.duration), "Luna",
                          checkpoint, best)
    return save_luna(run.module, run.tokenizer, out_dir, codec=run.codec, info={"preset": run.config.name, **run.info},
                     decode=decode)


# ---- command line --------------------------------------------------------------------------------------------------


def train_stage(args: argparse.Namespace) -> int:
    """``duet train luna``'s action (its flags: ``duet.train.flags.add_luna_stages``)."""
    return run_train(train_luna, config_from_args, True, args)


def export_stage(args: argparse.Namespace) -> int:
    """``duet train luna-export``'s action."""
    return run_export(export_luna, export_decode, args)


def export_decode(args: argparse.Namespace) -> dict[str, Any]:
    """``luna-export``'s own flags -> ``export_luna``'s ``decode``, checked as at inference (one clear line if bad)."""
    given = {k: v for k, v in (("steps", args.steps), ("temperature", args.temperature),
                               ("cfg_scale", args.cfg_scale)) if v is not None}
    DecodeConfig(**given)
    return {"decode": given}


def config_from_args(args: argparse.Namespace) -> LunaTrainConfig:
    """Flags -> LunaTrainConfig (on a resume without --preset: the run's config, with the given overrides)."""
    cfg = driver.config_from_args(args, recipe, LunaTrainConfig, ", ".join(PRESETS))
    if args.codebook_weights is not None:
        if len(args.codebook_weights) != cfg.model.num_codebooks:
            raise DuetError(f"--codebook-weights gives {len(args.codebook_weights)} weights for "
                            f"{cfg.model.num_codebooks} codebooks")
        cfg = replace(cfg, diffusion=replace(cfg.diffusion, codebook_weights=args.codebook_weights))
    if args.objective is not None:
        cfg = replace(cfg, diffusion=replace(cfg.diffusion, objective=args.objective))
    if args.tie_heads is not None:
        if args.resume and args.tie_heads != cfg.model.tie_heads:
            raise DuetError("--tie-heads cannot change on --resume (the weights' shapes would change)")
        cfg = replace(cfg, model=replace(cfg.model, tie_heads=args.tie_heads))
    if args.aligned is not None:
        if args.resume and args.aligned != cfg.model.aligned_window:
            raise DuetError("--aligned cannot change on --resume (the model's inputs would change)")
        cfg = replace(cfg, model=replace(cfg.model, aligned_window=args.aligned))
    if args.alignments is not None:
        cfg = replace(cfg, data=replace(cfg.data, alignments=args.alignments))
    if args.duration_only:
        cfg = replace(cfg, duration_only=True)
    return cfg


def add_train_luna_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``luna`` and ``luna-export`` to the ``duet train`` sub-commands, bound to this module."""
    add_luna_stages(subparsers, train_stage, export_stage)


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.train.recipes.luna luna ...`` (what torchrun launches)."""
    return stage_main(add_train_luna_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
