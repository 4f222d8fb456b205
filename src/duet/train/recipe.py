"""What every family's training recipe (``duet.train.recipes``: ``gepard``, ``luna``, ``luna_realtime``) shares:
one driver around the loop, one config file, one export skeleton, the parsing of the shared flags.

A recipe config is a frozen dataclass with at least ``name`` (its preset), ``shards`` (encoded codes),
``manifest`` (their corpus), ``data`` (a data config with ``languages`` / ``normalize`` / ``batch_frames`` /
``max_batch_size`` / ``seed`` / ``val_items``), ``loop`` (:class:`duet.train.loop.LoopConfig`) and, where the
recipe trains its tokenizer, ``bpe_vocab``; this module holds the pieces that only touch those:

- :func:`read_run_config` / :func:`write_run_config` (``duet.train.runner``, one for every run): ``config.json``;
- :func:`run_config`: the config a run uses (the saved one, merged, on a resume);
- :func:`merge_resume`: on ``--resume`` the run's saved config wins; only the data paths and the loop fields that do
  not change the steps already taken (:data:`RESUMABLE_LOOP_FIELDS`) may differ;
- :func:`prepare_tokenizer`: the run's own ``tokenizer.json`` (trained BPE, Qwen3's, or a copy);
- :func:`run_recipe`: the driver (run guard, config, tokenizer, distributed set-up, data, seeding, loop); a recipe
  hands it what is its own: the data class, the module to build, the objective;
- :func:`load_run`: what an export reads (best checkpoint by validation loss, else latest), built and loaded;
- :func:`config_from_args`: the flags every ``duet train FAMILY`` stage shares (``duet.train.flags``, which builds
  the parser without importing torch) -> a recipe config.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from duet.command import comma_list
from duet.data.utterances import train_tokenizer
from duet.errors import DuetError
from duet.text import QWEN3
from duet.text.phonemes import DEFAULT_VOICE
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.distributed import setup_distributed
from duet.train.flags import TRAIN_BPE, TRAIN_PHONEME_BPE
from duet.train.loop import Objective, train
from duet.train.runner import BEST, CONFIG, LoopResult, read_run_config, resume_point, write_run_config

# Loop fields a resumed run may change: they steer logging, saving and stopping, not the steps already taken
# (max_steps moves the end of the cosine, as in the codec loop).
RESUMABLE_LOOP_FIELDS = ("max_steps", "log_every", "val_every", "diag_every", "checkpoint_every",
                         "checkpoint_minutes", "keep_checkpoints", "patience", "min_delta", "device")

C = TypeVar("C")


def merge_resume(saved: C, cfg: C | None) -> C:
    """The saved config, with the data paths and the loop fields that do not change the past taken from ``cfg``."""
    if cfg is None or cfg == saved:
        return saved
    # Data paths may move between invocations (the same corpus elsewhere); anything else must match.
    as_saved = replace(cfg, shards=saved.shards, manifest=saved.manifest,
                       loop=replace(cfg.loop, **{k: getattr(saved.loop, k) for k in RESUMABLE_LOOP_FIELDS}))
    if as_saved != saved:
        changed = [f"loop.{f.name}" for f in fields(saved.loop)
                   if getattr(saved.loop, f.name) != getattr(as_saved.loop, f.name)]
        changed += [f.name for f in fields(saved)
                    if f.name != "loop" and getattr(saved, f.name) != getattr(as_saved, f.name)]
        raise DuetError(f"the run was trained with a different {', '.join(changed)}; on --resume only "
                        f"the data paths and {', '.join(RESUMABLE_LOOP_FIELDS)} may change")
    return replace(saved, shards=cfg.shards, manifest=cfg.manifest,
                   loop=replace(saved.loop, **{k: getattr(cfg.loop, k) for k in RESUMABLE_LOOP_FIELDS}))


def run_config(run_dir: Path, cfg: C | None, resume: bool, cls: type[C], family: str) -> C:
    """The config a ``train_FAMILY`` call runs with: on a resume the run's saved ``config.json`` merged with
    ``cfg`` (:func:`merge_resume`), else ``cfg``; a DuetError when there is none or it lacks its data paths."""
    if resume and (run_dir / CONFIG).is_file():
        cfg = merge_resume(read_run_config(run_dir, cls), cfg)
    if cfg is None:
        raise DuetError("no config: give --preset, or --resume a run directory that has config.json")
    if not cfg.shards or not cfg.manifest:
        raise DuetError(f"{family} training needs --shards (encoded codes) and --manifest (their corpus)")
    return cfg


def prepare_tokenizer(spec: str | None, run_dir: Path, cfg: Any, resume: bool) -> Path:
    """The run's ``tokenizer.json``: kept on a resume, else trained (``train-bpe``, ``cfg.bpe_vocab`` bytes +
    merges on the prepared training texts of ``cfg.manifest``), Qwen3's (``qwen3``), or copied from a path."""
    target = run_dir / "tokenizer.json"
    if resume and target.is_file():
        return target
    spec = spec or TRAIN_BPE
    if spec in (TRAIN_BPE, TRAIN_PHONEME_BPE):
        phonemes = DEFAULT_VOICE if spec == TRAIN_PHONEME_BPE else None
        of = "espeak-ng IPA of the training texts" if phonemes else "the training texts"
        print(f"training a {cfg.bpe_vocab}-entry BPE on {of} of {cfg.manifest}", file=sys.stderr)
        return train_tokenizer(cfg.manifest, target, cfg.data, vocab_size=cfg.bpe_vocab, phonemes=phonemes)
    if spec == QWEN3:
        from duet.text import get_tokenizer

        get_tokenizer(QWEN3).backend_tokenizer.save(str(target))
        return target
    source = Path(spec)
    source = source / "tokenizer.json" if source.is_dir() else source
    if not source.is_file():
        raise DuetError(f"no tokenizer at {spec}: give a tokenizer.json, {QWEN3!r}, {TRAIN_BPE!r} or "
                       f"{TRAIN_PHONEME_BPE!r}")
    shutil.copyfile(source, target)
    return target


def run_recipe(cfg: Any, run_dir: Path, *, model: Any, data: Any, build: Callable[[], nn.Module],
               objective: Objective, tokenizer: str | None, init_from: str | Path | None, resume: bool,
               stop_at_step: int | None, max_minutes: float | None, threads: int | None, progress: bool,
               data_options: Callable[[Path], dict[str, Any]] | None = None) -> LoopResult:
    """What every recipe does around the shared loop.

    ``cfg`` is the recipe's config, already merged on a resume (:func:`run_config`). Writes ``config.json`` and the
    run's tokenizer (rank 0; ``tokenizer`` as in :func:`prepare_tokenizer`), loads the train and val splits with
    ``data.from_shards`` (``GepardData``, ``LunaData``) for ``model`` (the config whose codebooks, positions and text
    vocabulary the data must fit), with the keywords ``data_options(tokenizer.json)`` adds, seeds, calls ``build()``
    for the module to train (fresh or warm-started; a resume overwrites it from the checkpoint) and runs the loop
    with ``objective``. ``init_from``: the shipped model the module was warm-started from (None: not), kept with
    the codec and corpus facts in every checkpoint's state.
    """
    from duet.data.shards import CodeShards
    from duet.text import get_tokenizer

    if threads:
        torch.set_num_threads(threads)
    env = setup_distributed(cfg.loop.device)
    try:
        resume_point(run_dir, resume)  # before config.json is rewritten; every rank sees it: none waits for another
        if env.is_main:  # one writer; the other ranks wait at the barrier below
            run_dir.mkdir(parents=True, exist_ok=True)
            write_run_config(run_dir, cfg)
            prepare_tokenizer(tokenizer, run_dir, cfg, resume)
        if env.distributed:
            dist.barrier()
        tok = get_tokenizer(run_dir / "tokenizer.json")
        if len(tok) > model.backbone.vocab_size:
            raise DuetError(f"the tokenizer has {len(tok)} ids but {cfg.name}'s text embedding only "
                            f"{model.backbone.vocab_size} rows; train a smaller BPE (--bpe-vocab)")
        options = data_options(run_dir / "tokenizer.json") if data_options else {}
        train_data = data.from_shards(cfg.shards, cfg.manifest, tok, cfg.data, "train", model=model, **options)
        val, val_rows = None, 0
        if cfg.data.val_items and cfg.loop.val_every:
            try:
                val_data = data.from_shards(cfg.shards, cfg.manifest, tok, cfg.data, "val", model=model,
                                            limit=cfg.data.val_items, **options)
                val, val_rows = val_data.batches(), len(val_data)
            except DuetError:  # a corpus without a val split: train without validation
                val = None
        if env.is_main:
            print(f"train: {train_data.summary()}; val: {val_rows} utterances", file=sys.stderr)
        torch.manual_seed(cfg.loop.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        module = build()
        shards = CodeShards(cfg.shards)
        extra = {"recipe": objective.name, "codec": {"name": shards.codec, "frame_rate": shards.frame_rate},
                 "train_utterances": len(train_data), "train_frames": train_data.frames,
                 "init_from": str(init_from) if init_from is not None else None}
        return train(module, objective, train_data, cfg.loop, run_dir, val_batches=val, resume=resume,
                     stop_at_step=stop_at_step, max_minutes=max_minutes, progress=progress, extra=extra,
                     title=f"{cfg.name} ({run_dir.name})")
    finally:
        if env.owns_group and dist.is_initialized():
            dist.destroy_process_group()


@dataclass(frozen=True)
class TrainedRun:
    """A run's checkpoint, ready to be written as a shipped model."""

    config: Any  # the run's recipe config
    module: nn.Module  # built from it, the checkpoint's weights loaded, in eval mode
    tokenizer: Path  # the run's tokenizer.json
    codec: dict[str, Any] | None  # the codec the run's shards were encoded with
    info: dict[str, Any]  # provenance for the shipped config: run, checkpoint, step, val loss, hours, utterances
    state: dict[str, Any]  # the run's latest ``extra`` state (counters, ``init_from``)


def load_run(run_dir: str | Path, cls: type[C], build: Callable[[C], nn.Module], family: str,
             checkpoint: str | Path | None = None, best: bool = True) -> TrainedRun:
    """What an export reads: by default the best checkpoint by validation loss (``best/``), else the latest;
    ``checkpoint`` picks one. ``build(config)`` makes the module its weights load into (strictly)."""
    run_dir = Path(run_dir)
    if checkpoint is not None:
        ckpt = Path(checkpoint)
    else:
        ckpt = (latest_checkpoint(run_dir / BEST) if best else None) or latest_checkpoint(run_dir)
    if ckpt is None:
        raise DuetError(f"{run_dir} has no checkpoint to export")
    state = read_state(ckpt)
    extra = state.get("extra", {})
    latest = latest_checkpoint(run_dir)
    run_state = read_state(latest).get("extra", {}) if latest else extra
    try:
        where = str(ckpt.resolve().relative_to(run_dir.resolve()))
    except ValueError:
        where = str(ckpt)
    info = {"run": run_dir.name, "checkpoint": where, "step": state["step"],
            "val_loss": extra.get("val_loss", run_state.get("best_val")),
            "train_hours": round(run_state.get("train_seconds", 0.0) / 3600, 3),
            "train_utterances": run_state.get("train_utterances")}
    try:
        cfg = read_run_config(run_dir, cls)
    except OSError as err:
        raise DuetError(f"{run_dir} is not a {family} run directory (no config.json)") from err
    module = build(cfg)
    module.load_state_dict(load_weights(ckpt, "model"), strict=True)
    return TrainedRun(config=cfg, module=module.eval(), tokenizer=run_dir / "tokenizer.json",
                      codec=run_state.get("codec"), info=info, state=run_state)


# ---- command line (the flags themselves: duet.train.flags) ---------------------------------------------------------


def config_from_args(args: argparse.Namespace, recipe: Callable[..., C], cls: type[C], presets_hint: str) -> C:
    """The shared flags -> a recipe config: ``recipe(preset, shards=, manifest=)`` or, on a resume without
    ``--preset``, the run's saved config (a ``cls``), with the given overrides applied."""
    if args.preset is None:
        if not args.resume:
            raise DuetError(f"give --preset ({presets_hint}), or --resume an existing run")
        if not (Path(args.out) / CONFIG).is_file():
            raise DuetError(f"cannot resume {args.out}: it has no config.json")
        cfg = read_run_config(args.out, cls)
    else:
        if not args.shards:
            raise DuetError("--shards is required (the output of duet data encode)")
        manifest = args.manifest
        if manifest is None:
            index = Path(args.shards) / "index.json"
            manifest = json.loads(index.read_text()).get("manifest") if index.is_file() else None
            if not manifest:
                raise DuetError(f"--manifest is required ({index} names none)")
        cfg = recipe(args.preset, shards=args.shards, manifest=manifest)
    loop = {k: v for k, v in (("max_steps", args.steps), ("lr", args.lr), ("warmup_steps", args.warmup),
                              ("accum_steps", args.accum), ("bf16", args.bf16), ("val_every", args.val_every),
                              ("checkpoint_every", args.checkpoint_every), ("patience", args.patience),
                              ("seed", args.seed)) if v is not None}
    data = {k: v for k, v in (("batch_frames", args.batch_frames), ("max_batch_size", args.max_batch),
                              ("seed", args.seed)) if v is not None}
    if args.languages is not None:
        data["languages"] = comma_list(args.languages)
    if args.hold_out_speakers is not None:
        data["held_out_speakers"] = comma_list(args.hold_out_speakers)
    cfg = replace(cfg, loop=replace(cfg.loop, **loop), data=replace(cfg.data, **data))
    if getattr(args, "bpe_vocab", None) is not None:
        cfg = replace(cfg, bpe_vocab=args.bpe_vocab)
    if args.preset is None and args.shards:
        cfg = replace(cfg, shards=args.shards)
    if args.preset is None and args.manifest:
        cfg = replace(cfg, manifest=args.manifest)
    return cfg
