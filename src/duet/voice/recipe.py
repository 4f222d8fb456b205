"""``duet voice train``: a folder of recordings -> an exported voice, in stages, each resumable, within a time budget.

    data       DATA's clips checked, prepared, phonemised and force-aligned into a corpus (``duet.voice.corpus``);
               the report of the clips left out; too little usable audio is refused here, before any training
    encode     the corpus into duet-fsq codes (``duet.data.shards``: resumable shards)
    decoder    the codec's decoder fine-tuned on the training clips for its share of the budget, exported into
               VOICE/codec (``duet.voice.decoder``): the voice decodes through it
    calibrate  a few real training steps, timed, to plan how many fit the budget (``duet.voice.budget``)
    train      ``duet train gepard``'s recipe (``duet.train.recipes.gepard``) warm-started from the base model
               (gepard-clone-tiny) with its aligned text input and duration predictor, checkpoints every few minutes,
               validation on the ``val`` split picking the best weights, early stopping
    export     the best weights in the shipped format (``duet.gepard.checkpoint``) at VOICE/, with the curves
    evaluate   held-out WER and similarity of the voice, the recordings and the base model (``duet.voice.evaluate``)
    card       VOICE/card.md and the same facts in VOICE/config.json

Directory ``VOICE`` (``--out``)::

    config.json, model.safetensors, tokenizer.json   the voice: ``duet speak --model VOICE``, ``duet serve --model VOICE``
    codec/                                           its own codec decoder (config.json names it)
    card.md, training.png, checks.tsv                its card, its training curves, the clips left out and why
    build/                                           the work: needed by --resume, deletable once the voice is made
        voice.json (the run's VoiceTrainConfig), data.json (the corpus's facts), plan.json (the step plan),
        trained.json (how training ended), decoder.json (the decoder's export), clock.json (wall seconds per stage),
        corpus/ (prepared audio, timing, manifest), codes/, decoder/ (the decoder's training run), run/ (the
        training run: checkpoints, metrics), eval/, base/ (the base model re-marked for another language)

``--resume`` continues where an invocation stopped (an interrupt checkpoints the training first): the data stage
is redone unless its manifest was written, the codes and the evaluation continue their own files, and training
continues its latest checkpoint exactly (``duet.train.runner``: the same steps as an uninterrupted run). DATA must
be unchanged (its listing's fingerprint is kept); the run keeps the settings it began with.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from duet.config_io import read_json, write_json
from duet.errors import DuetError
from duet.voice.budget import TIME_LIMIT_SLACK, StageClock, StepPlan, eval_reserve, measured_sec_per_step, plan_steps
from duet.voice.corpus import VoiceDataConfig

BUILD, REPORT, CURVES = "build", "checks.tsv", "training.png"
SAMPLING = {"temperature": 0.0, "top_k": 0}  # greedy, as the shipped Gepards speak
CALIBRATION_HORIZON = 1_000_000  # the provisional schedule end while calibrating (the warm-up does not read it)
# Which of the base model's weights a voice fine-tunes (the rest stay as shipped): every one; the last two
# transformer layers with the acoustic ends (see ``trained_prefixes``); the acoustic ends alone.
TRAINED = ("all", "upper", "heads")
ACOUSTIC_ENDS = ("model.norm.", "audio_interface.", "heads.", "duration.")  # final norm, audio in / out, durations


def trained_prefixes(trained: str, num_layers: int) -> tuple[str, ...]:
    """``VoiceTrainConfig.trained`` -> the parameter-name prefixes that train (``()``: all of them)."""
    if trained == "all":
        return ()
    upper = tuple(f"model.layers.{i}." for i in range(max(0, num_layers - 2), num_layers))
    return (upper if trained == "upper" else ()) + ACOUSTIC_ENDS


@dataclass(frozen=True)
class VoiceTrainConfig:
    data: VoiceDataConfig = field(default_factory=VoiceDataConfig)
    minutes: float = 60.0  # wall-clock budget of the whole command, data preparation included
    # a shipped name or directory: a Gepard with aligned text input and phoneme input. gepard-clone-tiny (79 voices,
    # a voice compressor) keeps its speech clearer through a fine-tune on a new voice than gepard-tiny (one voice):
    # benchmarks/results/own_voice_ablation.md. Its null prefix, trained on the voice too, speaks without a reference
    base_model: str = "gepard-clone-tiny"
    codec: str = "duet-fsq"  # encodes the recordings; its decoder, fine-tuned on them, decodes the voice
    decoder_share: float = 0.25  # of the budget, for the decoder's fine-tune (0: the voice decodes with `codec`)
    steps: int | None = None  # optimizer steps; None: as many as the budget holds (duet.voice.budget)
    lr: float = 3e-4  # peak; gepard-tiny's own continuation used 3e-4
    warmup_steps: int = 30
    batch_frames: int = 2000  # padded positions per batch, as gepard-tiny trained
    max_batch_size: int = 32
    weight_decay: float = 0.1
    trained: str = "all"  # which weights train: a key of TRAINED
    val_every_epochs: float = 2.0  # a validation about every this many passes over the training clips
    patience: int = 6  # validations without a lower loss before stopping early (0: never)
    checkpoint_minutes: float = 4.0
    calibration_steps: int = 8  # timed steps that plan the run; inside the warm-up
    evaluate: bool = True  # score the voice on the held-out clips at the end
    asr_model: str | None = None  # a CTranslate2 Whisper directory; None: the bundled tiny.en (English only)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.minutes <= 0:
            raise DuetError(f"--minutes must be positive, got {self.minutes}")
        if self.steps is not None and self.steps < 1:
            raise DuetError(f"--steps must be at least 1, got {self.steps}")
        if not 0 <= self.decoder_share < 1:
            raise DuetError(f"decoder_share must lie in [0, 1), got {self.decoder_share}")
        if self.trained not in TRAINED:
            raise DuetError(f"unknown trained weights {self.trained!r}; choose one of: {', '.join(TRAINED)}")
        if not 1 < self.calibration_steps <= self.warmup_steps:
            raise DuetError("calibration_steps must lie in [2, warmup_steps]: the warm-up's learning rates do not "
                            "depend on the run's length, so the steps it times belong to the run")


@dataclass(frozen=True)
class VoicePaths:
    """Where a voice run keeps what (module doc)."""

    out: Path

    @property
    def build(self) -> Path:
        return self.out / BUILD

    @property
    def config(self) -> Path:
        return self.build / "voice.json"

    @property
    def facts(self) -> Path:
        return self.build / "data.json"

    @property
    def plan(self) -> Path:
        return self.build / "plan.json"

    @property
    def trained(self) -> Path:
        return self.build / "trained.json"

    @property
    def clock(self) -> Path:
        return self.build / "clock.json"

    @property
    def corpus(self) -> Path:
        return self.build / "corpus"

    @property
    def manifest(self) -> Path:
        return self.corpus / "manifest.jsonl"

    @property
    def codes(self) -> Path:
        return self.build / "codes"

    @property
    def decoder_run(self) -> Path:
        return self.build / "decoder"

    @property
    def decoder(self) -> Path:
        return self.build / "decoder.json"

    @property
    def run(self) -> Path:
        return self.build / "run"

    @property
    def eval(self) -> Path:
        return self.build / "eval"

    @property
    def base(self) -> Path:
        return self.build / "base"


@dataclass(frozen=True)
class VoiceResult:
    out: Path
    finished: bool  # False: stopped on purpose before the export (``stop_at_step``)
    facts: dict[str, Any]


RESUMABLE = ("evaluate", "asr_model")  # settings a resumed run may change: they come after training


def resumed_config(saved: VoiceTrainConfig, given: dict[str, Any]) -> VoiceTrainConfig:
    """The config a resumed run keeps, with the settings of :data:`RESUMABLE` as ``given``; any other setting given
    again with another value than the run began with is refused."""
    data_fields = {f.name for f in fields(VoiceDataConfig)}
    data_given = {k: v for k, v in given.items() if k in data_fields}
    other = {k: v for k, v in given.items() if k not in data_fields}
    asked = replace(saved, **other, data=replace(saved.data, **data_given))
    kept = replace(saved, **{k: v for k, v in other.items() if k in RESUMABLE})
    if asked != kept:
        changed = [k for k, v in given.items() if getattr(saved.data if k in data_given else saved, k) != v
                   and k not in RESUMABLE]
        raise DuetError(f"this run began with other settings ({', '.join(changed)}); --resume keeps them")
    return kept


def config_from(given: dict[str, Any]) -> VoiceTrainConfig:
    """A new run's config from the settings given by field name (the data's own go to ``data``)."""
    data_fields = {f.name for f in fields(VoiceDataConfig)}
    return VoiceTrainConfig(data=VoiceDataConfig(**{k: v for k, v in given.items() if k in data_fields}),
                            **{k: v for k, v in given.items() if k not in data_fields})


def check_voice_data(data: str | Path, cfg: VoiceDataConfig, report: str | Path,
                     base_model: str = "gepard-clone-tiny",
                     codec: str = "duet-fsq", progress: bool = True) -> str:
    """``duet voice check``: the data stage's checks in a temporary directory, the report at ``report``; -> a
    summary line. Too little usable audio is refused in one line, as ``duet voice train`` refuses it."""
    import tempfile

    from duet.shipped import resolve_model
    from duet.text import get_tokenizer
    from duet.voice.corpus import build_voice_corpus, finish_corpus
    from duet.voice.language import base_for_language, check_language
    from duet.voice.report import reason_counts
    from duet.voice.sources import read_data

    folder = read_data(data)
    report = Path(report).resolve()
    _outside(report, folder.root, "--report")
    voice = check_language(cfg.language)
    with tempfile.TemporaryDirectory(prefix="duet-voice-check-") as tmp:
        base = base_for_language(resolve_model(base_model).resolve(), voice, Path(tmp) / "base")
        rates = _codec(codec)
        corpus = build_voice_corpus(folder, Path(tmp) / "corpus", cfg, get_tokenizer(base / "tokenizer.json"),
                                    rates.sample_rate, float(rates.frame_rate), progress)
        finish_corpus(corpus, cfg, report)
    left = ", ".join(f"{k} {v}" for k, v in reason_counts(corpus.rejections).items()) or "none"
    return (f"{len(corpus.entries)} of {corpus.found} clips usable ({corpus.recorded_seconds / 60:.1f} minutes as "
            f"recorded, {corpus.usable_seconds / 60:.1f} once trimmed; {corpus.clips('test')} would be held out); "
            f"left out: {left}; report: {report}")


def _outside(path: Path, data_root: Path, flag: str) -> None:
    """Refuse to write inside DATA: the user's folder is only read."""
    root = data_root.resolve()
    if path == root or root in path.parents:
        raise DuetError(f"{flag} {path} lies inside DATA ({root}), which duet only reads; choose a place outside it")


def train_voice(data: str | Path, out: str | Path, cfg: VoiceTrainConfig | None = None, *, resume: bool = False,
                given: dict[str, Any] | None = None, threads: int | None = None, progress: bool = True,
                stop_at_step: int | None = None) -> VoiceResult:
    """Make the voice (module doc). ``cfg``: a new run's settings; on ``resume`` the run's own, checked against the
    settings ``given`` again. ``stop_at_step`` ends this invocation after that training step, checkpointed."""
    import torch

    from duet.voice.sources import read_data

    paths = VoicePaths(Path(out).resolve())
    folder = read_data(data)
    _outside(paths.out, folder.root, "--out")
    cfg = _open_run(paths, cfg or VoiceTrainConfig(), resume, given or {})
    if threads:
        torch.set_num_threads(threads)
    clock = StageClock(paths.clock)
    say = _Say(clock, cfg.minutes, progress)
    base, corpus_facts = _data_stage(folder, paths, cfg, clock, say, progress)
    _encode_stage(paths, cfg, clock, say, progress)
    decoder = _decoder_stage(paths, cfg, clock, say, threads, progress)
    result, plan = _train_stage(paths, cfg, base, clock, say, corpus_facts, threads, progress, stop_at_step)
    facts: dict[str, Any] = {"data": corpus_facts}
    if result is not None and result.stopped == "stop_at":
        return VoiceResult(paths.out, False, facts)
    if decoder is not None:
        facts["decoder"] = decoder
    with clock.stage("export"):
        say("export: the best weights as a shipped voice")
        run, info = _export(paths, facts, own_decoder=decoder is not None)
    best = Path(info["checkpoint"]).parts[0] == "best"
    training = {"base": Path(cfg.base_model).name, "planned_steps": plan.steps,
                "sec_per_step": measured_sec_per_step(paths.run / "metrics.jsonl"),
                "steps": _trained_steps(paths.run), "stopped": json.loads(paths.trained.read_text())["stopped"],
                "exported_step": info["step"],
                "exported_from": "the lowest validation loss" if best else "the last step: no validation"}
    facts["training"] = training
    if cfg.evaluate:
        from duet.voice.evaluate import score_voice
        from duet.voice.language import whisper_language

        with clock.stage("evaluate"):
            say("evaluate: held-out WER and speaker similarity of the voice, the recordings and the base model")
            scores = score_voice(paths.manifest, paths.out, base, paths.eval,
                                 whisper_language(cfg.data.language), cfg.asr_model, cfg.seed, progress)
        facts["scores"] = {**scores.to_json(), "asr": cfg.asr_model or "tiny.en (bundled)"}
    facts["budget"] = {"minutes": cfg.minutes, "spent_minutes": clock.spent / 60,
                       "stages": dict(clock.seconds), "plan": plan.to_json()}
    _finish(paths, run, info, facts)
    say(f"done: {paths.out} (card: {paths.out / 'card.md'})")
    return VoiceResult(paths.out, True, facts)


# ---- stages ----------------------------------------------------------------------------------------------------


def _open_run(paths: VoicePaths, cfg: VoiceTrainConfig, resume: bool, given: dict[str, Any]) -> VoiceTrainConfig:
    """The run's config: a resumed run's own (checked against the settings ``given``), or a new run's, written once
    its language and base model are known to be usable. A directory whose earlier run never got past the data stage
    (too little usable audio, say) starts afresh."""
    from duet.shipped import resolve_model
    from duet.voice.language import base_voice, check_language

    if resume:
        if not paths.config.is_file():
            raise DuetError(f"{paths.out} holds no voice run to resume")
        return resumed_config(read_json(paths.config, VoiceTrainConfig), given)
    if paths.facts.is_file():
        raise DuetError(f"{paths.out} already holds a voice run: --resume it, or choose another --out")
    check_language(cfg.data.language)
    base_voice(resolve_model(cfg.base_model))
    paths.build.mkdir(parents=True, exist_ok=True)
    write_json(paths.config, cfg)
    return cfg


def _data_stage(folder, paths: VoicePaths, cfg: VoiceTrainConfig, clock: StageClock, say,
                progress: bool) -> tuple[Path, dict[str, Any]]:
    """-> (the base model directory for the language, the corpus's facts)."""
    from duet.shipped import resolve_model
    from duet.text import get_tokenizer
    from duet.voice.language import base_for_language, base_voice, check_language, new_symbols

    fingerprint = data_fingerprint(folder)
    voice = check_language(cfg.data.language)
    base = base_for_language(resolve_model(cfg.base_model).resolve(), voice, paths.base)
    if paths.facts.is_file() and paths.manifest.is_file():
        facts = json.loads(paths.facts.read_text())
        if facts["fingerprint"] != fingerprint:
            raise DuetError(f"{folder.root} changed since this run began (its clips or transcripts differ); start "
                            "again with another --out")
        return base, facts
    from duet.voice.corpus import build_voice_corpus, finish_corpus
    from duet.voice.report import reason_counts

    codec = _codec(cfg.codec)
    tokenizer = get_tokenizer(base / "tokenizer.json")
    with clock.stage("data"):
        say(f"data: {len(folder.clips)} clips in {folder.root} ({folder.layout} layout): checks, preparation, "
            "alignment")
        corpus = build_voice_corpus(folder, paths.corpus, cfg.data, tokenizer, codec.sample_rate,
                                    float(codec.frame_rate), progress)
        finish_corpus(corpus, cfg.data, paths.out / REPORT)
    facts = {"layout": folder.layout, "found": corpus.found, "fingerprint": fingerprint,
             "language": cfg.data.language, "espeak_voice": voice,
             "recorded_minutes": corpus.recorded_seconds / 60, "usable_minutes": corpus.usable_seconds / 60,
             "splits": {s: {"clips": corpus.clips(s), "minutes": corpus.seconds(s) / 60} for s in ("train", "val",
                                                                                                  "test")},
             "rejected": reason_counts(corpus.rejections), "report": REPORT,
             "base_voice": base_voice(resolve_model(cfg.base_model)),
             "new_symbols": new_symbols(tokenizer, corpus.ipa, base_voice(resolve_model(cfg.base_model)))}
    _write(paths.facts, facts)
    say(f"data: {sum(s['clips'] for s in facts['splits'].values())} clips usable "
        f"({facts['usable_minutes']:.1f} min: {facts['splits']['train']['clips']} to train on, "
        f"{facts['splits']['test']['clips']} held out), {len(corpus.rejections)} left out ({paths.out / REPORT})")
    return base, facts


def _encode_stage(paths: VoicePaths, cfg: VoiceTrainConfig, clock: StageClock, say, progress: bool) -> None:
    from duet.data.shards import encode_corpus

    with clock.stage("encode"):
        say(f"encode: the prepared clips into {cfg.codec} codes")
        encode_corpus(_codec(cfg.codec), paths.manifest, paths.codes, codec_name=cfg.codec,
                      progress=progress)


def _decoder_stage(paths: VoicePaths, cfg: VoiceTrainConfig, clock: StageClock, say, threads: int | None,
                   progress: bool) -> dict[str, Any] | None:
    """The codec's decoder fine-tuned on the training clips for ``decoder_share`` of the budget and exported into
    VOICE/codec (``duet.voice.decoder``); resumed where an invocation stopped. -> its export's facts, or None when
    the share is 0."""
    from duet.voice.decoder import CODEC_DIR, train_decoder

    if cfg.decoder_share == 0:
        return None
    if paths.decoder.is_file():
        return json.loads(paths.decoder.read_text())
    left = cfg.minutes * cfg.decoder_share - clock.seconds.get("decoder", 0.0) / 60
    with clock.stage("decoder"):
        say(f"decoder: {cfg.codec}'s decoder fine-tuned on the training clips (about {max(left, 0):.0f} minutes)")
        info = train_decoder(cfg.codec, paths.manifest, paths.decoder_run, paths.out / CODEC_DIR, left, threads,
                             progress)
    facts = {"codec": cfg.codec, "steps": info["step"], "minutes": clock.seconds["decoder"] / 60,
             "best_val_mel": info.get("best_val_mel")}
    _write(paths.decoder, facts)
    return facts


def _train_stage(paths: VoicePaths, cfg: VoiceTrainConfig, base: Path, clock: StageClock, say,
                 corpus_facts: dict[str, Any], threads: int | None, progress: bool, stop_at_step: int | None):
    """Calibrate (once), plan, train. -> (the last invocation's LoopResult, or None if training had already ended;
    the step plan)."""
    from duet.train.checkpoint import latest_checkpoint, read_state

    def step_now() -> int:
        ckpt = latest_checkpoint(paths.run)
        return read_state(ckpt)["step"] if ckpt is not None else 0

    heldout_s = corpus_facts["splits"]["test"]["minutes"] * 60
    if paths.plan.is_file():
        plan = StepPlan(**json.loads(paths.plan.read_text()))
    elif cfg.steps is not None:
        plan = StepPlan(cfg.minutes * 60, clock.spent, eval_reserve(heldout_s, 0.0, cfg.evaluate), 0.0, cfg.steps)
    else:
        from duet.voice.evaluate import asr_seconds_per_audio_second
        from duet.voice.language import whisper_language

        with clock.stage("calibrate"):
            say(f"calibrate: timing {cfg.calibration_steps} training steps and Whisper to fit the run to the budget")
            calibration = _gepard_config(paths, cfg, base, CALIBRATION_HORIZON, log_every=1, val_every=0)
            _run(calibration, paths, base, step_now() > 0, cfg.calibration_steps, None, threads, progress)
            asr_rate = (asr_seconds_per_audio_second(paths.manifest, whisper_language(cfg.data.language),
                                                     cfg.asr_model) if cfg.evaluate else 0.0)
        plan = plan_steps(cfg.minutes * 60, clock.spent, eval_reserve(heldout_s, asr_rate, cfg.evaluate),
                          measured_sec_per_step(paths.run / "metrics.jsonl"), done=cfg.calibration_steps)
    _write(paths.plan, plan.to_json())
    if paths.trained.is_file():  # an earlier invocation finished training
        return None, plan
    full = _gepard_config(paths, cfg, base, plan.steps, log_every=10, val_every=_val_every(paths, cfg, base))
    limit = None
    if cfg.steps is None:  # the budget's: what is left of the planned training time, with some slack
        limit = max(1.0, (plan.train_s - clock.seconds.get("train", 0.0)) * TIME_LIMIT_SLACK) / 60
    with clock.stage("train"):
        say(f"train: {plan.steps} steps from {cfg.base_model}" + (f" (about {plan.train_s / 60:.0f} minutes)"
                                                                   if plan.sec_per_step else ""))
        result = _run(full, paths, base, step_now() > 0, stop_at_step, limit, threads, progress)
    if result.stopped == "signal":
        raise DuetError(f"training stopped at step {result.step} by a signal (checkpointed); run the same command "
                        "with --resume to continue")
    if result.stopped != "stop_at":
        _write(paths.trained, {"stopped": result.stopped, "step": result.step, "best_val": result.best_val})
    return result, plan


def _run(gepard_cfg, paths: VoicePaths, base: Path, resume: bool, stop_at: int | None, minutes: float | None,
         threads: int | None, progress: bool):
    from duet.train.recipes.gepard import train_gepard

    return train_gepard(gepard_cfg, paths.run, resume=resume, stop_at_step=stop_at, max_minutes=minutes,
                        threads=threads, progress=progress, init_from=None if resume else base)


def _gepard_config(paths: VoicePaths, cfg: VoiceTrainConfig, base: Path, steps: int, log_every: int,
                   val_every: int):
    """``duet train gepard``'s config for this voice: the base model's network, the corpus, the schedule."""
    from duet.checkpoint_dir import read_config
    from duet.gepard.config import GepardConfig
    from duet.gepard.data import GepardDataConfig
    from duet.train.loop import LoopConfig
    from duet.train.recipes.gepard import GepardTrainConfig

    model = GepardConfig.from_dict(read_config(base)["config"])
    if model.aligned is None:
        raise DuetError(f"{cfg.base_model} has no aligned text input; a voice is fine-tuned from a model with it "
                        "(gepard-tiny)")
    data = GepardDataConfig(batch_frames=cfg.batch_frames, max_batch_size=cfg.max_batch_size, augment=False,
                            seed=cfg.seed)
    loop = LoopConfig(max_steps=steps, lr=cfg.lr, warmup_steps=cfg.warmup_steps, weight_decay=cfg.weight_decay,
                      log_every=log_every, val_every=val_every, diag_every=0, checkpoint_every=0,
                      checkpoint_minutes=cfg.checkpoint_minutes, patience=cfg.patience, seed=cfg.seed)
    return GepardTrainConfig(model=model, shards=str(paths.codes), manifest=str(paths.manifest),
                             data=data, loop=loop,
                             trained=trained_prefixes(cfg.trained, model.backbone.num_layers))


def _val_every(paths: VoicePaths, cfg: VoiceTrainConfig, base: Path) -> int:
    """Steps between validations: ``val_every_epochs`` passes over the training clips (their batches counted)."""
    from duet.gepard.data import GepardData
    from duet.text import get_tokenizer

    gepard_cfg = _gepard_config(paths, cfg, base, 1, 1, 0)
    train = GepardData.from_shards(gepard_cfg.shards, gepard_cfg.manifest, get_tokenizer(base / "tokenizer.json"),
                                   gepard_cfg.data, "train", model=gepard_cfg.model)
    return max(1, round(cfg.val_every_epochs * len(train.plan(0))))


def _export(paths: VoicePaths, facts: dict[str, Any], own_decoder: bool):
    """The run's best weights (else its latest) as a shipped Gepard at VOICE/, with its curves, decoding through
    VOICE/codec when it has its own decoder. -> (the loaded run, its provenance for config.json)."""
    from duet.gepard.checkpoint import save_gepard
    from duet.gepard.model import GepardModel
    from duet.train.recipe import load_run
    from duet.train.recipes.gepard import GepardTrainConfig
    from duet.voice.decoder import CODEC_DIR

    run = load_run(paths.run, GepardTrainConfig, lambda c: GepardModel(c.model), "Gepard")
    if own_decoder:
        run = replace(run, codec={**(run.codec or {}), "name": CODEC_DIR})
    info = {**run.info, "voice": facts}
    save_gepard(run.module, run.tokenizer, paths.out, codec=run.codec, info=info, sampling=SAMPLING)
    if (paths.run / "loss.png").is_file():
        shutil.copyfile(paths.run / "loss.png", paths.out / CURVES)
    return run, info


def _finish(paths: VoicePaths, run, info: dict[str, Any], facts: dict[str, Any]) -> None:
    """The card, and the same facts in the voice's config.json."""
    from duet.gepard.checkpoint import save_gepard
    from duet.voice.card import write_card

    save_gepard(run.module, run.tokenizer, paths.out, codec=run.codec, info={**info, "voice": facts},
                sampling=SAMPLING)
    write_card(paths.out, facts)


# ---- helpers ---------------------------------------------------------------------------------------------------


def data_fingerprint(folder) -> str:
    """What identifies DATA's contents for --resume: every clip's id, audio file (size, mtime) and transcript."""
    digest = hashlib.sha256()
    for clip in folder.clips:
        stat = clip.audio.stat() if clip.audio is not None else None
        digest.update(json.dumps([clip.id, str(clip.audio), stat and stat.st_size, stat and stat.st_mtime_ns,
                                  clip.text], ensure_ascii=False).encode())
    return digest.hexdigest()


def _codec(name: str):
    from duet.codecs import load

    return load(name)


def _trained_steps(run_dir: Path) -> int:
    from duet.train.checkpoint import latest_checkpoint, read_state

    ckpt = latest_checkpoint(run_dir)
    return read_state(ckpt)["step"] if ckpt is not None else 0


def _write(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class _Say:
    """One progress line per stage on stderr, with the time spent of the budget."""

    def __init__(self, clock: StageClock, minutes: float, on: bool):
        self.clock, self.minutes, self.on = clock, minutes, on

    def __call__(self, message: str) -> None:
        if self.on:
            spent = self.clock.spent
            print(f"[{int(spent // 60):02d}:{int(spent % 60):02d} of {self.minutes:g} min] {message}",
                  file=sys.stderr, flush=True)
