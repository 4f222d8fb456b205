"""The skeleton every duet training run shares, written once: run directory, resume, seeding and RNG states,
progress bar, graceful stops, checkpoint cadence, metrics, plots, validation bookkeeping and early stopping. What
one optimizer step is plugs in as a :class:`StepRunner`.

STYLE.md practices 7 and 12: the families' objective step (``duet.train.loop``: one loss, one AdamW, accumulation,
DDP, the non-finite guard) and the codec's GAN step (``duet.train.codec_loop``: generator and discriminator
optimizers, EMA, random audio crops) are two runners on this one skeleton, not two loops.

One invocation of :func:`run_steps`::

    resume: the runner restores its modules, optimizers and position from ``checkpoints/latest``; the skeleton
            restores its counters and every rank's RNG states. A fresh run seeds rank r with ``seed + r`` (the
            runner's generators with streams derived from it).
    until max_steps (or stop_at_step):
        out = runner.step(step)          the runner sets its LRs and updates; ``step`` counts from 0
        log every log_every steps, on skipped updates and at the end   (metrics averaged over ranks)
        validate every val_every steps   the runner's ``val_key`` picks the best weights and drives patience
        diagnostics every diag_every steps
        checkpoint every checkpoint_every steps, every checkpoint_minutes, at the end and on a stop
    SIGTERM / SIGINT, max_minutes or early stopping: checkpoint, then return.

Run directory (one writer: rank 0)::

    config.json        the run's config (:func:`write_run_config`); a resume reads it back
    metrics.jsonl      one line per logged step, validation and diagnostics lines
    loss.png           every numeric metric, redrawn at each checkpoint (and the runner's own plots)
    checkpoints/       the newest ``keep_checkpoints`` (``duet.train.checkpoint``: atomic); ``latest`` points at one
    best/checkpoints/  the weights with the lowest validation score (when the cadence keeps them)

Exact resume: modules, optimizers, counters and RNG states restored, with a runner whose data position is a
function of its saved :meth:`StepRunner.position` and its generators, the steps after a resume are bit-identical
to an uninterrupted run (``tests/train/test_loop.py``, ``tests/train/test_codec_loop.py``; same thread count).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from duet.config_io import read_json, write_json
from duet.errors import DuetError
from duet.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from duet.train.distributed import DistEnv, all_max, all_mean
from duet.train.interrupt import StopOnSignal
from duet.train.metrics import MetricsLog, read_metrics
from duet.train.plots import plot_metrics
from duet.train.rng import rng_state, seed_all, set_rng_state

BEST = "best"
CONFIG = "config.json"  # the run's config, written at every start; a resume reads it back

C = TypeVar("C")


def read_run_config(run_dir: str | Path, cls: type[C]) -> C:
    """A run's ``config.json`` as the config dataclass ``cls`` (OSError when there is none)."""
    return read_json(Path(run_dir) / CONFIG, cls)


def write_run_config(run_dir: Path, cfg: Any) -> None:
    write_json(run_dir / CONFIG, cfg)


def resume_point(run_dir: Path, resume: bool) -> Path | None:
    """The checkpoint an invocation continues: the latest on a resume (None: there is none yet, start fresh).

    A fresh start in a directory that holds checkpoints is an error: its steps would interleave with the old ones
    (and keep-N would delete the new checkpoints, whose step numbers sort first)."""
    if not resume and latest_checkpoint(run_dir) is not None:
        raise DuetError(f"{run_dir} already holds a run; --resume it or choose another --out")
    return latest_checkpoint(run_dir) if resume else None


@dataclass(frozen=True)
class Cadence:
    """When the skeleton logs, validates, checkpoints and stops. Run configs carry these fields flat (they are part
    of their JSON); :meth:`of` reads them off."""

    max_steps: int  # the end of the LR schedule; an invocation may stop earlier and be resumed
    log_every: int = 10
    val_every: int = 0  # steps between validations; 0 = never
    diag_every: int = 0  # steps between runner diagnostics; 0 = never
    checkpoint_every: int = 0  # steps; 0 = only by time, at the end and on a stop
    checkpoint_minutes: float = 10.0
    keep_checkpoints: int = 2
    keep_best: bool = True  # write ``best/`` whenever the validation score improves
    patience: int = 0  # early stopping after this many validations without improvement; 0 = off
    min_delta: float = 0.0  # an improvement must lower the validation score by more than this
    seed: int = 0

    @classmethod
    def of(cls, config: Any, **overrides: Any) -> "Cadence":
        """The fields of this name that ``config`` has (the rest keep their defaults), then ``overrides``."""
        own = {f.name: getattr(config, f.name) for f in fields(cls) if hasattr(config, f.name)}
        return cls(**{**own, **overrides})


@dataclass
class StepOutput:
    """What one optimizer step reports."""

    metrics: dict[str, float]  # this rank's losses, including ``loss``; averaged over ranks when logged
    lr: float  # the base learning rate of the step
    grad_norm: float  # before clipping
    skipped: bool = False  # the update was skipped (non-finite guard); the same on every rank
    info: dict[str, Any] = field(default_factory=dict)  # logged as it is (the data epoch)


class StepRunner:
    """One training run's optimizer step and what its checkpoints hold; :func:`run_steps` drives it.

    Subclasses implement :meth:`modules`, :meth:`optimizers` and :meth:`step`; the other hooks have defaults.
    """

    name = "train"
    val_key = "val_loss"  # the validation metric (lower is better) behind best weights and early stopping

    def modules(self) -> dict[str, nn.Module]:
        """Checkpoint name -> module, for every module a checkpoint holds (the trained one, EMA shadows, ...)."""
        raise NotImplementedError

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        raise NotImplementedError

    def generators(self) -> dict[str, torch.Generator]:
        """The runner's own RNGs (data draws, noise): seeded per rank on a fresh run, their states saved and restored
        with every checkpoint like the global ones."""
        return {}

    def step(self, step: int) -> StepOutput:
        """Optimizer step number ``step`` (0-based): set the learning rates, update, report."""
        raise NotImplementedError

    def position(self) -> dict[str, Any]:
        """JSON-able state beyond weights, optimizers and RNGs (where the data stands), kept in every checkpoint."""
        return {}

    def restore(self, ckpt: Path) -> dict[str, Any]:
        """Load checkpoint ``ckpt`` (modules, optimizers, what :meth:`position` saved); returns its JSON state."""
        return load_checkpoint(ckpt, self.modules(), self.optimizers(), self.generators())

    def validate(self) -> dict[str, float]:
        """Held-out metrics (``val_*``, including :attr:`val_key`) on every rank; {} when there is no held-out set."""
        return {}

    def diagnostics(self) -> dict[str, Any]:
        """Weight diagnostics logged every ``diag_every`` steps (numbers, or lists of numbers)."""
        return {}

    def plot(self, metrics_path: Path, run_dir: Path) -> None:
        """Plots beyond ``loss.png`` (called whenever the skeleton redraws its own)."""


@dataclass
class LoopResult:
    step: int
    run_dir: Path
    last: dict[str, float]  # metrics of the last logged step (rank-averaged)
    skipped_steps: int  # steps the non-finite guard skipped, over the whole run
    best_val: float | None
    stopped: str  # "end" | "stop_at" | "time" | "signal" | "early_stop"


def run_steps(runner: StepRunner, cadence: Cadence, run_dir: Path, env: DistEnv, *, resume: bool = False,
              stop_at_step: int | None = None, max_minutes: float | None = None, progress: bool = True,
              extra: dict[str, Any] | None = None, title: str = "") -> LoopResult:
    """Drive ``runner`` in ``run_dir`` up to ``cadence.max_steps`` (or continue its latest checkpoint).

    The runner is built (weights seeded) before; the skeleton seeds what happens during training. ``stop_at_step``
    / ``max_minutes`` end this invocation early without touching the LR schedule. ``extra`` (JSON-able) is stored
    in every checkpoint's ``state.json``.
    """
    main = env.is_main
    extra = extra or {}
    ckpt = resume_point(run_dir, resume)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    generators = runner.generators()
    step, skipped, bad_evals, trained_seconds = 0, 0, 0, 0.0
    best_val: float | None = None
    if ckpt is not None:
        state = runner.restore(ckpt)
        saved = state.get("extra", {})
        step = state["step"]
        skipped, bad_evals = saved.get("skipped_steps", 0), saved.get("bad_evals", 0)
        best_val, trained_seconds = saved.get("best_val"), saved.get("train_seconds", 0.0)
        ranks = saved.get("rng")
        if ranks is not None and len(ranks) == env.world_size:
            set_rng_state(ranks[env.rank], env.device, generators)
        elif ranks is not None or env.distributed:  # another world size: rank 0 keeps the checkpoint module's states
            if not main:
                seed_all(cadence.seed + env.rank + 7919 * step, generators)
            else:
                print(f"note: checkpoint written by {len(ranks or [])} ranks, resumed on {env.world_size}; data "
                      "order and RNG streams continue approximately", file=sys.stderr)
        # else: a single-process checkpoint without per-rank states: the checkpoint module restored them all
        if main:
            print(f"resumed {run_dir} at step {step} ({ckpt.name})", file=sys.stderr)
    else:
        seed_all(cadence.seed + env.rank, generators)

    metrics = MetricsLog(run_dir / "metrics.jsonl", resume_step=step if ckpt is not None else None) if main else None
    end = cadence.max_steps if stop_at_step is None else min(stop_at_step, cadence.max_steps)

    def checkpoint() -> None:
        nonlocal last_save
        rng = [rng_state(env.device, generators)]
        if env.distributed:
            rng = [None] * env.world_size
            dist.all_gather_object(rng, rng_state(env.device, generators))  # in-memory transport; the file is JSON
        if main:
            save_checkpoint(run_dir, step, runner.modules(), runner.optimizers(), keep=cadence.keep_checkpoints,
                            extra={**extra, **runner.position(), "skipped_steps": skipped, "bad_evals": bad_evals,
                                   "best_val": best_val, "train_seconds": trained_seconds,
                                   "world_size": env.world_size, "rng": rng})
            plot_metrics(run_dir / "metrics.jsonl", run_dir / "loss.png",
                         keys=plot_keys(run_dir / "metrics.jsonl"), title=title or run_dir.name)
            runner.plot(run_dir / "metrics.jsonl", run_dir)
        last_save = time.time()

    from tqdm import tqdm

    bar = tqdm(total=end, initial=step, desc=title or runner.name, disable=not (progress and main),
               mininterval=1 if sys.stderr.isatty() else 60, dynamic_ncols=True)
    if main and ckpt is None and cadence.diag_every and (diag := runner.diagnostics()):
        metrics.log(0, **diag)  # the curves start at the initialisation
    started = last_save = time.time()
    last: dict[str, float] = {}
    stopped = "end" if end == cadence.max_steps else "stop_at"
    with StopOnSignal() as flag:
        while step < end:
            t0 = time.time()
            out = runner.step(step)
            step += 1
            dt = time.time() - t0
            trained_seconds += dt
            skipped += out.skipped
            out_of_time = max_minutes is not None and time.time() - started > max_minutes * 60
            due = time.time() - last_save > cadence.checkpoint_minutes * 60
            signalled, out_of_time, due = (bool(x) for x in all_max([float(flag.stop), float(out_of_time),
                                                                     float(due)], env))

            if out.skipped or step % cadence.log_every == 0 or step == end:
                keys = sorted(out.metrics, key=lambda k: (k != "loss", k))
                last = dict(zip(keys, all_mean([out.metrics[k] for k in keys], env)))
                if main:
                    line = {**last, "lr": out.lr, "grad_norm": out.grad_norm, "sec_per_step": dt, **out.info}
                    if out.skipped:
                        line.update(skipped=1, skipped_total=skipped)
                        bar.write(f"step {step}: non-finite loss {out.metrics.get('loss')} or gradient norm "
                                  f"{out.grad_norm}; update skipped ({skipped} so far)")
                    metrics.log(step, **line)
            if cadence.val_every and step % cadence.val_every == 0 and (val := runner.validate()):
                score = val[runner.val_key]
                if best_val is None or score < best_val - cadence.min_delta:
                    best_val, bad_evals = score, 0
                    if main and cadence.keep_best:
                        save_checkpoint(run_dir / BEST, step, runner.modules(), {}, keep=1,
                                        extra={**extra, "val_loss": best_val})
                else:
                    bad_evals += 1
                if main:
                    metrics.log(step, **val, **{f"best_{runner.val_key}": best_val})
            if main and cadence.diag_every and step % cadence.diag_every == 0 and (diag := runner.diagnostics()):
                metrics.log(step, **diag)
            if main:
                bar.update(1)
                bar.set_postfix(loss=f"{last.get('loss', float('nan')):.3f}", lr=f"{out.lr:.2e}",
                                gnorm=f"{out.grad_norm:.2f}", refresh=False)
            early = cadence.patience > 0 and bad_evals >= cadence.patience
            stop_now = signalled or out_of_time or early
            if stop_now or step == end or due or (cadence.checkpoint_every and step % cadence.checkpoint_every == 0):
                checkpoint()
            if stop_now:
                stopped = "early_stop" if early else ("signal" if signalled else "time")
                if main:
                    bar.write(f"stopping at step {step} ({stopped.replace('_', ' ')})")
                break
    bar.close()
    return LoopResult(step=step, run_dir=run_dir, last=last, skipped_steps=skipped, best_val=best_val,
                      stopped=stopped)


def plot_keys(metrics_path: Path) -> list[str]:
    """Numeric metrics in reading order: losses first, then validation, optimisation, diagnostics, bookkeeping."""
    seen: dict[str, None] = {}
    for record in read_metrics(metrics_path):
        for key, value in record.items():
            if key not in ("step", "time") and isinstance(value, (int, float)) and not isinstance(value, bool):
                seen.setdefault(key)

    def rank(key: str) -> int:
        if key == "loss":
            return 0
        if key.startswith(("val_", "best_val_")):
            return 2
        if key in ("grad_norm", "lr"):
            return 3
        if key.startswith("rank_"):
            return 4
        if key in ("sec_per_step", "epoch", "skipped", "skipped_total"):
            return 5
        return 1  # the runner's own losses

    return sorted(seen, key=rank)  # stable: reading order within a rank
