"""The one training loop that every duet model family shares; what it optimises plugs in as an :class:`Objective`.

STYLE.md practice 7: one loop, swappable objectives (Gepard pretraining, Luna's diffusion loss and duration
predictor; SFT, DPO, GRPO would join as further objectives), never a copy of the loop per variant. The step below
is an :class:`ObjectiveRunner` on the skeleton every run shares (``duet.train.runner``: resume, seeding, progress,
signals, checkpoint cadence, metrics, plots, validation, early stopping), as the codec's GAN step is.

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

Exact resume (the skeleton's) needs from this step only its data position (epoch, batches consumed) and the
objective's generators: the steps after a resume are bit-identical to an uninterrupted run
(``tests/train/test_loop.py``; same thread count).

Gepard §4 names "the NaN incident and guards" (§4.4, past the end of our copy of the report): the non-finite guard
here is duet's version, skipping the update instead of stopping the run.

Run directory: as ``duet.train.runner`` lays it out, with the objective's plots (Gepard: ``ranks.png``) and
``best/checkpoints/`` (the weights with the lowest validation loss).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence

import torch
import torch.distributed as dist
from torch import nn

from duet.errors import DuetError
from duet.train.distributed import DistEnv, all_max, all_mean, setup_distributed, to_device
from duet.train.runner import Cadence, LoopResult, StepOutput, StepRunner, run_steps
from duet.train.schedule import warmup_cosine


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
        prefix = next((k for k in multipliers if name.startswith(k)), None)
        if prefix is not None:
            hits[prefix] += 1  # frozen parameters count: the prefix still names something
        if not p.requires_grad:
            continue
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


class ObjectiveRunner(StepRunner):
    """The optimizer step of every model family (module docstring): one objective, one AdamW, data from a
    :class:`BatchSource` at position (epoch, batches consumed)."""

    def __init__(self, model: nn.Module, objective: Objective, data: BatchSource, cfg: LoopConfig, env: DistEnv,
                 val_batches: Sequence[Any] | None = None):
        self.model, self.objective, self.data, self.cfg, self.env = model, objective, data, cfg, env
        self.name = objective.name
        self.val_batches = val_batches
        self.optimizer = build_optimizer(model, cfg, objective.lr_multipliers())
        self.train_model: nn.Module = model
        if env.distributed:
            self.train_model = nn.parallel.DistributedDataParallel(
                model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
        self.per_step = env.world_size * cfg.accum_steps
        self.epoch, self.batches_done = 0, 0
        self._plan: Sequence[Any] = ()
        self._plan_epoch = -1
        self._generators = objective.generators()

    def autocast(self) -> contextlib.AbstractContextManager:
        return torch.autocast(self.env.device.type, dtype=torch.bfloat16) if self.cfg.bf16 else contextlib.nullcontext()

    def modules(self) -> dict[str, nn.Module]:
        return {"model": self.model}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def generators(self) -> dict[str, torch.Generator]:
        return self._generators

    def position(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "batches_done": self.batches_done, "accum_steps": self.cfg.accum_steps}

    def restore(self, ckpt: Path) -> dict[str, Any]:
        state = super().restore(ckpt)
        self.epoch, self.batches_done = state["extra"]["epoch"], state["extra"]["batches_done"]
        return state

    def plan(self) -> Sequence[Any]:
        """The current epoch's batches, moving to the next epoch when fewer than one step's are left."""
        while True:
            if self._plan_epoch != self.epoch:
                self._plan, self._plan_epoch = self.data.epoch(self.epoch), self.epoch
                if len(self._plan) < self.per_step:
                    raise DuetError(f"an epoch has {len(self._plan)} batches, fewer than one step needs "
                                    f"({self.env.world_size} ranks x {self.cfg.accum_steps} accumulation steps)")
            if self.batches_done + self.per_step <= len(self._plan):
                return self._plan
            self.epoch, self.batches_done = self.epoch + 1, 0

    def step(self, step: int) -> StepOutput:
        cfg, env = self.cfg, self.env
        plan = self.plan()
        lr = warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.final_lr_ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group["lr_mult"]
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, metric_sums = 0.0, {}
        for a in range(cfg.accum_steps):
            batch = to_device(plan[self.batches_done + a * env.world_size + env.rank], env.device)
            sync = not env.distributed or a == cfg.accum_steps - 1
            with contextlib.nullcontext() if sync else self.train_model.no_sync():
                with self.autocast():
                    loss, values = self.objective.loss(self.train_model, batch)
                (loss / cfg.accum_steps).backward()
            loss_sum += float(loss.detach())
            for k, v in values.items():
                metric_sums[k] = metric_sums.get(k, 0.0) + float(v)
        self.batches_done += self.per_step
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm))
        bad = bool(all_max([float(not (math.isfinite(loss_sum) and math.isfinite(grad_norm)))], env)[0])
        if bad:  # the non-finite guard: no update (weights, moments and AdamW's step count stay as they were)
            self.optimizer.zero_grad(set_to_none=True)
        else:
            self.optimizer.step()
        metrics = {"loss": loss_sum / cfg.accum_steps, **{k: v / cfg.accum_steps for k, v in metric_sums.items()}}
        return StepOutput(metrics=metrics, lr=lr, grad_norm=grad_norm, skipped=bad, info={"epoch": self.epoch})

    def validate(self) -> dict[str, float]:
        if not self.val_batches:
            return {}
        self.model.eval()
        sums: dict[str, float] = {}
        with torch.no_grad(), self.autocast():
            for batch in self.val_batches:
                for k, v in self.objective.evaluate(self.model, to_device(batch, self.env.device)).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
        self.model.train()
        keys = sorted(sums)
        # Every rank computed the same numbers; averaging makes them agree to the bit all the same.
        means = all_mean([sums[k] / len(self.val_batches) for k in keys], self.env)
        return {f"val_{k}": v for k, v in zip(keys, means)}

    def diagnostics(self) -> dict[str, Any]:
        return self.objective.diagnostics(self.model)

    def plot(self, metrics_path: Path, run_dir: Path) -> None:
        self.objective.plot(metrics_path, run_dir)


def train(model: nn.Module, objective: Objective, data: BatchSource, cfg: LoopConfig, run_dir: str | Path, *,
          val_batches: Sequence[Any] | None = None, resume: bool = False, stop_at_step: int | None = None,
          max_minutes: float | None = None, progress: bool = True, extra: dict[str, Any] | None = None,
          title: str = "") -> LoopResult:
    """Train ``model`` on ``data`` with ``objective`` in ``run_dir`` (or continue its latest checkpoint).

    The caller builds the model (seeded, on CPU) before calling; the loop moves it to the device and the skeleton
    (:func:`duet.train.runner.run_steps`) seeds every rank with ``cfg.seed + rank`` for what happens during
    training (dropout, augmentation draws in the objective), or restores everything from the checkpoint on
    ``resume``. ``stop_at_step`` / ``max_minutes`` end this invocation early without touching the LR schedule (set
    by ``cfg.max_steps``). ``extra`` (JSON-able) is stored in every checkpoint's ``state.json``.
    """
    env = setup_distributed(cfg.device)
    try:
        model.to(env.device)
        model.train()
        runner = ObjectiveRunner(model, objective, data, cfg, env, val_batches)
        return run_steps(runner, Cadence.of(cfg), Path(run_dir), env, resume=resume, stop_at_step=stop_at_step,
                         max_minutes=max_minutes, progress=progress, extra=extra, title=title)
    finally:
        if env.owns_group and dist.is_initialized():
            dist.destroy_process_group()
