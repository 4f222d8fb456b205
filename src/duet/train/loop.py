"""The one training loop that every duet model family shares; what it optimises plugs in as an :class:`Objective`.

STYLE.md practice 7: one loop, swappable objectives (Gepard pretrain today; SFT, DPO, GRPO, Luna's diffusion loss
join as further objectives), never a copy of the loop per variant. The codec keeps its own GAN loop
(``duet.train.codec_loop``: two optimizers, alternating updates), which does not fit one-loss-one-optimizer.

One optimizer step (``step`` counts them from 0; the LR is a pure function of it)::

    lr_g = warmup_cosine(step) * lr_mult_g                   for every parameter group g
    for each of ``accum_steps`` micro-batches:                (DDP: gradients all-reduced on the last one only)
        loss, metrics = objective.loss(model, batch)          (under bf16 autocast when asked)
        (loss / accum_steps).backward()
    grad_norm = clip_grad_norm_(grad_clip)                    the norm *before* clipping is what gets logged
    loss or grad_norm non-finite on any rank -> skip          no optimizer update at all, logged and counted
    else optimizer.step()

Parameter groups (:func:`param_groups`). The model family names LR multipliers by parameter-name prefix
(``Objective.lr_multipliers``; Gepard §3.1 item 4: text embedding x0.2, audio interface x0.5). Weight decay
applies to matrices only: no decay on biases and norm gains (anything 1-D) nor on embedding tables
(``nn.Embedding``), the usual AdamW practice (nanoGPT / nanochat, BERT's "no_decay"): decaying a norm gain pulls
it towards 0 rather than towards its identity value 1, and an embedding row only gets gradient when its token
occurs, so decay would shrink rare rows for nothing.

Gradient accumulation and DDP average per-micro-batch mean losses: the update equals one step on the
concatenated batch exactly when the micro-batches carry equally many scored labels (what ``tests/train`` checks),
and approximately otherwise (length-bucketed batches keep them similar). This is nanoGPT's convention.

Data (:class:`BatchSource`). ``source.epoch(e)`` is the whole epoch's batch list in training order, identical on
every rank and a pure function of ``e`` (a seeded shuffle), so the loader's position is just (epoch, batches
consumed) and resuming needs no loader state. Step ``s`` of an epoch consumes entries
``[s * W * A, (s + 1) * W * A)`` (W ranks, A accumulation steps); rank ``r`` takes every W-th of them, starting at
``r`` (``DistributedSampler``'s striding). A trailing remainder smaller than W * A is dropped.

Distributed. Launched by ``torchrun`` (env ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) the loop joins a process
group (gloo on CPU, nccl on GPU) and wraps the model in ``DistributedDataParallel``; only rank 0 writes
checkpoints, metrics, plots and the progress bar. Validation runs the whole (small) held-out set on every rank, so
best-checkpoint and early-stopping decisions agree without communication.

Checkpoints (``duet.train.checkpoint``: safetensors + JSON, atomic) every ``checkpoint_every`` steps, every
``checkpoint_minutes`` and at the end of an invocation; ``best/`` keeps the weights with the lowest validation loss.
Exact resume restores weights, optimizer state (AdamW moments and step counts), every rank's torch / numpy /
Python RNG states (and CUDA's), the step, and the data position, so the steps after a resume are bit-identical to
an uninterrupted run (``tests/train/test_loop.py``; same thread count).

Gepard §4 names "the NaN incident and guards" (§4.4, past the end of our copy of the report): the non-finite guard
here is duet's version, skipping the update instead of stopping the run.

Run directory: ``metrics.jsonl`` (one line per logged step, validation and diagnostics lines), ``loss.png``
(every numeric metric), objective plots (Gepard: ``ranks.png``), ``checkpoints/`` (newest ``keep_checkpoints``,
``latest`` points at one), ``best/checkpoints/`` (one).
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from duet.errors import DuetError
from duet.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from duet.train.interrupt import StopOnSignal
from duet.train.metrics import MetricsLog, read_metrics
from duet.train.plots import plot_metrics
from duet.train.schedule import warmup_cosine

BEST = "best"


@dataclass(frozen=True)
class LoopConfig:
    """Optimisation, logging and checkpointing of one training run (the model and data have their own configs)."""

    max_steps: int = 10_000  # optimizer steps; the cosine decay ends here (a run may stop earlier and resume)
    lr: float = 1e-3  # peak LR of the base group; groups scale it by their multiplier
    warmup_steps: int = 200
    final_lr_ratio: float = 0.1
    weight_decay: float = 0.1  # matrices only (module docstring)
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    grad_clip: float = 1.0  # max global gradient norm; <= 0 disables clipping (the norm is still logged)
    accum_steps: int = 1
    bf16: bool = False  # bfloat16 autocast for forward and loss (weights and optimizer stay float32)
    log_every: int = 10
    val_every: int = 500  # steps between validations; 0 = never
    diag_every: int = 500  # steps between objective diagnostics (Gepard: effective ranks); 0 = never
    checkpoint_every: int = 1000  # steps; 0 = only by time and at the end
    checkpoint_minutes: float = 10.0
    keep_checkpoints: int = 2
    patience: int = 0  # early stopping after this many validations without improvement; 0 = off
    min_delta: float = 0.0  # an improvement must lower the validation loss by more than this
    seed: int = 0
    device: str = "auto"  # "auto": cuda:LOCAL_RANK when CUDA is available, else cpu

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.accum_steps < 1 or self.log_every < 1:
            raise DuetError("max_steps, accum_steps and log_every must be at least 1")
        if self.lr <= 0 or self.warmup_steps < 0:
            raise DuetError(f"need lr > 0 and warmup_steps >= 0, got {self.lr}, {self.warmup_steps}")


class Objective:
    """What one training stage optimises. Subclasses implement :meth:`loss`; the other hooks have defaults.

    ``model`` is what the loop trains: the family's module, wrapped in ``DistributedDataParallel`` under torchrun,
    so call it (``model(batch)``) rather than reaching into attributes. Hooks that inspect weights
    (:meth:`diagnostics`) get the unwrapped module.
    """

    name = "objective"

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor | float]]:
        """-> (scalar loss with graph, scalar metrics to log); metric keys must not depend on the batch."""
        raise NotImplementedError

    def lr_multipliers(self) -> dict[str, float]:
        """Parameter-name prefix -> LR multiplier (first matching prefix wins; unmatched parameters get 1)."""
        return {}

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batch: Any) -> dict[str, float]:
        """Held-out metrics of one batch (model in eval mode); must contain ``loss``."""
        loss, metrics = self.loss(model, batch)
        return {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}

    def generators(self) -> dict[str, torch.Generator]:
        """The objective's own RNGs (e.g. a diffusion loss's noise draws): the loop seeds them per rank on a fresh
        run and saves / restores their states with every checkpoint, like the global ones."""
        return {}

    def diagnostics(self, model: nn.Module) -> dict[str, Any]:
        """Weight diagnostics logged every ``diag_every`` steps (numbers, or lists of numbers)."""
        return {}

    def plot(self, metrics_path: Path, run_dir: Path) -> None:
        """Extra plots beyond ``loss.png`` (called whenever the loop redraws its own)."""


class BatchSource(Protocol):
    def epoch(self, epoch: int) -> Sequence[Any]:
        """All batches of one epoch in training order; identical on every rank, a pure function of ``epoch``."""
        ...


class FixedBatches:
    """The same list of batches every epoch (tests, tiny runs)."""

    def __init__(self, batches: Sequence[Any]):
        self.batches = list(batches)

    def epoch(self, epoch: int) -> Sequence[Any]:
        return self.batches


@dataclass
class LoopResult:
    step: int
    run_dir: Path
    last: dict[str, float]  # metrics of the last step (rank-averaged)
    skipped_steps: int  # steps the non-finite guard skipped, over the whole run
    best_val: float | None
    stopped: str  # "end" | "stop_at" | "time" | "signal" | "early_stop"


# ---- parameter groups ----------------------------------------------------------------------------------------------


def param_groups(model: nn.Module, weight_decay: float, multipliers: Mapping[str, float] | None = None) -> list[dict]:
    """AdamW parameter groups: one per (LR multiplier, decay or not), in parameter order.

    Each group carries ``lr_mult`` (the loop sets ``lr = schedule(step) * lr_mult``), ``weight_decay`` and a
    readable ``name``. A multiplier prefix that matches no parameter is an error (a renamed module would silently
    train at the full LR otherwise).
    """
    multipliers = dict(multipliers or {})
    no_decay: set[int] = set()
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.ndim < 2 or isinstance(module, nn.Embedding):
                no_decay.add(id(p))
    groups: dict[tuple[str, bool], dict] = {}
    hits = dict.fromkeys(multipliers, 0)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        prefix = next((k for k in multipliers if name.startswith(k)), None)
        if prefix is not None:
            hits[prefix] += 1
        decay = id(p) not in no_decay
        key = (prefix or "", decay)
        if key not in groups:
            label = f"{prefix or 'base'} x{multipliers.get(prefix, 1.0) if prefix else 1.0:g}"
            groups[key] = {"params": [], "lr_mult": float(multipliers[prefix]) if prefix else 1.0,
                           "weight_decay": weight_decay if decay else 0.0,
                           "name": label + ("" if decay else " no-decay")}
        groups[key]["params"].append(p)
    missing = [k for k, n in hits.items() if n == 0]
    if missing:
        raise DuetError(f"LR multiplier prefixes match no parameter: {missing}")
    return list(groups.values())


def build_optimizer(model: nn.Module, cfg: LoopConfig, multipliers: Mapping[str, float] | None = None
                    ) -> torch.optim.AdamW:
    return torch.optim.AdamW(param_groups(model, cfg.weight_decay, multipliers), lr=cfg.lr, betas=cfg.betas,
                             eps=cfg.eps, weight_decay=cfg.weight_decay)


# ---- distributed ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    owns_group: bool  # this process created the process group (and destroys it at the end)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def setup_distributed(device: str = "auto") -> DistEnv:
    """Read torchrun's environment; join a process group when WORLD_SIZE > 1 (nccl on GPU, gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "auto":
        device = f"cuda:{local}" if torch.cuda.is_available() else "cpu"
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    owns = False
    if world > 1 and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        owns = True
    return DistEnv(rank=rank, world_size=world, local_rank=local, device=dev, owns_group=owns)


def to_device(batch: Any, device: torch.device) -> Any:
    """Move a batch (anything with ``.to``, or dicts / lists / tuples of them) to ``device``."""
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device) for v in batch)
    return batch.to(device) if hasattr(batch, "to") else batch


def _all_max(flags: list[float], env: DistEnv) -> list[float]:
    if not env.distributed:
        return flags
    t = torch.tensor(flags, dtype=torch.float64, device=env.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def _all_mean(values: list[float], env: DistEnv) -> list[float]:
    if not env.distributed:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=env.device)
    dist.all_reduce(t)
    return (t / env.world_size).tolist()


# ---- RNG states as JSON (every rank's; the checkpoint module stores rank 0's torch / Python states too) -----------


def _rng_state(device: torch.device, generators: Mapping[str, torch.Generator]) -> dict[str, Any]:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    state = {"torch": torch.get_rng_state().tolist(), "numpy": [name, keys.tolist(), pos, has_gauss, gauss],
             "python": [version, list(py_state), py_gauss]}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device).tolist()
    state["generators"] = {k: g.get_state().tolist() for k, g in generators.items()}
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device, generators: Mapping[str, torch.Generator]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, py_state, py_gauss = state["python"]
    random.setstate((version, tuple(py_state), py_gauss))
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8), device)
    for name, gen in generators.items():
        if name in state.get("generators", {}):
            gen.set_state(torch.tensor(state["generators"][name], dtype=torch.uint8))


# ---- the loop ------------------------------------------------------------------------------------------------------


def train(model: nn.Module, objective: Objective, data: BatchSource, cfg: LoopConfig, run_dir: str | Path, *,
          val_batches: Sequence[Any] | None = None, resume: bool = False, stop_at_step: int | None = None,
          max_minutes: float | None = None, progress: bool = True, extra: dict[str, Any] | None = None,
          title: str = "") -> LoopResult:
    """Train ``model`` on ``data`` with ``objective`` in ``run_dir`` (or continue its latest checkpoint).

    The caller builds the model (seeded, on CPU) before calling; the loop moves it to the device, seeds every rank
    with ``cfg.seed + rank`` for what happens during training (dropout, augmentation draws in the objective),
    and restores everything from the checkpoint on ``resume``. ``stop_at_step`` / ``max_minutes`` end this
    invocation early without touching the LR schedule (set by ``cfg.max_steps``). ``extra`` (JSON-able) is
    stored in every checkpoint's ``state.json``.
    """
    run_dir = Path(run_dir)
    env = setup_distributed(cfg.device)
    try:
        return _train(model, objective, data, cfg, run_dir, env, val_batches=val_batches, resume=resume,
                      stop_at_step=stop_at_step, max_minutes=max_minutes, progress=progress, extra=extra or {},
                      title=title)
    finally:
        if env.owns_group and dist.is_initialized():
            dist.destroy_process_group()


def _train(model, objective, data, cfg, run_dir, env, *, val_batches, resume, stop_at_step, max_minutes, progress,
           extra, title) -> LoopResult:
    main = env.is_main
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    model.to(env.device)
    model.train()
    optimizer = build_optimizer(model, cfg, objective.lr_multipliers())
    modules, optimizers = {"model": model}, {"optimizer": optimizer}

    step, epoch, batches_done = 0, 0, 0
    skipped, bad_evals, trained_seconds = 0, 0, 0.0
    generators = objective.generators()
    best_val: float | None = None
    ckpt = latest_checkpoint(run_dir) if resume else None
    if not resume and latest_checkpoint(run_dir) is not None:  # fresh steps would interleave with the old ones
        raise DuetError(f"{run_dir} already holds checkpoints; resume the run or train into another directory")
    if ckpt is not None:
        state = load_checkpoint(ckpt, modules, optimizers)
        saved = state.get("extra", {})
        step = state["step"]
        epoch, batches_done = saved["epoch"], saved["batches_done"]
        skipped, bad_evals = saved["skipped_steps"], saved["bad_evals"]
        best_val, trained_seconds = saved["best_val"], saved["train_seconds"]
        ranks = saved.get("rng", [])
        if len(ranks) == env.world_size:
            _set_rng_state(ranks[env.rank], env.device, generators)
        else:  # another world size: rank 0's states from the checkpoint module, fresh seeds elsewhere
            _seed_all(cfg.seed + env.rank + 7919 * step, generators, rank0_keeps=env.is_main)
            if main:
                print(f"note: checkpoint written by {len(ranks)} ranks, resumed on {env.world_size}; data order "
                      "and RNG streams continue approximately", file=sys.stderr)
        if main:
            print(f"resumed {run_dir} at step {step} ({ckpt.name})", file=sys.stderr)
    else:
        _seed_all(cfg.seed + env.rank, generators)

    train_model: nn.Module = model
    if env.distributed:
        train_model = nn.parallel.DistributedDataParallel(
            model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
    metrics = MetricsLog(run_dir / "metrics.jsonl", resume_step=step if ckpt is not None else None) if main else None
    per_step = env.world_size * cfg.accum_steps
    end = cfg.max_steps if stop_at_step is None else min(stop_at_step, cfg.max_steps)
    autocast = (lambda: torch.autocast(env.device.type, dtype=torch.bfloat16)) if cfg.bf16 else contextlib.nullcontext

    def checkpoint() -> None:
        nonlocal last_save
        rng = [_rng_state(env.device, generators)]
        if env.distributed:
            rng = [None] * env.world_size
            dist.all_gather_object(rng, _rng_state(env.device, generators))  # in-memory transport; the file is JSON
        if main:
            save_checkpoint(run_dir, step, modules, optimizers, keep=cfg.keep_checkpoints,
                            extra={**extra, "epoch": epoch, "batches_done": batches_done, "skipped_steps": skipped,
                                   "bad_evals": bad_evals, "best_val": best_val, "train_seconds": trained_seconds,
                                   "world_size": env.world_size, "accum_steps": cfg.accum_steps, "rng": rng})
            redraw()
        last_save = time.time()

    def redraw() -> None:
        plot_metrics(run_dir / "metrics.jsonl", run_dir / "loss.png", keys=_plot_keys(run_dir / "metrics.jsonl"),
                     title=title or run_dir.name)
        objective.plot(run_dir / "metrics.jsonl", run_dir)

    def validate() -> dict[str, float]:
        model.eval()
        sums: dict[str, float] = {}
        with torch.no_grad(), autocast():
            for batch in val_batches:
                for k, v in objective.evaluate(model, to_device(batch, env.device)).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
        model.train()
        keys = sorted(sums)
        # Every rank computed the same numbers; averaging makes them agree to the bit all the same.
        means = _all_mean([sums[k] / len(val_batches) for k in keys], env)
        return {f"val_{k}": v for k, v in zip(keys, means)}

    from tqdm import tqdm

    bar = tqdm(total=end, initial=step, desc=title or objective.name, disable=not (progress and main),
               mininterval=1 if sys.stderr.isatty() else 60, dynamic_ncols=True)
    if main and ckpt is None and cfg.diag_every and (diag := objective.diagnostics(model)):
        metrics.log(0, **diag)  # the curves start at the initialisation
    started = last_save = time.time()
    last: dict[str, float] = {}
    stopped = "end" if end == cfg.max_steps else "stop_at"
    plan: Sequence[Any] | None = None
    plan_epoch = -1
    with StopOnSignal() as flag:
        while step < end:
            if plan_epoch != epoch:
                plan, plan_epoch = data.epoch(epoch), epoch
                if len(plan) < per_step:
                    raise DuetError(f"an epoch has {len(plan)} batches, fewer than one step needs "
                                    f"({env.world_size} ranks x {cfg.accum_steps} accumulation steps)")
            if batches_done + per_step > len(plan):
                epoch, batches_done = epoch + 1, 0
                continue
            t0 = time.time()
            lr = warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.final_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = lr * group["lr_mult"]
            optimizer.zero_grad(set_to_none=True)
            loss_sum, metric_sums = 0.0, {}
            for a in range(cfg.accum_steps):
                batch = to_device(plan[batches_done + a * env.world_size + env.rank], env.device)
                sync = not env.distributed or a == cfg.accum_steps - 1
                with contextlib.nullcontext() if sync else train_model.no_sync():
                    with autocast():
                        loss, values = objective.loss(train_model, batch)
                    (loss / cfg.accum_steps).backward()
                loss_sum += float(loss.detach())
                for k, v in values.items():
                    metric_sums[k] = metric_sums.get(k, 0.0) + float(v)
            batches_done += per_step
            max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm))
            bad = not (math.isfinite(loss_sum) and math.isfinite(grad_norm))
            out_of_time = max_minutes is not None and time.time() - started > max_minutes * 60
            due = time.time() - last_save > cfg.checkpoint_minutes * 60
            bad, signalled, out_of_time, due = (bool(x) for x in _all_max(
                [float(bad), float(flag.stop), float(out_of_time), float(due)], env))
            if bad:  # the non-finite guard: no update (weights, moments and AdamW's step count stay as they were)
                optimizer.zero_grad(set_to_none=True)
                skipped += 1
            else:
                optimizer.step()
            step += 1
            dt = time.time() - t0
            trained_seconds += dt

            if bad or step % cfg.log_every == 0 or step == end:
                keys = sorted(metric_sums)
                means = _all_mean([loss_sum / cfg.accum_steps] + [metric_sums[k] / cfg.accum_steps for k in keys],
                                  env)
                last = {"loss": means[0], **dict(zip(keys, means[1:]))}
                if main:
                    fields = {**last, "lr": lr, "grad_norm": grad_norm, "sec_per_step": dt, "epoch": epoch}
                    if bad:
                        fields.update(skipped=1, skipped_total=skipped)
                        bar.write(f"step {step}: non-finite loss {loss_sum} or gradient norm {grad_norm}; "
                                  f"update skipped ({skipped} so far)")
                    metrics.log(step, **fields)
            if val_batches and cfg.val_every and step % cfg.val_every == 0:
                val = validate()
                improved = best_val is None or val["val_loss"] < best_val - cfg.min_delta
                if improved:
                    best_val, bad_evals = val["val_loss"], 0
                    if main:
                        save_checkpoint(run_dir / BEST, step, modules, {}, keep=1,
                                        extra={**extra, "val_loss": best_val})
                else:
                    bad_evals += 1
                if main:
                    metrics.log(step, **val, best_val_loss=best_val)
            if main and cfg.diag_every and step % cfg.diag_every == 0 and (diag := objective.diagnostics(model)):
                metrics.log(step, **diag)
            if main:
                bar.update(1)
                bar.set_postfix(loss=f"{last.get('loss', float('nan')):.3f}", lr=f"{lr:.2e}",
                                gnorm=f"{grad_norm:.2f}", refresh=False)
            early = cfg.patience > 0 and bad_evals >= cfg.patience
            stop_now = signalled or out_of_time or early
            if stop_now or step == end or due or (cfg.checkpoint_every and step % cfg.checkpoint_every == 0):
                checkpoint()
            if stop_now:
                stopped = "early_stop" if early else ("signal" if signalled else "time")
                if main:
                    bar.write(f"stopping at step {step} ({stopped.replace('_', ' ')})")
                break
    bar.close()
    return LoopResult(step=step, run_dir=run_dir, last=last, skipped_steps=skipped, best_val=best_val,
                      stopped=stopped)


def _plot_keys(metrics_path: Path) -> list[str]:
    """Numeric metrics in reading order: losses first, then validation, optimisation, diagnostics, bookkeeping."""
    seen: dict[str, None] = {}
    for record in read_metrics(metrics_path):
        for key, value in record.items():
            if key not in ("step", "time") and isinstance(value, (int, float)) and not isinstance(value, bool):
                seen.setdefault(key)

    def rank(key: str) -> int:
        if key == "loss":
            return 0
        if key.startswith("val_") or key == "best_val_loss":
            return 2
        if key in ("grad_norm", "lr"):
            return 3
        if key.startswith("rank_"):
            return 4
        if key in ("sec_per_step", "epoch", "skipped", "skipped_total"):
            return 5
        return 1  # the objective's own losses

    return sorted(seen, key=rank)  # stable: reading order within a rank


def _seed_all(seed: int, generators: Mapping[str, torch.Generator], rank0_keeps: bool = False) -> None:
    if rank0_keeps:
        return
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    for i, gen in enumerate(generators.values()):  # streams distinct from the global one and from each other
        gen.manual_seed(seed + 1_000_003 * (i + 1))
