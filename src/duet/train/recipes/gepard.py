"""The Gepard pretraining recipe: ``duet train gepard`` -> config dataclasses -> the shared loop.

    duet train gepard --preset gepard-tiny --shards data/base/codes-duet-fsq --manifest data/base/manifest.jsonl \\
        --tokenizer train-bpe --out runs/gepard-tiny [--resume] [--steps N] [--batch-frames N] [--lr LR] \\
        [--bf16] [--accum N] [--minutes M]
    torchrun --nproc-per-node 2 -m duet.train.recipes.gepard gepard ...        # DDP (gloo on CPU, nccl on GPU)
    duet train gepard-export runs/gepard-tiny --out checkpoints/gepard-tiny   # duet.train.recipes.gepard_export

The pieces: ``duet.gepard.data`` (shards + manifest text -> length-bucketed ``GepardBatch``es, short-register
repetition), ``duet.train.objectives.gepard`` (the model's loss, split LRs x0.2 / x0.5, effective ranks),
``duet.train.loop`` (AdamW, warm-up + cosine, clipping, bf16, non-finite guard, accumulation, checkpoints,
exact resume, DDP, metrics and plots), ``duet.train.recipe`` (the driver every recipe shares: run directory,
resume merging, the run's tokenizer, data, seeding, loop; the export skeleton; the parsing of the shared flags). This
file holds the config, the presets and the stages' actions, and hands the driver what is Gepard's own; the flags are
``duet.train.flags``, which ``duet train`` builds without importing this module.

Run directory (``--out``): ``config.json`` (the :class:`GepardTrainConfig`; a resumed run keeps it),
``tokenizer.json`` (the run's own copy, trained here with ``--tokenizer train-bpe``), and the loop's
``metrics.jsonl``, ``loss.png``, ``ranks.png``, ``checkpoints/``, ``best/``.

Tokenizer: ``train-bpe`` trains duet's byte-level BPE (``--bpe-vocab`` bytes + merges, default 2048, + 150
service tokens = 2198 ids <= gepard-tiny's 2304 rows) on the normalised training texts; ``qwen3`` uses Qwen3's
(gepard-500m); a path uses that ``tokenizer.json``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from duet.errors import DuetError
from duet.gepard.alignment import GuidedAttentionConfig
from duet.gepard.config import GepardConfig, preset, with_aligned_input, with_voice_prefix
from duet.gepard.data import GepardData, GepardDataConfig
from duet.gepard.model import GepardModel
from duet.train import recipe as driver
from duet.train.flags import add_gepard_stages, run_train, stage_main
from duet.train.loop import LoopConfig
from duet.train.objectives.gepard import GepardPretrain
from duet.train.runner import LoopResult


@dataclass(frozen=True)
class GepardTrainConfig:
    model: GepardConfig
    shards: str  # encoded codes (duet data encode --out)
    manifest: str  # the corpus manifest the shards were encoded from (text, split, language)
    data: GepardDataConfig = field(default_factory=GepardDataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    bpe_vocab: int = 2048  # with --tokenizer train-bpe
    guided: GuidedAttentionConfig = field(default_factory=GuidedAttentionConfig)  # off unless weight > 0
    trained: tuple[str, ...] = ()  # parameter-name prefixes that train, the rest frozen; () trains every weight

    @property
    def name(self) -> str:
        """The model preset (gepard-tiny, gepard-500m): Gepard's recipe presets are its model presets."""
        return self.model.name


def recipe(name: str, shards: str = "", manifest: str = "") -> GepardTrainConfig:
    """Default training settings per model preset (built one by one in ``tests/gepard/test_train_recipe.py``)."""
    model = preset(name)
    if name == "gepard-tiny":
        # fp32 (bf16 autocast is slower on CPUs); 4000 steps is ~19 epochs of the 10-hour base corpus. DESIGN §D:
        # a 5M model on ~2 h of one voice overfit early, hence validation every 200 steps and early stopping.
        loop = LoopConfig(max_steps=4000, lr=1e-3, warmup_steps=200, weight_decay=0.1, log_every=10,
                          val_every=200, diag_every=200, checkpoint_every=500, checkpoint_minutes=10.0,
                          patience=6)
        data = GepardDataConfig(batch_frames=4000, max_batch_size=64)
    else:  # gepard-500m: the report's shape, bf16 on a GPU
        loop = LoopConfig(max_steps=200_000, lr=3e-4, warmup_steps=2000, weight_decay=0.1, bf16=True,
                          log_every=50, val_every=2000, diag_every=2000, checkpoint_every=2000,
                          checkpoint_minutes=30.0)
        data = GepardDataConfig(batch_frames=32_000, max_batch_size=128)
    return GepardTrainConfig(model=model, shards=shards, manifest=manifest, data=data, loop=loop)


def warm_startable(shipped: GepardConfig, run: GepardConfig) -> bool:
    """Whether a run of ``run`` can start from a shipped model of ``shipped``: the same network, except that the run
    may add the voice compressor (its ``qformer.*`` weights start fresh), train another text-dropout rate, and train
    the compressor at another learning rate or L_supcon weight."""
    if shipped.voice is not None:
        if run.voice is None:
            return False  # a trained compressor is never dropped silently
        knobs = {"lr_multiplier": run.voice.lr_multiplier, "supcon_weight": run.voice.supcon_weight}
        if replace(shipped.voice, **knobs) != run.voice:
            return False
    return replace(shipped, voice=run.voice, text_dropout_prob=run.text_dropout_prob) == run


def train_gepard(cfg: GepardTrainConfig | None, run_dir: str | Path, *, tokenizer: str | None = None,
                 resume: bool = False, stop_at_step: int | None = None, max_minutes: float | None = None,
                 threads: int | None = None, progress: bool = True,
                 init_from: str | Path | None = None) -> LoopResult:
    """Train (or resume) Gepard in ``run_dir``; ``cfg`` may be None on resume (the run's config is used).

    ``init_from`` (a shipped model name or directory) warm-starts a new run from its fp16 weights and tokenizer,
    with fresh optimizer state: how training continues on another machine, where only the export travels.
    """
    run_dir = Path(run_dir)
    cfg = driver.run_config(run_dir, cfg, resume, GepardTrainConfig, "Gepard")
    shipped = None
    if init_from is not None and not resume:
        from duet.gepard.checkpoint import load_gepard
        from duet.shipped import resolve_model

        shipped = load_gepard(resolve_model(init_from))
        if not warm_startable(shipped.model.config, cfg.model):
            raise DuetError(f"{init_from} is a different model ({shipped.model.config.name}) than the run's "
                            f"{cfg.model.name}; cannot warm-start")
        tokenizer = str(shipped.path / "tokenizer.json")

    def build() -> GepardModel:
        model = GepardModel(cfg.model)
        if shipped is not None:
            missing, unexpected = model.load_state_dict(shipped.model.state_dict(), strict=False)
            fresh = [k for k in missing if not k.startswith("qformer.")]
            if fresh or unexpected:
                raise DuetError(f"warm start from {init_from}: weights {fresh + unexpected} do not match")
        if cfg.guided.enabled:
            bad = [i for i in cfg.guided.layers if not 0 <= i < cfg.model.backbone.num_layers]
            if bad or cfg.guided.heads > cfg.model.backbone.num_heads:
                raise DuetError(f"guided attention: layers {list(cfg.guided.layers)} and {cfg.guided.heads} heads do "
                                f"not fit {cfg.model.name} ({cfg.model.backbone.num_layers} layers, "
                                f"{cfg.model.backbone.num_heads} heads)")
            model.model.set_attn_implementation("eager")  # the weights are read (duet.gepard.alignment)
        if cfg.trained:
            freeze_except(model, cfg.trained)
        return model

    timed = cfg.model.aligned is not None or (cfg.guided.enabled and cfg.guided.target == "aligned")
    return driver.run_recipe(cfg, run_dir, model=cfg.model, data=GepardData, data_options=lambda _: {"timed": timed},
                             build=build, objective=GepardPretrain(guided=cfg.guided, voice=cfg.model.voice),
                             tokenizer=tokenizer,
                             init_from=None if resume else init_from, resume=resume,
                             stop_at_step=stop_at_step, max_minutes=max_minutes, threads=threads,
                             progress=progress)


def freeze_except(model: GepardModel, prefixes: tuple[str, ...]) -> None:
    """Freeze every parameter whose name starts with none of ``prefixes`` (the optimizer then skips it: its
    ``param_groups`` take trainable parameters only). A prefix that names no parameter is refused."""
    names = [n for n, _ in model.named_parameters()]
    unknown = [p for p in prefixes if not any(n.startswith(p) for n in names)]
    if unknown:
        raise DuetError(f"trained weights {unknown} name no parameter of {model.config.name}")
    for name, param in model.named_parameters():
        param.requires_grad_(name.startswith(prefixes))


# ---- command line --------------------------------------------------------------------------------------------------


def train_stage(args: argparse.Namespace) -> int:
    """``duet train gepard``'s action (its flags: ``duet.train.flags.add_gepard_stages``)."""
    return run_train(train_gepard, config_from_args, True, args)


def config_from_args(args: argparse.Namespace) -> GepardTrainConfig:
    """Flags -> GepardTrainConfig (on a resume without --preset: the run's config, with the given overrides)."""
    cfg = driver.config_from_args(args, recipe, GepardTrainConfig, "gepard-tiny, gepard-500m")
    if args.no_augment:
        cfg = replace(cfg, data=replace(cfg.data, augment=False))
    if args.guided_attention is not None:
        cfg = replace(cfg, guided=replace(cfg.guided, weight=args.guided_attention))
    if args.guided_target is not None:
        cfg = replace(cfg, guided=replace(cfg.guided, target=args.guided_target))
    if args.text_dropout is not None:
        cfg = replace(cfg, model=replace(cfg.model, text_dropout_prob=args.text_dropout))
    if args.aligned is not None and cfg.model.aligned is None:
        cfg = replace(cfg, model=with_aligned_input(cfg.model, window=args.aligned))
    if args.voice_prefix and cfg.model.voice is None:
        cfg = replace(cfg, model=with_voice_prefix(cfg.model))
    if args.voice_lr_multiplier is not None:
        cfg = _with_voice_knob(cfg, "--voice-lr-multiplier", lr_multiplier=args.voice_lr_multiplier)
    if args.supcon_weight is not None:
        cfg = _with_voice_knob(cfg, "--supcon-weight", supcon_weight=args.supcon_weight)
    if args.max_reference_frames is not None:
        cfg = replace(cfg, data=replace(cfg.data, max_reference_frames=args.max_reference_frames))
    return cfg


def _with_voice_knob(cfg: GepardTrainConfig, flag: str, **knob: float) -> GepardTrainConfig:
    """``cfg`` with one field of its voice compressor's config set from ``flag``; one clear line if there is no
    compressor or the value is refused."""
    if cfg.model.voice is None:
        raise DuetError(f"{flag} needs the voice compressor (--voice-prefix)")
    try:
        voice = replace(cfg.model.voice, **knob)
    except ValueError as err:
        raise DuetError(f"{flag}: {err}") from err
    return replace(cfg, model=replace(cfg.model, voice=voice))


def add_train_gepard_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``gepard`` to the ``duet train`` sub-commands, bound to this module (its export, for runs of every
    Gepard stage, is ``duet.train.recipes.gepard_export``)."""
    add_gepard_stages(subparsers, train_stage)


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.train.recipes.gepard gepard ...`` (what torchrun launches)."""
    return stage_main(add_train_gepard_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
