"""Gepard's post-training stages (report §4: "pretraining and two fine-tuning stages (SFT, followed by DPO)"), each
a stage over the shared loop, warm-started from a shipped model (or an export of a run):

    duet train gepard-sft --init-from checkpoints/gepard-tiny --shards CODES [--manifest M] [--speakers a,b]
        [--select ids.txt] --out runs/gepard-sft            # same loss, lower LR, selected data
    duet train gepard-dpo --init-from runs/gepard-sft/export [--manifest M | --texts prompts.txt] [--prompts 256]
        [--cfg-scale 2] [--rank 16] --out runs/gepard-dpo   # pairs, scoring, then DPO with LoRA
    duet train gepard-export runs/gepard-dpo --out checkpoints/gepard-dpo   # duet.train.recipes.gepard_export

SFT (§4.3, past the end of our copy of the report; our reading): pretraining's objective (``GepardPretrain``: loss,
split LRs) from the warm start, at a tenth of the preset's peak LR over a short schedule (2,000 steps, 100 warm-up),
on a selected part of the corpus: utterance ids from a file (``--select``: e.g. the recordings ``duet eval`` scored
best) and / or speakers (``--speakers``); validation reads the whole val split as pretraining does.

DPO (DESIGN §A "CFG distilled by DPO"; §1.2, §1.4 item 3, §3.3), in order, resumable at each stage:

1. prompts: texts of a manifest split (the first ``--prompts`` in id-hash order, spread over speakers) or lines of a
   text file;
2. pairs (``duet.train.gepard_pairs``): chosen = two-pass CFG, rejected = one pass, both at the model's served
   sampling and one seed, decoded by its codec, scored (``duet.metrics.clip.ClipScorer``: ``duet eval``'s
   Whisper WER, and SIM when cloning), with the reference log-likelihoods, into ``RUN/pairs/``;
3. DPO (``duet.train.objectives.gepard_dpo``) of LoRA adapters (``duet.nn.lora``) on the backbone's projections,
   everything else frozen, on the selected and weighted pairs (``duet.train.dpo_data``).

``gepard-export`` (``duet.train.recipes.gepard_export``, one export for a Gepard run of any stage) merges a DPO
run's adapters and writes a stock shipped Gepard with the starting model's default sampling; an SFT run's weights
as they are.

Cloning (``--clone``, a model with the voice compressor): each prompt clones the voice of another recording of its
speaker (never its own), both sides decode with that prefix, and SIM joins WER in the pair's quality. The compressor
stays frozen in both stages (§2.6: "during the fine-tuning and DPO stages, the compressor is frozen").

Run directory: ``config.json`` (:class:`GepardSFTConfig` / :class:`GepardDPOConfig`), ``tokenizer.json`` (the
starting model's), ``pairs/`` (DPO), and the loop's ``metrics.jsonl``, ``loss.png``, ``checkpoints/``, ``best/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.distributed as dist

from duet.command import comma_list
from duet.config_io import read_json
from duet.data.manifest import audio_path, read_manifest
from duet.data.utterances import hash_order, select_utterances
from duet.errors import DuetError
from duet.gepard.checkpoint import load_gepard
from duet.gepard.config import PRESETS, GepardConfig
from duet.gepard.data import GepardData, GepardDataConfig
from duet.gepard.generate import SPEAK_SAMPLING
from duet.gepard.model import GepardModel
from duet.gepard.trajectory import GepardTrajectories
from duet.metrics.clip import ClipScoreConfig, ClipScorer, ClipScoring
from duet.nn.lora import LoRAConfig, apply_lora
from duet.text.tokens import service_ids
from duet.train import recipe as driver
from duet.train.distributed import setup_distributed
from duet.train.dpo_data import DPOData, DPODataConfig
from duet.train.flags import add_gepard_post_stages, run_train, stage_main, summary_line
from duet.train.gepard_pairs import (
    PairPrompt,
    PairsConfig,
    PairStore,
    VoicePrefix,
    clip_prefix,
    make_pairs,
    store_settings,
)
from duet.train.loop import LoopConfig, train
from duet.train.objectives.gepard import GepardPretrain
from duet.train.objectives.gepard_dpo import DPOConfig, GepardDPO
from duet.train.recipes.gepard import recipe as pretrain_recipe
from duet.train.runner import CONFIG, LoopResult, resume_point, write_run_config

SFT_LR_SCALE = 0.1  # SFT's peak LR: a tenth of the preset's pretraining LR
SFT_STEPS = 2000
SFT_WARMUP = 100


def _shipped_config(init_from: str) -> tuple[Path, GepardConfig]:
    """The starting model's directory and its GepardConfig (no weights read)."""
    from duet.shipped import model_type

    path, kind = model_type(init_from)
    if kind != "gepard":
        raise DuetError(f"{init_from} holds a {kind!r} model, not a Gepard")
    return path, GepardConfig.from_dict(json.loads((path / "config.json").read_text())["config"])


def _warm_start(init_from: str, config: GepardConfig) -> GepardModel:
    """A fresh module holding the starting model's weights (float32), after checking it is the run's model."""
    shipped = load_gepard(init_from)
    if shipped.model.config != config:
        raise DuetError(f"{init_from} is a different model ({shipped.model.config.name}) than the run's "
                        f"{config.name}; cannot warm-start")
    model = GepardModel(config)
    model.load_state_dict(shipped.model.state_dict())
    return model


def _preset_loop(name: str) -> tuple[LoopConfig, GepardDataConfig]:
    """The pretraining loop and data settings of the model's preset (gepard-tiny's for a model of no preset)."""
    base = pretrain_recipe(name if name in PRESETS else "gepard-tiny")
    return base.loop, base.data


# ---- SFT -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTSelection:
    ids: str = ""  # a file of utterance ids, one per line ("" = every utterance of the split)
    speakers: tuple[str, ...] = ()  # only these speakers (() = all)


@dataclass(frozen=True)
class GepardSFTConfig:
    model: GepardConfig
    init_from: str  # the shipped model (or export) the stage starts from
    shards: str
    manifest: str
    selection: SFTSelection = field(default_factory=SFTSelection)
    data: GepardDataConfig = field(default_factory=GepardDataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)

    @property
    def name(self) -> str:
        return self.model.name


def sft_recipe(init_from: str, preset: str | None = None, shards: str = "", manifest: str = "") -> GepardSFTConfig:
    """SFT defaults for the model at ``init_from`` (module docstring), from ``preset``'s pretraining recipe (default:
    the model's own preset)."""
    path, model = _shipped_config(init_from)
    loop, data = _preset_loop(preset or model.name)
    loop = replace(loop, lr=loop.lr * SFT_LR_SCALE, max_steps=SFT_STEPS, warmup_steps=SFT_WARMUP)
    return GepardSFTConfig(model=model, init_from=str(path), shards=shards, manifest=manifest, data=data, loop=loop)


class SelectedData:
    """``GepardData`` whose training split keeps only the selected utterances (validation stays whole)."""

    def __init__(self, selection: SFTSelection):
        self.selection = selection

    def from_shards(self, shards: Any, manifest: Any, tokenizer: Any, cfg: GepardDataConfig, split: str = "train",
                    **options: Any) -> GepardData:
        data = GepardData.from_shards(shards, manifest, tokenizer, cfg, split, **options)
        sel = self.selection
        if split != "train" or (not sel.ids and not sel.speakers):
            return data
        keep = {u.id for u in read_manifest(manifest) if not sel.speakers or u.speaker in sel.speakers}
        if sel.ids:
            listed = {line.strip() for line in Path(sel.ids).read_text().splitlines() if line.strip()}
            keep &= listed
        items = [it for it in data.items if it.id in keep]
        if not items:
            raise DuetError("the SFT selection keeps no training utterance (check --select and --speakers)")
        dropped = {**data.dropped, "not_selected": len(data.items) - len(items)}
        voice = getattr(options.get("model"), "voice", None)  # references are drawn among the kept utterances
        return GepardData(items, {it.id: data.packed[it.id] for it in items}, data.tokenizer, data.cfg, True,
                          data.frame_rate, dropped, voice=voice)


def train_gepard_sft(cfg: GepardSFTConfig | None, run_dir: str | Path, *, resume: bool = False,
                     stop_at_step: int | None = None, max_minutes: float | None = None, threads: int | None = None,
                     progress: bool = True, init_from: str | None = None) -> LoopResult:
    """Fine-tune (or resume) in ``run_dir``; ``cfg`` may be None on resume. ``init_from`` is ``cfg.init_from``'s
    (the command line passes both)."""
    run_dir = Path(run_dir)
    cfg = driver.run_config(run_dir, cfg, resume, GepardSFTConfig, "Gepard SFT")
    if init_from is not None and not resume and str(_shipped_config(init_from)[0]) != cfg.init_from:
        raise DuetError(f"--init-from {init_from} is not the config's init_from {cfg.init_from}")
    warm = not resume or resume_point(run_dir, resume) is None

    def build() -> GepardModel:
        model = _warm_start(cfg.init_from, cfg.model) if warm else GepardModel(cfg.model)  # resume: from checkpoint
        if model.qformer is not None:  # §2.6: "during the fine-tuning and DPO stages, the compressor is frozen"
            model.qformer.requires_grad_(False)
        return model

    return driver.run_recipe(cfg, run_dir, model=cfg.model, data=SelectedData(cfg.selection), build=build,
                             objective=GepardPretrain(), tokenizer=str(Path(cfg.init_from) / "tokenizer.json"),
                             init_from=cfg.init_from if warm else None, resume=resume, stop_at_step=stop_at_step,
                             max_minutes=max_minutes, threads=threads, progress=progress)


# ---- DPO -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PromptsConfig:
    manifest: str = ""  # texts of this corpus's ``split``
    split: str = "train"
    languages: tuple[str, ...] = ()  # manifest languages to keep (() = all)
    held_out_speakers: tuple[str, ...] = ()  # speakers whose utterances are never prompts
    texts: str = ""  # or a text file, one prompt per line (in ``language``)
    language: str = "en"
    limit: int = 256  # prompts at most
    clone: bool = False  # manifest prompts clone another recording of their speaker (needs a voice prefix)

    def __post_init__(self) -> None:
        if bool(self.manifest) == bool(self.texts):
            raise DuetError("DPO prompts come from a manifest or a text file: give exactly one")
        if self.clone and not self.manifest:
            raise DuetError("cloning prompts need a manifest (a reference recording per speaker)")
        if self.limit < 1:
            raise DuetError("the DPO stage needs at least one prompt")


def dpo_prompts(cfg: PromptsConfig) -> list[PairPrompt]:
    """The prompts pairs are made for (module docstring); ids are the manifest's, or ``text-NNNNN``."""
    if cfg.texts:
        lines = [line.strip() for line in Path(cfg.texts).read_text().splitlines() if line.strip()]
        return [PairPrompt(f"text-{i:05d}", line, cfg.language) for i, line in enumerate(lines[: cfg.limit])]
    utts = hash_order(select_utterances(cfg.manifest, cfg.split, cfg))  # type: ignore[arg-type]  (languages only)
    utts = [u for u in utts if u.text.strip()]
    if not cfg.clone:
        return [PairPrompt(u.id, u.text, u.language) for u in utts[: cfg.limit]]
    by_speaker: dict[str, list] = {}
    for u in utts:
        by_speaker.setdefault(u.speaker, []).append(u)
    prompts = []
    for u in utts:
        same = by_speaker[u.speaker]
        if len(same) < 2:
            continue  # no other recording of this voice to clone from
        ref = same[(same.index(u) + 1) % len(same)]  # the next one: never the utterance's own recording
        prompts.append(PairPrompt(u.id, u.text, u.language, str(audio_path(cfg.manifest, ref))))
        if len(prompts) == cfg.limit:
            break
    return prompts


@dataclass(frozen=True)
class GepardDPOConfig:
    model: GepardConfig
    init_from: str
    prompts: PromptsConfig
    pairs: PairsConfig = field(default_factory=PairsConfig)
    scoring: ClipScoreConfig = field(default_factory=ClipScoreConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    data: DPODataConfig = field(default_factory=DPODataConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)

    @property
    def name(self) -> str:
        return self.model.name


def dpo_recipe(init_from: str, prompts: PromptsConfig, preset: str | None = None) -> GepardDPOConfig:
    """DPO defaults for the model at ``init_from``: its served sampling for both sides, the preset's precision."""
    path, model = _shipped_config(init_from)
    loop, _ = _preset_loop(preset or model.name)
    served = json.loads((path / "config.json").read_text()).get("sampling", {})
    pairs = PairsConfig(temperature=served.get("temperature", SPEAK_SAMPLING.temperature),
                        top_k=served.get("top_k", SPEAK_SAMPLING.top_k))
    # LoRA trains few parameters from B = 0: no decay (it would only pull towards the reference), a short schedule.
    loop = LoopConfig(max_steps=500, lr=5e-5, warmup_steps=20, weight_decay=0.0, bf16=loop.bf16, log_every=10,
                      val_every=0, diag_every=0, checkpoint_every=100, checkpoint_minutes=loop.checkpoint_minutes)
    return GepardDPOConfig(model=model, init_from=str(path), prompts=prompts, pairs=pairs, loop=loop)


def _dpo_run_config(run_dir: Path, cfg: GepardDPOConfig | None, resume: bool) -> GepardDPOConfig:
    """The saved config on a resume (only the loop fields that do not change the past may differ), else ``cfg``."""
    saved = read_json(run_dir / CONFIG, GepardDPOConfig) if resume and (run_dir / CONFIG).is_file() else None
    if saved is None:
        if cfg is None:
            raise DuetError("no config: give --init-from, or --resume a run directory that has config.json")
        if not resume and (run_dir / CONFIG).is_file():
            raise DuetError(f"{run_dir} already holds a run; --resume it or choose another --out")
        return cfg
    if cfg is None:
        return saved
    keep = {k: getattr(saved.loop, k) for k in driver.RESUMABLE_LOOP_FIELDS}
    if replace(cfg, loop=replace(cfg.loop, **keep)) != saved:
        changed = [f.name for f in fields(saved) if getattr(saved, f.name) != getattr(cfg, f.name)]
        raise DuetError(f"the run was made with a different {', '.join(changed)}; on --resume only "
                        f"{', '.join(driver.RESUMABLE_LOOP_FIELDS)} may change")
    return replace(saved, loop=replace(saved.loop, **{k: getattr(cfg.loop, k) for k in driver.RESUMABLE_LOOP_FIELDS}))


def build_policy(cfg: GepardDPOConfig, base: GepardModel | None = None) -> GepardTrajectories:
    """The trained module: ``base`` (default: a fresh model of the config) with LoRA adapters, as a scorer."""
    model = base if base is not None else GepardModel(cfg.model)
    apply_lora(model, cfg.lora)
    return GepardTrajectories(model, stop_floor=cfg.dpo.stop_floor, temperature=cfg.dpo.temperature)


def train_gepard_dpo(cfg: GepardDPOConfig | None, run_dir: str | Path, *, resume: bool = False,
                     stop_at_step: int | None = None, max_minutes: float | None = None, threads: int | None = None,
                     progress: bool = True, init_from: str | None = None, scorer: ClipScoring | None = None,
                     voice_prefix: VoicePrefix | None = None) -> LoopResult:
    """Pairs (what is missing), then DPO (or its continuation) in ``run_dir``; ``cfg`` may be None on resume.

    ``scorer`` defaults to Whisper and the speaker encoder (``ClipScorer(cfg.scoring)``); ``voice_prefix`` is needed
    for cloning prompts.
    """
    from duet.codecs import load as load_codec

    if threads:
        torch.set_num_threads(threads)
    run_dir = Path(run_dir)
    cfg = _dpo_run_config(run_dir, cfg, resume)
    if init_from is not None and not resume and str(_shipped_config(init_from)[0]) != cfg.init_from:
        raise DuetError(f"--init-from {init_from} is not the config's init_from {cfg.init_from}")
    resume_point(run_dir, resume)  # a fresh start in a directory with checkpoints is an error
    env = setup_distributed(cfg.loop.device)
    try:
        shipped = load_gepard(cfg.init_from, device=str(env.device))
        if shipped.model.config != cfg.model:
            raise DuetError(f"{cfg.init_from} is a different model ({shipped.model.config.name}) than the run's "
                            f"{cfg.model.name}")
        store_root = run_dir / "pairs"
        scoring = asdict(cfg.scoring) if scorer is None else {"scorer": type(scorer).__name__}
        settings = store_settings(cfg.init_from, cfg.pairs, scoring)
        if env.is_main:  # one writer: pairs are made once, by rank 0
            run_dir.mkdir(parents=True, exist_ok=True)
            write_run_config(run_dir, cfg)
            shutil.copyfile(Path(cfg.init_from) / "tokenizer.json", run_dir / "tokenizer.json")
            codec = load_codec(shipped.codec.get("name") or "duet-fsq", device=str(env.device))
            if cfg.prompts.clone and voice_prefix is None:
                voice_prefix = clip_prefix(shipped.model, codec)  # raises for a model without the compressor
            made = make_pairs(shipped.model, codec, shipped.tokenizer, dpo_prompts(cfg.prompts),
                              PairStore(store_root, settings), scorer or ClipScorer(cfg.scoring), cfg.pairs,
                              voice_prefix, progress=progress)
            print(f"pairs: {made} made in {store_root}", file=sys.stderr)
        if env.distributed:
            dist.barrier()
        store = PairStore(store_root, settings)
        train_data, val = DPOData.split(store, service_ids(shipped.tokenizer).pad, cfg.data)
        if env.is_main:
            print(f"train: {train_data.summary()}; val: {len(val) if val else 0} pairs", file=sys.stderr)
        torch.manual_seed(cfg.loop.seed)  # the same adapters on every rank
        base = shipped.model.cpu().float().train()
        module = build_policy(cfg, base)
        extra = {"recipe": GepardDPO.name, "codec": shipped.codec, "init_from": cfg.init_from,
                 "pairs": len(store.records), "train_pairs": len(train_data)}
        return train(module, GepardDPO(cfg.dpo), train_data, cfg.loop, run_dir,
                     val_batches=val.batches() if val else None, resume=resume, stop_at_step=stop_at_step,
                     max_minutes=max_minutes, progress=progress, extra=extra, title=f"{cfg.name} DPO ({run_dir.name})")
    finally:
        if env.owns_group and dist.is_initialized():
            dist.destroy_process_group()


# ---- command line --------------------------------------------------------------------------------------------------


def sft_stage(args: argparse.Namespace) -> int:
    """``duet train gepard-sft``'s action (its flags: ``duet.train.flags.add_gepard_post_stages``)."""
    return run_train(train_gepard_sft, sft_config_from_args, False, args)


def dpo_stage(args: argparse.Namespace) -> int:
    """``duet train gepard-dpo``'s action."""
    result = train_gepard_dpo(dpo_config_from_args(args), args.out, resume=args.resume, stop_at_step=args.stop_at,
                              max_minutes=args.minutes, threads=args.threads, progress=not args.quiet,
                              init_from=args.init_from)
    print(summary_line(result))
    return 0


def sft_config_from_args(args: argparse.Namespace) -> GepardSFTConfig:
    """Flags -> GepardSFTConfig (on a resume without --init-from: the run's config, with the given overrides)."""
    if args.init_from is None and not args.resume:
        raise DuetError("gepard-sft needs --init-from (a shipped Gepard), or --resume a run")
    if args.init_from is not None and not args.resume:
        args = argparse.Namespace(**{**vars(args), "preset": args.preset or ""})  # the shared parser's fresh path
    cfg = driver.config_from_args(args, lambda preset, shards, manifest: sft_recipe(
        args.init_from, preset or None, shards, manifest), GepardSFTConfig, "with --init-from")
    selection = cfg.selection
    if args.select is not None:
        selection = replace(selection, ids=str(Path(args.select).resolve()))
    if args.speakers is not None:
        selection = replace(selection, speakers=comma_list(args.speakers))
    return replace(cfg, selection=selection)


def dpo_config_from_args(args: argparse.Namespace) -> GepardDPOConfig:
    """Flags -> GepardDPOConfig; on a resume the run's saved config with the flags given applied over it."""
    saved = Path(args.out) / CONFIG
    if args.resume and saved.is_file():
        cfg = read_json(saved, GepardDPOConfig)
    elif args.init_from is None:
        raise DuetError("gepard-dpo needs --init-from (a shipped Gepard), or --resume a run")
    else:
        languages = comma_list(args.languages)
        held_out = comma_list(args.hold_out_speakers)
        prompts = PromptsConfig(manifest=args.manifest or "", split=args.split, languages=languages,
                                held_out_speakers=held_out, texts=args.texts or "",
                                limit=args.prompts or PromptsConfig.limit, clone=args.clone)
        cfg = dpo_recipe(args.init_from, prompts)
    pairs = {k: v for k, v in (("cfg_scale", args.cfg_scale), ("temperature", args.temperature),
                               ("top_k", args.top_k), ("seed", args.seed)) if v is not None}
    loop = {k: v for k, v in (("max_steps", args.steps), ("lr", args.lr), ("seed", args.seed)) if v is not None}
    cfg = replace(cfg, pairs=replace(cfg.pairs, **pairs), loop=replace(cfg.loop, **loop))
    if args.rank is not None:
        cfg = replace(cfg, lora=replace(cfg.lora, rank=args.rank, alpha=2.0 * args.rank))
    if args.beta is not None:
        cfg = replace(cfg, dpo=replace(cfg.dpo, beta=args.beta))
    if args.max_wer_loss is not None:
        cfg = replace(cfg, data=replace(cfg.data, max_wer_loss=args.max_wer_loss))
    if args.val_pairs is not None:
        cfg = replace(cfg, data=replace(cfg.data, val_pairs=args.val_pairs),
                      loop=replace(cfg.loop, val_every=max(cfg.loop.checkpoint_every // 2, 1) if args.val_pairs else 0))
    if args.val_every is not None:
        cfg = replace(cfg, loop=replace(cfg.loop, val_every=args.val_every))
    if args.asr_model is not None:
        cfg = replace(cfg, scoring=replace(cfg.scoring, asr_model=args.asr_model))
    return cfg


def add_train_gepard_post_parser(subparsers: argparse._SubParsersAction) -> None:
    """Adds ``gepard-sft`` and ``gepard-dpo`` to the ``duet train`` sub-commands, bound to this module."""
    add_gepard_post_stages(subparsers, sft_stage, dpo_stage)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m duet.train.recipes.gepard_post gepard-sft|gepard-dpo ...`` (what torchrun launches)."""
    return stage_main(add_train_gepard_post_parser, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
