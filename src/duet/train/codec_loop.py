"""The codec training loop: ``duet train codec --config fsq|rvq|PATH.json``.

One step (``CodecTrainer.step``): draw B random crops -> codec forward (straight-through quantiser) -> multi-scale
mel + multi-resolution STFT losses (+ the bottleneck's own losses: RVQ commitment, semantic distillation) ->
AdamW. From ``disc_start_step`` on, the multi-period and multi-resolution STFT discriminators join (least-squares
GAN + feature matching), each step first updating the discriminators on real vs detached generated audio.

The step is a :class:`CodecTrainer`, a ``duet.train.runner.StepRunner``: the skeleton every duet run shares
drives it (resume, seeding, progress bar, signals, checkpoint cadence, metrics, plots, validation), as it drives the
families' objective step.

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

import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from duet.codecs import registry
from duet.errors import DuetError
from duet.train.audio_crops import AudioCrops
from duet.train.checkpoint import latest_checkpoint, load_checkpoint, load_weights, read_state
from duet.train.codec_config import CodecTrainConfig
from duet.train.distributed import single_process
from duet.train.ema import ModelEMA, ema_decay
from duet.train.objectives.codec import SpectralLoss, discriminator_loss, feature_matching_loss, generator_loss
from duet.train.objectives.discriminators import CodecDiscriminator
from duet.train.runner import (
    CONFIG,
    Cadence,
    LoopResult,
    StepOutput,
    StepRunner,
    read_run_config,
    resume_point,
    run_steps,
    write_run_config,
)
from duet.train.schedule import warmup_cosine


class CodecTrainer(StepRunner):
    """Owns one run's model, EMA shadow, losses, discriminators, optimizers, crop generator and held-out audio.

    Checkpoint names: modules ``generator``, ``generator_ema``, ``discriminator``; optimizers ``generator``,
    ``discriminator``; generator RNG ``data`` (seeded by the skeleton).
    """

    def __init__(self, cfg: CodecTrainConfig, crops: AudioCrops, val_audio: torch.Tensor | None = None):
        self.cfg = cfg
        self.crops = crops
        self.val_audio = val_audio  # (B, S) fixed held-out crops, or None: no validation
        self.name = cfg.kind
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
            from duet.codecs.semantic import load_teacher

            self.teacher = load_teacher(cfg.semantic_teacher)
            self.model.enable_semantic(self.teacher.hidden_size)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.opt_g = torch.optim.AdamW(trainable, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.ema = ModelEMA(self.model) if cfg.ema_decay else None
        self.opt_d = None
        if self.disc is not None:
            self.opt_d = torch.optim.AdamW(self.disc.parameters(), lr=cfg.disc_lr, betas=cfg.betas,
                                           weight_decay=cfg.weight_decay)
        self.data_gen = torch.Generator()

    def _train_mode(self) -> None:
        """Training mode, except the frozen encoder and quantiser (no EMA codebook updates, no quantiser dropout)."""
        self.model.train()
        for module in self.frozen:
            module.eval()

    @property
    def val_key(self) -> str:
        """The validation score that marks the best step: the mel loss of the weights the export takes."""
        return "val_mel_ema" if self.ema is not None else "val_mel"

    # ---- checkpoint plumbing --------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        mods: dict[str, nn.Module] = {"generator": self.model}
        if self.ema is not None:
            mods["generator_ema"] = self.ema.shadow
        if self.disc is not None:
            mods["discriminator"] = self.disc
        return mods

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        opts: dict[str, torch.optim.Optimizer] = {"generator": self.opt_g}
        if self.opt_d is not None:
            opts["discriminator"] = self.opt_d
        return opts

    def generators(self) -> dict[str, torch.Generator]:
        return {"data": self.data_gen}

    def init_from(self, name_or_path: str | Path) -> None:
        """Warm start from a shipped codec (weights only, fp16 -> fp32; optimizers start fresh): how a run is
        continued on another machine, where only the exported checkpoint travels (it is what git keeps)."""
        shipped = registry.load(name_or_path)
        if _weight_shapes(shipped) != _weight_shapes(self.model) or not _same_but_layout(shipped.cfg, self.model.cfg):
            raise DuetError(f"{name_or_path} has a different model config than this run's; cannot warm-start")
        for module in (self.model, *((self.ema.shadow,) if self.ema is not None else ())):
            missing, unexpected = module.load_state_dict(shipped.state_dict(), strict=False)
            assert not unexpected and all(_training_only(k) for k in missing), (missing, unexpected)

    def restore(self, ckpt: Path) -> dict[str, Any]:
        """Restore everything from ``ckpt``; discriminators switched on after it was written start fresh."""
        has_disc = "discriminator" in read_state(ckpt)["optimizers"]
        mods = {k: v for k, v in self.modules().items() if k != "discriminator" or has_disc}
        return load_checkpoint(ckpt, mods, self.optimizers(), self.generators())

    # ---- one optimizer step ---------------------------------------------------------------------------------------
    def step(self, step: int) -> StepOutput:
        """Optimizer step number ``step`` (0-based): its losses, LR and gradient norm."""
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
        metrics = {"loss": total.item(), **{k: float(v.detach()) for k, v in losses.items()}}
        return StepOutput(metrics=metrics, lr=lr, grad_norm=float(grad_norm))

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

    def validate(self) -> dict[str, float]:
        """Reconstruction losses on the fixed held-out crops: the live model and, if kept, the EMA weights."""
        if self.val_audio is None:
            return {}
        val = validate(self.model, self.spectral, self.val_audio)
        self._train_mode()
        if self.ema is not None:
            val.update({f"{k}_ema": v for k, v in validate(self.ema.shadow, self.spectral, self.val_audio).items()})
        return val


@torch.no_grad()
def validate(model: nn.Module, spectral: SpectralLoss, audio: torch.Tensor) -> dict[str, float]:
    """Reconstruction losses of ``model`` in eval mode (all quantisers) on audio (B, S)."""
    model.eval()
    losses = spectral(model(audio).audio, audio)
    return {"val_mel": float(losses["mel"]), "val_stft": float(losses["stft"])}


def resolve_run_config(cfg: CodecTrainConfig | None, run_dir: Path, resume: bool) -> CodecTrainConfig:
    """The config a (resumed) run trains: the run's own, where only max_steps / disc_start_step may change."""
    if resume and (run_dir / CONFIG).is_file():
        saved = read_run_config(run_dir, CodecTrainConfig)
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
                progress: bool = True, init_from: str | Path | None = None) -> LoopResult:
    """Train (or resume) a codec in ``run_dir``. ``cfg`` may be None when resuming (the run's config is used).

    ``stop_at_step`` / ``max_minutes`` end this invocation early without touching the LR schedule (that is set by
    ``cfg.max_steps``), so a run can be continued later with ``resume=True``. SIGTERM / SIGINT do the same.
    ``init_from`` (a shipped codec name or directory) warm-starts a new run's weights; ignored when resuming.
    """
    run_dir = Path(run_dir)
    ckpt = resume_point(run_dir, resume)
    cfg = resolve_run_config(cfg, run_dir, resume)
    if cfg.decoder_only and ckpt is None and init_from is None:
        raise DuetError("a decoder-only run fine-tunes a trained codec: give --init-from (e.g. duet-rvq)")
    if threads:
        torch.set_num_threads(threads)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_config(run_dir, cfg)

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

    trainer = CodecTrainer(cfg, crops, val_audio)
    if ckpt is None and init_from is not None:
        trainer.init_from(init_from)
        print(f"{run_dir}: weights warm-started from {init_from}", file=sys.stderr)
    # No best/ copy: the export takes the latest EMA weights; the best val mel is kept for its provenance.
    return run_steps(trainer, Cadence.of(cfg, keep_best=False), run_dir, single_process(), resume=resume,
                     stop_at_step=stop_at_step, max_minutes=max_minutes, progress=progress,
                     extra={"kind": cfg.kind, "audio_hours": crops.seconds / 3600},
                     title=f"{cfg.kind} ({run_dir.name})")


def export_codec(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None) -> Path:
    """A training checkpoint -> the shipped format (fp16 ``model.safetensors`` + ``config.json``)."""
    run_dir = Path(run_dir)
    ckpt = Path(checkpoint) if checkpoint else latest_checkpoint(run_dir)
    if ckpt is None:
        raise DuetError(f"{run_dir} has no checkpoint to export")
    cfg = read_run_config(run_dir, CodecTrainConfig)
    model = registry.build(cfg.kind, cfg.model)
    # The EMA weights when the run kept them; the semantic projection only serves distillation during training.
    weights = load_weights(ckpt, "generator_ema") or load_weights(ckpt, "generator")
    weights = {k: v for k, v in weights.items() if not _training_only(k)}
    model.load_state_dict(weights, strict=True)
    state = read_state(ckpt)
    extra = state.get("extra", {})
    best = extra.get("best_val")  # None (older checkpoints: inf) before any validation
    info = {"step": state["step"], "train_hours": round(extra.get("train_seconds", 0.0) / 3600, 3),
            "audio_hours": round(extra.get("audio_hours", 0.0), 3), "run": run_dir.name, "checkpoint": ckpt.name,
            "best_val_mel": best if best is not None and math.isfinite(best) else None,
            "weights": "ema" if cfg.ema_decay else "live"}
    return registry.save_pretrained(model.eval(), out_dir, info=info)


def _training_only(key: str) -> bool:
    """The semantic projection only serves distillation during training: a shipped codec has none."""
    return key.startswith("semantic_proj.")


def _weight_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every weight's shape but the training-only ones: what a warm start must match."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items() if not _training_only(k)}


def _same_but_layout(a: Any, b: Any) -> bool:
    """Configs equal except for the decoder's causal layout (same weights, read as causal convolutions): how a
    causal decoder is warm-started from a shipped non-causal codec."""
    if hasattr(a, "causal_decoder") and hasattr(b, "causal_decoder"):
        a = replace(a, causal_decoder=b.causal_decoder)
    return a == b
