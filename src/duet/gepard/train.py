"""The Gepard pretraining recipe: ``duet train gepard`` -> config dataclasses -> the shared loop.

    duet train gepard --preset gepard-tiny --shards data/base/codes-duet-fsq --manifest data/base/manifest.jsonl \\
        --tokenizer train-bpe --out runs/gepard-tiny [--resume] [--steps N] [--batch-frames N] [--lr LR] \\
        [--bf16] [--accum N] [--minutes M]
    torchrun --nproc-per-node 2 -m duet.gepard.train gepard ...        # DDP (gloo on CPU, nccl on GPU)
    duet train gepard-export runs/gepard-tiny --out checkpoints/gepard-tiny   # fp16 weights + config + tokenizer

The pieces: ``duet.gepard.data`` (shards + manifest text -> length-bucketed ``GepardBatch``es, short-register
repetition), ``duet.train.objectives.gepard`` (the model's loss, split LRs x0.2 / x0.5, effective ranks),
``duet.train.loop`` (AdamW, warm-up + cosine, clipping, bf16, non-finite guard, accumulation, checkpoints,
exact resume, DDP, metrics and plots). This file only parses flags and wires them.

Run directory (``--out``): ``config.json`` (the :class:`GepardTrainConfig`; a resumed run keeps it),
``tokenizer.json`` (the run's own copy, trained here with ``--tokenizer train-bpe``), and the loop's
``metrics.jsonl``, ``loss.png``, ``ranks.png``, ``checkpoints/``, ``best/``.

Tokenizer: ``train-bpe`` trains duet's byte-level BPE (``--bpe-vocab`` bytes + merges, default 2048, + 150
service tokens = 2198 ids <= gepard-tiny's 2304 rows) on the normalised training texts; ``qwen3`` uses Qwen3's
(gepard-500m); a path uses that ``tokenizer.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from duet.config_io import from_dict, to_dict
from duet.errors import DuetError
from duet.gepard.checkpoint import save_gepard
from duet.gepard.config import PRESETS, GepardConfig, preset
from duet.gepard.data import GepardData, GepardDataConfig, train_tokenizer
from duet.gepard.model import GepardModel
from duet.train.checkpoint import latest_checkpoint, load_weights, read_state
from duet.train.loop import BEST, LoopConfig, LoopResult, setup_distributed, train
from duet.train.objectives.gepard import GepardPretrain

TRAIN_BPE = "train-bpe"
QWEN3 = "qwen3"

# Loop fields a resumed run may change: they steer logging, saving and stopping, not the steps already taken
# (max_steps moves the end of the cosine, as in the codec loop).
RESUMABLE_LOOP_FIELDS = ("max_steps", "log_every", "val_every", "diag_every", "checkpoint_every",
                         "checkpoint_minutes", "keep_checkpoints", "patience", "min_delta", "device")


@dataclass(frozen=True)
class GepardTrainConfig:
    model: GepardConfig
    shards: str  # encoded codes (duet data encode --out)
    manifest: str  # the corpus manifest the shards were encoded from (text, split, language)
    data: GepardDataConfig = field(default_factory=GepardDataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    bpe_vocab: int = 2048  # with --tokenizer train-bpe


def recipe(name: str, shards: str = "", manifest: str = "") -> GepardTrainConfig:
    """Default training settings per model preset (built one by one in ``tests/gepard/test_train_recipe.py``)."""
    model = preset(name)
    if name == "gepard-tiny":
        # About 3 s per 4000-position step on this 2-core CPU (fp32; bf16 autocast is slower here), so 4000
        # steps is ~3.5 h, ~19 epochs of the 10-hour base corpus. DESIGN §D: a 5M model on ~2 h of one voice
        # overfit after ~16 minutes, hence validation every 200 steps and early stopping on held-out loss.
        loop = LoopConfig(max_steps=4000, lr=1e-3, warmup_steps=200, weight_decay=0.1, log_every=10,
                          val_every=200, diag_every=200, checkpoint_every=500, checkpoint_minutes=10.0,
                          patience=6)
        data = GepardDataConfig(batch_frames=4000, max_batch_size=64)
    else:  # gepard-500m: the report's shape, bf16; measured on one H200: 0.31 s per 30,720-position step, 50 GiB
        loop = LoopConfig(max_steps=200_000, lr=3e-4, warmup_steps=2000, weight_decay=0.1, bf16=True,
                          log_every=50, val_every=2000, diag_every=2000, checkpoint_every=2000,
                          checkpoint_minutes=30.0)
        data = GepardDataConfig(batch_frames=32_000, max_batch_size=128)
    return GepardTrainConfig(model=model, shards=shards, manifest=manifest, data=data, loop=loop)


def config_to_json(cfg: GepardTrainConfig) -> dict[str, Any]:
    return to_dict(cfg)


def config_from_json(data: dict[str, Any]) -> GepardTrainConfig:
    return from_dict(GepardTrainConfig, data)


def _merge_resume(saved: GepardTrainConfig, cfg: GepardTrainConfig | None) -> GepardTrainConfig:
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


def _prepare_tokenizer(spec: str | None, run_dir: Path, cfg: GepardTrainConfig, resume: bool) -> Path:
    """The run's ``tokenizer.json``: kept on a resume, else trained / copied there."""
    target = run_dir / "tokenizer.json"
    if resume and target.is_file():
        return target
    spec = spec or TRAIN_BPE
    if spec == TRAIN_BPE:
        print(f"training a {cfg.bpe_vocab}-entry BPE on the training texts of {cfg.manifest}", file=sys.stderr)
        return train_tokenizer(cfg.manifest, target, cfg.data, vocab_size=cfg.bpe_vocab)
    if spec == QWEN3:
        from duet.text import get_tokenizer

        get_tokenizer(QWEN3).backend_tokenizer.save(str(target))
        return target
    source = Path(spec)
    source = source / "tokenizer.json" if source.is_dir() else source
    if not source.is_file():
        raise DuetError(f"no tokenizer at {spec}: give a tokenizer.json, {QWEN3!r} or {TRAIN_BPE!r}")
    shutil.copyfile(source, target)
    return target


def train_gepard(cfg: GepardTrainConfig | None, run_dir: str | Path, *, tokenizer: str | None = None,
                 resume: bool = False, stop_at_step: int | None = None, max_minutes: float | None = None,
                 threads: int | None = None, progress: bool = True,
                 init_from: str | Path | None = None) -> LoopResult:
    """Train (or resume) Gepard in ``run_dir``; ``cfg`` may be None on resume (the run's config is used).

    ``init_from`` (a shipped model name or directory) warm-starts a new run from its fp16 weights and tokenizer,
    with fresh optimizer state: how training continues on another machine, where only the export travels.
    """
    from duet.text import get_tokenizer

    run_dir = Path(run_dir)
    if resume and (run_dir / "config.json").is_file():
        cfg = _merge_resume(config_from_json(json.loads((run_dir / "config.json").read_text())), cfg)
    if cfg is None:
        raise DuetError("no config: give --preset, or --resume a run directory that has config.json")
    if not cfg.shards or not cfg.manifest:
        raise DuetError("Gepard training needs --shards (encoded codes) and --manifest (their corpus)")
    if threads:
        torch.set_num_threads(threads)
    shipped = None
    if init_from is not None and not resume:
        from duet.gepard.checkpoint import load_gepard
        from duet.tts import resolve_model

        shipped = load_gepard(resolve_model(init_from))
        if shipped.model.config != cfg.model:
            raise DuetError(f"{init_from} is a different model ({shipped.model.config.name}) than the run's "
                            f"{cfg.model.name}; cannot warm-start")
        tokenizer = str(shipped.path / "tokenizer.json")
    env = setup_distributed(cfg.loop.device)
    try:
        if not resume and latest_checkpoint(run_dir) is not None:  # every rank sees it: none waits for another
            raise DuetError(f"{run_dir} already holds a run; --resume it or choose another --out")
        if env.is_main:  # one writer; the other ranks wait at the barrier below
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "config.json").write_text(json.dumps(config_to_json(cfg), indent=2) + "\n")
            _prepare_tokenizer(tokenizer, run_dir, cfg, resume)
        if env.distributed:
            dist.barrier()
        tok = get_tokenizer(run_dir / "tokenizer.json")
        if len(tok) > cfg.model.backbone.vocab_size:
            raise DuetError(f"the tokenizer has {len(tok)} ids but {cfg.model.name}'s text embedding only "
                            f"{cfg.model.backbone.vocab_size} rows; train a smaller BPE (--bpe-vocab)")
        data = GepardData.from_shards(cfg.shards, cfg.manifest, tok, cfg.data, "train", model=cfg.model)
        val = None
        if cfg.data.val_items and cfg.loop.val_every:
            try:
                val = GepardData.from_shards(cfg.shards, cfg.manifest, tok, cfg.data, "val", model=cfg.model,
                                             limit=cfg.data.val_items).batches()
            except DuetError:  # a corpus without a val split: train without validation
                val = None
        if env.is_main:
            print(f"train: {data.summary()}; val: {sum(b.text_ids.shape[0] for b in val) if val else 0} "
                  f"utterances", file=sys.stderr)
        torch.manual_seed(cfg.loop.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
        model = GepardModel(cfg.model)
        if shipped is not None:
            model.load_state_dict(shipped.model.state_dict())
        from duet.data.shards import CodeShards

        shards = CodeShards(cfg.shards)
        extra = {"recipe": "gepard-pretrain", "codec": {"name": shards.codec, "frame_rate": shards.frame_rate},
                 "train_utterances": len(data), "train_frames": data.frames,
                 "init_from": str(init_from) if shipped is not None else None}
        return train(model, GepardPretrain(), data, cfg.loop, run_dir, val_batches=val, resume=resume,
                     stop_at_step=stop_at_step, max_minutes=max_minutes, progress=progress, extra=extra,
                     title=f"{cfg.model.name} ({run_dir.name})")
    finally:
        if env.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def export_gepard(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None,
                  best: bool = True) -> Path:
    """A run's checkpoint -> the shipped format (``duet.gepard.checkpoint``: fp16 weights, config, tokenizer).

    By default the best checkpoint by validation loss (``best/``), else the latest; ``checkpoint`` picks one.
    """
    run_dir = Path(run_dir)
    if checkpoint is not None:
        ckpt = Path(checkpoint)
    else:
        ckpt = (latest_checkpoint(run_dir / BEST) if best else None) or latest_checkpoint(run_dir)
    if ckpt is None:
        raise DuetError(f"{run_dir} has no checkpoint to export")
    try:
        cfg = config_from_json(json.loads((run_dir / "config.json").read_text()))
    except OSError as err:
        raise DuetError(f"{run_dir} is not a Gepard run directory (no config.json)") from err
    model = GepardModel(cfg.model)
    model.load_state_dict(load_weights(ckpt, "model"), strict=True)
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
    return save_gepard(model.eval(), run_dir / "tokenizer.json", out_dir, codec=run_state.get("codec"), info=info)


# ---- command line --------------------------------------------------------------------------------------------------


def add_train_gepard_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``gepard`` and ``gepard-export`` to the ``duet train`` sub-commands."""
    p = subparsers.add_parser("gepard", help="pretrain a Gepard model on encoded codes (DDP under torchrun)")
    p.add_argument("--preset", choices=sorted(PRESETS), default=None, help="model + recipe (omit with --resume)")
    p.add_argument("--shards", default=None, help="encoded codes directory (duet data encode --out)")
    p.add_argument("--manifest", default=None, help="manifest.jsonl (default: the one the shards name)")
    p.add_argument("--tokenizer", default=None,
                   help=f"{TRAIN_BPE} (default), {QWEN3}, or a tokenizer.json; copied into the run directory")
    p.add_argument("--bpe-vocab", type=int, default=None, help="BPE bytes + merges for train-bpe (default 2048)")
    p.add_argument("--out", required=True, help="run directory, e.g. runs/gepard-tiny")
    p.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    p.add_argument("--init-from", default=None,
                   help="warm-start a new run from a shipped model (name or directory): weights and tokenizer")
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
    p.add_argument("--no-augment", action="store_true", default=None, help="no short-register text repetition")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run_train)

    e = subparsers.add_parser("gepard-export", help="write a Gepard run as a shipped model (fp16 safetensors)")
    e.add_argument("run_dir")
    e.add_argument("--out", required=True, help="e.g. checkpoints/gepard-tiny")
    e.add_argument("--checkpoint", default=None, help="a specific checkpoint directory")
    e.add_argument("--latest", action="store_true", help="the latest checkpoint instead of the best by val loss")
    e.set_defaults(func=_run_export)


def config_from_args(args: argparse.Namespace) -> GepardTrainConfig | None:
    """Flags -> GepardTrainConfig (None when resuming without --preset: the run's config is used)."""
    if args.preset is None:
        if not args.resume:
            raise DuetError("give --preset (gepard-tiny, gepard-500m), or --resume an existing run")
        saved = Path(args.out) / "config.json"
        if not saved.is_file():
            raise DuetError(f"cannot resume {args.out}: it has no config.json")
        cfg = config_from_json(json.loads(saved.read_text()))
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
        data["languages"] = tuple(x.strip() for x in args.languages.split(",") if x.strip())
    if args.no_augment:
        data["augment"] = False
    cfg = replace(cfg, loop=replace(cfg.loop, **loop), data=replace(cfg.data, **data))
    if args.bpe_vocab is not None:
        cfg = replace(cfg, bpe_vocab=args.bpe_vocab)
    if args.preset is None and args.shards:
        cfg = replace(cfg, shards=args.shards)
    if args.preset is None and args.manifest:
        cfg = replace(cfg, manifest=args.manifest)
    return cfg


def _run_train(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    result = train_gepard(cfg, args.out, tokenizer=args.tokenizer, resume=args.resume, stop_at_step=args.stop_at,
                          max_minutes=args.minutes, threads=args.threads, progress=not args.quiet,
                          init_from=args.init_from)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, one summary line
        return 0
    last = ", ".join(f"{k} {v:.4f}" for k, v in result.last.items())
    best = f", best val loss {result.best_val:.4f}" if result.best_val is not None else ""
    print(f"{result.run_dir}: step {result.step} ({result.stopped}), {last}{best}, "
          f"{result.skipped_steps} skipped steps")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    path = export_gepard(args.run_dir, args.out, args.checkpoint, best=not args.latest)
    print(f"exported {args.run_dir} -> {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.gepard.train gepard ...`` (what torchrun launches) before ``duet train`` lists it."""
    parser = argparse.ArgumentParser(prog="duet train")
    sub = parser.add_subparsers(dest="train_command", metavar="STAGE")
    sub.required = True
    add_train_gepard_parser(sub)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DuetError as err:
        print(f"duet: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
