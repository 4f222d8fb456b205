"""RL post-training of a Luna-TTS model with GRPO over its denoising trajectories (Luna report §4): ``duet train
luna-grpo``.

    duet train luna-grpo --init-from checkpoints/luna-tiny --manifest ~/.cache/duet/corpora/joe/manifest.jsonl \\
        --out runs/luna-grpo [--group-size 4] [--prompts-per-step 2] [--steps 200] [--lr 1e-5] [--resume]
    duet train luna-grpo-export runs/luna-grpo --out checkpoints/luna-tiny-grpo   # a shipped Luna, as luna-export

The pieces: prompts are the texts of a manifest split (``--split``, training text by default; held-out ``--val-split``
prompts for validation), each with its own recording as the reference voice of the SIM reward (``--no-sim``: WER
alone); rollouts, rewards and the update are ``duet.train.grpo_loop`` (``duet.luna.trajectory``,
``duet.train.rewards``, ``duet.train.objectives.luna_grpo``); Whisper WER and speaker similarity are ``duet eval
run``'s metrics (``duet.metrics.clip.ClipScorer``); the run directory, checkpoints (safetensors + JSON), exact resume,
metrics and plots are the shared skeleton's (``duet.train.runner``). Only the acoustic model trains; the duration
predictor comes with it unchanged.

Defaults where the report is silent (documented in ``duet.train.objectives.luna_grpo`` and ``duet.train.rewards``):
eps 0.2, no KL term (``--kl-coef`` adds one to the ``--init-from`` model as the frozen reference), one update per
rollout (``--ppo-epochs``), exact WER ties, and the decoder's sampling for rollouts: 16 steps, temperature 1, no top-k, CFG 2
(the report's RL decoding settings are not given; sampling at temperature 1 keeps the candidates of a group apart).

Run directory (``--out``): ``config.json`` (:class:`LunaGRPOConfig`, with the model's shape copied from the
``--init-from`` model so an export needs nothing else), ``tokenizer.json`` (the model's), ``metrics.jsonl``
(``loss``, ``surrogate``, ``kl``, ``ratio``, ``clip_fraction``, ``out_of_domain``, ``wer``, ``sim``,
``groups_kept`` / ``groups_skipped``; ``val_wer`` / ``val_sim``), ``loss.png``, ``checkpoints/``, ``best/`` (the
lowest held-out WER).

Not wired: cloning prompts (an acoustic prompt grid in the condition); the trajectory, replay and loss take any
``LunaInputs``, prompt grid included, but the prompt set here is text with a reference recording for SIM.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from duet.command import comma_list
from duet.errors import DuetError
from duet.luna.bundle import LunaBundle
from duet.luna.config import LunaConfig
from duet.luna.decode import DecodeConfig
from duet.luna.duration import DurationConfig
from duet.luna.model import LunaModel
from duet.metrics.clip import ClipScoreConfig, ClipScorer, ClipScoring
from duet.train import recipe as driver
from duet.train.distributed import single_process
from duet.train.flags import LUNA_GRPO, add_luna_grpo_stages, run_export, stage_main, summary_line
from duet.train.grpo_loop import GRPOPrompt, GRPOStepConfig, GRPOTrainer
from duet.train.loop import LoopConfig
from duet.train.runner import CONFIG, Cadence, LoopResult, read_run_config, resume_point, run_steps, write_run_config


@dataclass(frozen=True)
class PromptSelection:
    split: str = "train"  # the manifest split whose texts are the training prompts
    val_split: str = "val"  # held-out prompts for validation ("" = none)
    val_items: int = 8  # the first N held-out utterances in id-hash order (speakers spread)
    languages: tuple[str, ...] = ("en",)  # manifest languages to keep; () = all
    held_out_speakers: tuple[str, ...] = ()  # speakers whose utterances are never prompts
    max_items: int = 0  # the first N training prompts in id-hash order; 0 = all
    similarity: bool = True  # each prompt's own recording is the reference voice of the SIM reward (off: no SIM)


@dataclass(frozen=True)
class LunaGRPOConfig:
    init_from: str  # the shipped Luna model that starts the policy (and is the KL reference)
    manifest: str  # the corpus whose texts are the prompts
    model: LunaConfig | None = None  # the policy's shape, copied from ``init_from`` at the start of the run
    duration: DurationConfig | None = None
    codec: str = ""  # the codec that turns grids into audio for the reward; "" = the one the model names
    name: str = LUNA_GRPO
    prompts: PromptSelection = field(default_factory=PromptSelection)
    decode: DecodeConfig = DecodeConfig(steps=16, temperature=1.0, top_k=0, cfg_scale=2.0)
    step: GRPOStepConfig = field(default_factory=GRPOStepConfig)
    rewards: ClipScoreConfig = field(default_factory=ClipScoreConfig)  # the Whisper and speaker models
    loop: LoopConfig = field(default_factory=lambda: LoopConfig(
        max_steps=200, lr=1e-5, warmup_steps=10, weight_decay=0.0, log_every=1, val_every=25, diag_every=0,
        checkpoint_every=25, checkpoint_minutes=10.0))


def read_prompts(manifest: str | Path, split: str, selection: PromptSelection, limit: int = 0) -> list[GRPOPrompt]:
    """A split's utterances -> prompts (text, its emotion, its recording as reference when SIM is on and the file
    exists), in id-hash order, the first ``limit`` (0: all). Texts with no word left after WER normalisation are left out."""
    from duet.data.manifest import audio_path
    from duet.data.utterances import hash_order, select_utterances
    from duet.metrics.wer import normalize_text

    prompts = []
    for utt in hash_order(select_utterances(manifest, split, selection)):
        if not normalize_text(utt.text):
            continue
        wav = audio_path(manifest, utt)
        reference = wav if selection.similarity and wav.is_file() else None
        prompts.append(GRPOPrompt(text=utt.text, reference=reference, language=utt.language,
                                  emotion=utt.emotion or None))
        if limit and len(prompts) == limit:
            break
    return prompts


def _merge_resume(saved: LunaGRPOConfig, cfg: LunaGRPOConfig | None) -> LunaGRPOConfig:
    """On a resume the run's config wins; only the data paths and the loop fields that do not change the past may
    differ (``duet.train.recipe.RESUMABLE_LOOP_FIELDS``)."""
    if cfg is None:
        return saved
    fields = driver.RESUMABLE_LOOP_FIELDS
    moved = replace(cfg, model=saved.model, duration=saved.duration, manifest=saved.manifest,
                    init_from=saved.init_from, codec=saved.codec,
                    loop=replace(cfg.loop, **{k: getattr(saved.loop, k) for k in fields}))
    if moved != saved:
        raise DuetError(f"the run was trained with other GRPO settings; on --resume only the paths and "
                        f"{', '.join(fields)} may change")
    return replace(saved, manifest=cfg.manifest, init_from=cfg.init_from, codec=cfg.codec or saved.codec,
                   loop=replace(saved.loop, **{k: getattr(cfg.loop, k) for k in fields}))


def train_luna_grpo(cfg: LunaGRPOConfig | None, run_dir: str | Path, *, resume: bool = False,
                    stop_at_step: int | None = None, max_minutes: float | None = None, threads: int | None = None,
                    progress: bool = True, scorer: ClipScoring | None = None) -> LoopResult:
    """GRPO-train (or resume) the ``cfg.init_from`` Luna in ``run_dir``; ``cfg`` may be None on a resume.

    ``scorer`` replaces the Whisper / speaker-similarity scorer (``duet.metrics.clip.ClipScorer``), e.g. a fast fake
    in tests: ``scorer.score(audio, sample_rate, text, reference) -> ClipScore``.
    """
    from duet.codecs import load as load_codec
    from duet.luna.shipped import load_luna
    from duet.shipped import resolve_model
    from duet.text import get_tokenizer

    run_dir = Path(run_dir)
    if threads:
        torch.set_num_threads(threads)
    ckpt = resume_point(run_dir, resume)
    if resume and (run_dir / CONFIG).is_file():
        cfg = _merge_resume(read_run_config(run_dir, LunaGRPOConfig), cfg)
    if cfg is None:
        raise DuetError("no config: give --init-from and --manifest, or --resume a run that has config.json")
    # The model the run starts from: the policy's weights on a fresh run, the KL reference on any run.
    shipped = None
    if ckpt is None or cfg.step.grpo.kl_coef > 0:
        shipped = load_luna(resolve_model(cfg.init_from))
    if ckpt is None:  # a fresh run: the policy's shape and tokenizer come from the model it starts from
        bundle = shipped.bundle
        cfg = replace(cfg, model=bundle.acoustic.config, duration=bundle.duration.config,
                      codec=cfg.codec or shipped.codec.get("name") or "duet-rvq")
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shipped.path / "tokenizer.json", run_dir / "tokenizer.json")
    else:  # the checkpoint restores the weights
        if cfg.model is None or cfg.duration is None:
            raise DuetError(f"{run_dir}/{CONFIG} names no model shape")
        bundle = LunaBundle(cfg.model, cfg.duration)
    write_run_config(run_dir, cfg)

    device = single_process(_device(cfg.loop.device)).device
    reference = None
    if shipped is not None and cfg.step.grpo.kl_coef > 0:
        if shipped.bundle.acoustic.config != cfg.model:
            raise DuetError(f"{cfg.init_from} is not the model this run started from; it cannot be the reference")
        reference = LunaModel(cfg.model)
        reference.load_state_dict(shipped.bundle.acoustic.state_dict())  # before any update of this invocation
        reference.to(device).eval().requires_grad_(False)
    bundle.to(device)
    codec = load_codec(cfg.codec, device=device)
    tokenizer = get_tokenizer(run_dir / "tokenizer.json")
    prompts = read_prompts(cfg.manifest, cfg.prompts.split, cfg.prompts, cfg.prompts.max_items)
    val_prompts = []
    if cfg.prompts.val_split and cfg.prompts.val_items and cfg.loop.val_every:
        val_prompts = read_prompts(cfg.manifest, cfg.prompts.val_split, cfg.prompts, cfg.prompts.val_items)
    if scorer is None:
        scorer = ClipScorer(cfg.rewards)
    trainer = GRPOTrainer(bundle, tokenizer, codec, scorer, prompts, cfg.decode, cfg.step, cfg.loop,
                          val_prompts=val_prompts, reference=reference)
    print(f"luna-grpo: {len(prompts)} training prompts ({cfg.prompts.split}), {len(val_prompts)} held-out "
          f"({cfg.prompts.val_split or 'none'}), G = {cfg.step.group_size}", file=sys.stderr)
    extra = {"recipe": LUNA_GRPO, "init_from": cfg.init_from, "train_prompts": len(prompts),
             "codec": {"name": cfg.codec, "frame_rate": float(codec.frame_rate)}}
    return run_steps(trainer, Cadence.of(cfg.loop), run_dir, single_process(str(device)), resume=resume,
                     stop_at_step=stop_at_step, max_minutes=max_minutes, progress=progress, extra=extra,
                     title=f"{LUNA_GRPO} ({run_dir.name})")


def _device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def export_luna_grpo(run_dir: str | Path, out_dir: str | Path, checkpoint: str | Path | None = None,
                     best: bool = True) -> Path:
    """A GRPO run's checkpoint (by default the best by held-out WER, else the latest) -> a shipped Luna model,
    written as ``luna-export`` writes one (``duet.luna.shipped.save_luna``)."""
    from duet.luna.shipped import save_luna

    def build(cfg: LunaGRPOConfig) -> LunaBundle:
        if cfg.model is None or cfg.duration is None:
            raise DuetError(f"{run_dir}/{CONFIG} names no model shape")
        return LunaBundle(cfg.model, cfg.duration)

    run = driver.load_run(run_dir, LunaGRPOConfig, build, "Luna GRPO", checkpoint, best)
    info = {"preset": LUNA_GRPO, **run.info, "init_from": run.state.get("init_from")}
    return save_luna(run.module, run.tokenizer, out_dir, codec=run.codec, info=info)


# ---- command line --------------------------------------------------------------------------------------------------


def config_from_args(args: argparse.Namespace) -> LunaGRPOConfig | None:
    """Flags -> LunaGRPOConfig; on a resume without --init-from, None (the run's config is used as saved)."""
    if args.init_from is None:
        if not args.resume:
            raise DuetError("give --init-from (the Luna model to post-train), or --resume an existing run")
        if not (Path(args.out) / CONFIG).is_file():
            raise DuetError(f"cannot resume {args.out}: it has no config.json")
        return _overrides(read_run_config(args.out, LunaGRPOConfig), args)
    if not args.manifest:
        raise DuetError("--manifest is required (its texts are the prompts)")
    return _overrides(LunaGRPOConfig(init_from=args.init_from, manifest=args.manifest), args)


def _pick(obj: Any, **values: Any) -> Any:
    """``obj`` with the values that were given (not None)."""
    return replace(obj, **{k: v for k, v in values.items() if v is not None})


def _overrides(cfg: LunaGRPOConfig, args: argparse.Namespace) -> LunaGRPOConfig:
    languages = None if args.languages is None else comma_list(args.languages)
    prompts = _pick(cfg.prompts, split=args.split, val_split=args.val_split, val_items=args.val_items,
                    max_items=args.max_prompts, languages=languages,
                    similarity=False if args.no_sim else None)
    grpo = _pick(cfg.step.grpo, clip_eps=args.clip_eps, kl_coef=args.kl_coef)
    step = _pick(cfg.step, group_size=args.group_size, prompts_per_step=args.prompts_per_step,
                 ppo_epochs=args.ppo_epochs, wer_tie=args.wer_tie, max_frames=args.max_frames, grpo=grpo)
    decode = _pick(cfg.decode, steps=args.decode_steps, temperature=args.temperature, top_k=args.top_k,
                   cfg_scale=args.cfg_scale)
    rewards = _pick(cfg.rewards, asr_model=args.asr_model, speaker=args.speaker)
    loop = _pick(cfg.loop, max_steps=args.steps, lr=args.lr, warmup_steps=args.warmup, val_every=args.val_every,
                 checkpoint_every=args.checkpoint_every, seed=args.seed, device=args.device)
    return _pick(cfg, manifest=args.manifest, codec=args.codec, prompts=prompts, step=step, decode=decode,
                 rewards=rewards, loop=loop)


def train_stage(args: argparse.Namespace) -> int:
    """``duet train luna-grpo``'s action (its flags: ``duet.train.flags.add_luna_grpo_stages``)."""
    result = train_luna_grpo(config_from_args(args), args.out, resume=args.resume, stop_at_step=args.stop_at,
                             max_minutes=args.minutes, threads=args.threads, progress=not args.quiet)
    print(summary_line(result))
    return 0


def export_stage(args: argparse.Namespace) -> int:
    """``duet train luna-grpo-export``'s action."""
    return run_export(export_luna_grpo, None, args)


def add_train_luna_grpo_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``luna-grpo`` and ``luna-grpo-export`` to the ``duet train`` sub-commands, bound to this module."""
    add_luna_grpo_stages(subparsers, train_stage, export_stage)


def main(argv: list[str] | None = None) -> int:
    """``python -m duet.train.recipes.luna_grpo luna-grpo ...``."""
    return stage_main(add_train_luna_grpo_parser, argv)


if __name__ == "__main__":
    sys.exit(main())
