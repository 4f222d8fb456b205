"""The codec training loop: ``duet train codec --config fsq|rvq|PATH.json``.

One step (``CodecTrainer.step``): draw B random crops -> codec forward (straight-through quantiser) -> multi-scale
mel + multi-resolution STFT losses (+ the bottleneck's own losses: RVQ commitment, semantic distillation) ->
AdamW. From ``disc_start_step`` on, the multi-period and multi-resolution STFT discriminators join (least-squares
GAN + feature matching), each step first updating the discriminators on real vs detached generated audio.

Run directory layout (``--out runs/NAME``):
  config.json          the CodecTrainConfig this run trains (a resumed run keeps it)
  metrics.jsonl        one line per logged step (losses, lr, grad norm, seconds per step), and val losses
  loss.png             curves, redrawn at every checkpoint
  checkpoints/         atomic checkpoints (``duet.train.checkpoint``), the newest two kept; ``latest`` points
  train.log            (when started with nohup) the progress bar and messages

Exact resume: weights (live and EMA), both optimizers, the global torch RNG (quantiser dropout, dead-code reset),
the crop generator and Python's ``random`` are restored, and the LR is a pure function of the step, so the steps
after a resume are bit-identical to the uninterrupted run (same thread count; ``tests/train/test_codec_loop.py``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from duet.codecs import registry
from duet.errors import DuetError
from duet.train.audio_crops import AudioCrops
from duet.train.checkpoint import latest_checkpoint, load_checkpoint, load_weights, read_state, save_checkpoint
from duet.train.codec_config import CodecTrainConfig, config_from_json, config_to_json
from duet.train.ema import ModelEMA, ema_decay
from duet.train.interrupt import StopOnSignal
from duet.train.metrics import MetricsLog
from duet.train.objectives.codec import SpectralLoss, discriminator_loss, feature_matching_loss, generator_loss
from duet.train.objectives.discriminators import CodecDiscriminator
from duet.train.plots import plot_metrics
from duet.train.schedule import warmup_cosine


class CodecTrainer:
    """Owns one run's model, EMA shadow, losses, discriminators, optimizers and crop generator.

    Checkpoint names: modules ``generator``, ``generator_ema``, ``discriminator``; generator RNG ``data``.
    """

    def __init__(self, cfg: CodecTrainConfig, crops: AudioCrops):
        self.cfg = cfg
        self.crops = crops
        torch.manual_seed(cfg.seed)
        self.model = registry.build(cfg.kind, cfg.model)
        self.frozen: tuple[nn.Module, ...] = ()
        if cfg.decoder_only:
            self.frozen = tuple(m for name, m in self.model.named_children() if name != "decoder")
            for module in self.frozen:
                module.requires_grad_(False)
        self._train_mode()
        self.spectral = SpectralLoss(cfg.model.sample_rate, cfg.loss)
        self.disc = CodecDiscriminator(cfg.disc) if cfg.disc_start_step is not None else None
        self.teacher = None
        if cfg.semantic_teacher:
            from duet.codecs.semantic import WavLMTeacher

            self.teacher = WavLMTeacher.from_pretrained(cfg.semantic_teacher)
            self.model.enable_semantic(self.teacher.hidden_size)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.opt_g = torch.optim.AdamW(trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.ema = ModelEMA(self.model) if cfg.ema_decay else None
        self.opt_d = None
        if self.disc is not None:
            self.opt_d = torch.optim.AdamW(self.disc.parameters(), lr=cfg.disc_lr, betas=cfg.betas,
                                           weight_decay=cfg.weight_decay)
        self.data_gen = torch.Generator().manual_seed(cfg.seed + 1)

    def _train_mode(self) -> None:
        """Training mode, except the frozen encoder and quantiser (no EMA codebook updates, no quantiser dropout)."""
        self.model.train()
        for module in self.frozen:
            module.eval()

    # ---- checkpoint plumbing --------------------------------------------------------------------------------------
    @property
    def modules(self) -> dict[str, nn.Module]:
        mods: dict[str, nn.Module] = {"generator": self.model}
        if self.ema is not None:
            mods["generator_ema"] = self.ema.shadow
        if self.disc is not None:
            mods["discriminator"] = self.disc
        return mods

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        opts: dict[str, torch.optim.Optimizer] = {"generator": self.opt_g}
        if self.opt_d is not None:
            opts["discriminator"] = self.opt_d
        return opts

    def save(self, run_dir: Path, step: int, extra: dict) -> Path:
        return save_checkpoint(run_dir, step, self.modules, self.optimizers, generators={"data": self.data_gen},
                               extra=extra)

    def init_from(self, name_or_path: str | Path) -> None:
        """Warm start from a shipped codec (weights only, fp16 -> fp32; optimizers start fresh): how a run is
        continued on another machine, where only the exported checkpoint travels (it is what git keeps)."""
        shipped = registry.load(name_or_path)
        if shipped.cfg != self.model.cfg:
            raise DuetError(f"{name_or_path} has a different model config than this run's; cannot warm-start")
        self.model.load_state_dict(shipped.state_dict())
        if self.ema is not None:
            self.ema.shadow.load_state_dict(shipped.state_dict())

    def load(self, ckpt: Path) -> dict:
        """Restore everything from ``ckpt``; discriminators switched on after it was written start fresh."""
        has_disc = "discriminator" in read_state(ckpt)["optimizers"]
        mods = {k: v for k, v in self.modules.items() if k != "discriminator" or has_disc}
        return load_checkpoint(ckpt, mods, self.optimizers, generators={"data": self.data_gen})

    # ---- one optimizer step ---------------------------------------------------------------------------------------
    def step(self, step: int) -> dict[str, float]:
        """Optimizer step number ``step`` (0-based); returns its losses and diagnostics as floats."""
        cfg = self.cfg
        lr = warmup_cosine(step, cfg.lr, cfg.warmup_steps, cfg.max_steps, cfg.final_lr_ratio)
        for group in self.opt_g.param_groups:
            group["lr"] = lr
        audio = self.crops.sample(cfg.batch_size, cfg.crop_samples, self.data_gen)  # (B, S)
        if self.teacher is not None:
            frames = audio.shape[-1] // cfg.model.samples_per_frame
            out = self.model(audio, semantic_target=self.teacher(audio, cfg.model.sample_rate, frames))
        else:
            out = self.model(audio)
        losses = self.spectral(out.audio, audio)
        total = losses["spectral"]
        for name, value in out.losses.items():
            losses[name] = value
            total = total + (cfg.semantic_weight * value if name == "semantic" else value)
        if self.disc is not None and step >= cfg.disc_start_step:
            adv = self._adversarial(step, audio, out.audio)
            losses.update(adv)
            total = total + cfg.adv_weight * adv["adv"] + cfg.feature_weight * adv["feat"]
        if not math.isfinite(total.item()):  # before the update: the last checkpoint stays healthy
            raise DuetError(f"loss became {total.item()} at step {step}; resume from the last checkpoint with a "
                            "lower lr")
        self.opt_g.zero_grad(set_to_none=True)
        total.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.opt_g.step()
        if self.ema is not None:
            self.ema.update(self.model, ema_decay(step, cfg.ema_decay))
        result = {k: float(v.detach()) for k, v in losses.items()}
        result.update(loss=total.item(), lr=lr, grad_norm=float(grad_norm))
        return result

    def _adversarial(self, step: int, real: torch.Tensor, fake: torch.Tensor) -> dict[str, torch.Tensor]:
        """Update the discriminators once, then return the generator's adversarial and feature-matching losses."""
        cfg = self.cfg
        d_lr = warmup_cosine(step - cfg.disc_start_step, cfg.disc_lr, cfg.warmup_steps,
                             max(1, cfg.max_steps - cfg.disc_start_step), cfg.final_lr_ratio)
        for group in self.opt_d.param_groups:
            group["lr"] = d_lr
        n = min(cfg.disc.batch, real.shape[0])
        length = min(real.shape[-1], max(1, round(cfg.disc.seconds * cfg.model.sample_rate)))
        real, fake = real[:n, :length], fake[:n, :length]  # (B', S'): see DiscriminatorConfig
        real_logits, _ = self.disc(real)
        fake_logits, _ = self.disc(fake.detach())
        d_loss = discriminator_loss(real_logits, fake_logits)
        self.opt_d.zero_grad(set_to_none=True)
        d_loss.backward()
        torch.nn.utils.clip_grad_norm_(self.disc.parameters(), cfg.grad_clip * 10)
        self.opt_d.step()
        with torch.no_grad():
            _, real_feats = self.disc(real)
        fake_logits, fake_feats = self.disc(fake)
        return {"adv": generator_loss(fake_logits), "feat": feature_matching_loss(real_feats, fake_feats),
                "disc": d_loss.detach()}

    def validate(self, audio: torch.Tensor) -> dict[str, float]:
        """Reconstruction losses on fixed held-out crops: the live model and, if kept, the EMA weights."""
        val = validate(self.model, self.spectral, audio)
        self._train_mode()
        if self.ema is not None:
            val.update({f"{k}_ema": v for k, v in validate(self.ema.shadow, self.spectral, audio).items()})
        return val


@torch.no_grad()
def validate(model: nn.Module, spectral: SpectralLoss, audio: torch.Tensor) -> dict[str, float]:
    """Reconstruction losses of ``model`` in eval mode (all quantisers) on audio (B, S)."""
    model.eval()
    losses = spectral(model(audio).audio, audio)
    return {"val_mel": float(losses["mel"]), "val_stft": float(losses["stft"])}


@dataclass
class TrainResult:
    step: int
    run_dir: Path
    last: dict[str, float]


def resolve_run_config(cfg: CodecTrainConfig | None, run_dir: Path, resume: bool) -> CodecTrainConfig:
    """The config a (resumed) run trains: the run's own, where only max_steps / disc_start_step may change."""
    if resume and (run_dir / "config.json").is_file():
        saved = config_from_json(json.loads((run_dir / "config.json").read_text()))
        if cfg is not None and cfg != saved:
            if replace(cfg, max_steps=saved.max_steps, disc_start_step=saved.disc_start_step) != saved:
                raise DuetError(f"{run_dir} was trained with a different config; resume without --config or "
                                "change only max_steps / disc_start_step")
            saved = replace(saved, max_steps=cfg.max_steps, disc_start_step=cfg.disc_start_step)
        return saved
    if cfg is None:
        raise DuetError("no config: give --config, or --resume a run directory that has config.json")
    return cfg


def train_codec(cfg: CodecTrainConfig | None, manifest: str | Path | None, run_dir: str | Path, resume: bool = False,
                stop_at_step: int | None = None, max_minutes: float | None = None, threads: int | None = None,
                crops: AudioCrops | None = None, val_crops: AudioCrops | None = None,
                progress: bool = True, init_from: str | Path | None = None) -> TrainResult:
    """Train (or resume) a codec in ``run_dir``. ``cfg`` may be None when resuming (the run's config is used).

    ``stop_at_step`` / ``max_minutes`` end this invocation early without touching the LR schedule (that is set by
    ``cfg.max_steps``), so a run can be continued later with ``resume=True``. SIGTERM / SIGINT do the same.
    ``init_from`` (a shipped codec name or directory) warm-starts a new run's weights; ignored when resuming.
    """
    run_dir = Path(run_dir)
    ckpt = latest_checkpoint(run_dir) if resume else None
    cfg = resolve_run_config(cfg, run_dir, resume)
    if cfg.decoder_only and ckpt is None and init_from is None:
        raise DuetError("a decoder-only run fine-tunes a trained codec: give --init-from (e.g. duet-rvq)")
    if threads:
        torch.set_num_threads(threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(config_to_json(cfg), indent=2) + "\n")

    sample_rate, spf = cfg.model.sample_rate, cfg.model.samples_per_frame
    if crops is None:
        if manifest is None:
            raise DuetError("a manifest is needed to load training audio (--manifest)")
        crops = AudioCrops.from_manifest(manifest, sample_rate, "train", progress=progress)
    if val_crops is None and manifest is not None:
        try:
            val_crops = AudioCrops.from_manifest(manifest, sample_rate, "val", max_items=cfg.val_items,
                                                 progress=False)
        except DuetError:  # a corpus without a val split trains without validation
            val_crops = None
    val_len = max(1, round(cfg.val_seconds * sample_rate / spf)) * spf
    val_audio = val_crops.fixed(cfg.val_items, val_len) if val_crops is not None else None

    trainer = CodecTrainer(cfg, crops)
    step, extra = 0, {}
    if ckpt is not None:
        state = trainer.load(ckpt)
        step, extra = state["step"], state.get("extra", {})
        print(f"resumed {run_dir} at step {step} ({ckpt.name})", file=sys.stderr)
    elif init_from is not None:
        trainer.init_from(init_from)
        print(f"{run_dir}: weights warm-started from {init_from}", file=sys.stderr)
    metrics = MetricsLog(run_dir / "metrics.jsonl", resume_step=step if ckpt is not None else None)
    trained_seconds = float(extra.get("train_seconds", 0.0))
    best_val = float(extra.get("best_val", math.inf))

    def checkpoint() -> None:
        trainer.save(run_dir, step, {"train_seconds": trained_seconds, "best_val": best_val, "kind": cfg.kind,
                                     "audio_hours": crops.seconds / 3600})
        plot_metrics(run_dir / "metrics.jsonl", run_dir / "loss.png", title=f"{cfg.kind} ({run_dir.name})")

    from tqdm import tqdm

    end = cfg.max_steps if stop_at_step is None else min(stop_at_step, cfg.max_steps)
    started = last_save = time.time()
    bar = tqdm(total=end, initial=step, desc=cfg.kind, disable=not progress, dynamic_ncols=True,
               mininterval=1 if sys.stderr.isatty() else 60)
    last: dict[str, float] = {}
    with StopOnSignal() as signals:
        while step < end:
            t0 = time.time()
            last = trainer.step(step)
            step += 1
            dt = time.time() - t0
            trained_seconds += dt
            if step % cfg.log_every == 0 or step == end:
                metrics.log(step, sec_per_step=dt, **last)
            if val_audio is not None and step % cfg.val_every == 0:
                val = trainer.validate(val_audio)
                best_val = min(best_val, val.get("val_mel_ema", val["val_mel"]))
                metrics.log(step, **val)
            bar.update(1)
            bar.set_postfix(loss=f"{last['loss']:.3f}", mel=f"{last['mel']:.3f}", refresh=False)
            out_of_time = max_minutes is not None and time.time() - started > max_minutes * 60
            if signals.stop or out_of_time or step == end or time.time() - last_save > cfg.checkpoint_minutes * 60:
                checkpoint()
                last_save = time.time()
            if signals.stop or out_of_time:
                print(f"stopping at step {step} ({'signal' if signals.stop else 'time budget'})", file=sys.stderr)
                break
    bar.close()
    return TrainResult(step=step, run_dir=run_dir, last=last)


def export_codec(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None) -> Path:
    """A training checkpoint -> the shipped format (fp16 ``model.safetensors`` + ``config.json``)."""
    run_dir = Path(run_dir)
    ckpt = Path(checkpoint) if checkpoint else latest_checkpoint(run_dir)
    if ckpt is None:
        raise DuetError(f"{run_dir} has no checkpoint to export")
    cfg = config_from_json(json.loads((run_dir / "config.json").read_text()))
    model = registry.build(cfg.kind, cfg.model)
    # The EMA weights when the run kept them; the semantic projection only serves distillation during training.
    weights = load_weights(ckpt, "generator_ema") or load_weights(ckpt, "generator")
    weights = {k: v for k, v in weights.items() if not k.startswith("semantic_proj.")}
    model.load_state_dict(weights, strict=True)
    state = read_state(ckpt)
    extra = state.get("extra", {})
    best = extra.get("best_val", math.inf)
    info = {"step": state["step"], "train_hours": round(extra.get("train_seconds", 0.0) / 3600, 3),
            "audio_hours": round(extra.get("audio_hours", 0.0), 3), "run": run_dir.name, "checkpoint": ckpt.name,
            "best_val_mel": best if math.isfinite(best) else None, "weights": "ema" if cfg.ema_decay else "live"}
    return registry.save_pretrained(model.eval(), out_dir, info=info)
