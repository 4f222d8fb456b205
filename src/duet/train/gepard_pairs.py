"""Offline preference pairs for Gepard's DPO stage: per text, the chosen utterance decoded with two-pass CFG and the
rejected one without it (DESIGN §A, "CFG distilled by DPO"; report §1.2: "offline paired generations"), both
decoded by the codec, scored (``duet.metrics.clip``: Whisper WER, and SIM when cloning) and stored with the
reference model's trajectory log-likelihoods.

One pair (:func:`make_pair`)::

    ids = gepard_prompt(text)                                  [SOT, text, EOT, SOS], as duet speak encodes it
    chosen   = generate(cfg_scale = w, uncond = [SOT, EOT, SOS])   two passes per frame (duet.gepard.generate)
    rejected = generate(cfg_scale = 1)                             one pass, the decoding DPO should improve
    both: codec.decode -> scorer.score -> ClipScore; teacher-forced log pi_ref (duet.gepard.trajectory)

Both use the same sampling (temperature, top-k: by default what the model is served with) and the same seed,
``crc32(seed:id)``, so a pair set is reproducible and a resumed run regenerates nothing it has.

Storage (:class:`PairStore`, a directory; resumable)::

    settings.json            what the pairs depend on (model, sampling, w, scorer); a resume must match it
    pairs.jsonl              one JSON line per pair: id, text, language, text_ids, seed, shard, and per side
                             frames, ended ("stop" | "bound"), wer, transcript, sim, ref_logp
    codes/NNNNN.safetensors  per pair "<id>/chosen" and "<id>/rejected": packed codec tokens (G, T) int16, and
                             "<id>/prefix" (K, D) when the prompt clones a voice

Pairs are made ``chunk`` at a time: the chunk's codes file is written atomically first, then its lines are
appended (flushed and synced), so a crash loses at most one chunk; a codes file no line names is overwritten by the
next chunk, and a torn last line is dropped on reopening.

Cloning. A prompt with a reference clip (``prompt_wav``) is decoded with the model's voice prefix, which
``voice_prefix(path) -> (1, K, D)`` computes (the voice-cloning compressor, ``duet.gepard.qformer``); the
unconditional pass keeps it (``GepardPrompt.unconditional``: CFG over text, the voice kept).

Shape legend: C channels (32), G packed groups (8), T frames, K prefix vectors, D model width.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from duet.codecs.base import Codec
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.finish import STOP
from duet.gepard.generate import GenerationResult, generate
from duet.gepard.model import GepardModel, GepardPrompt, collate
from duet.gepard.trajectory import STOP_FLOOR, trajectory_logprob
from duet.gepard.voice import reference_prefix
from duet.metrics.clip import ClipScore, ClipScoring
from duet.sampling import FrameBound, SamplingParams
from duet.text.prompts import gepard_prompt
from duet.text.tokens import service_ids

SIDES = ("chosen", "rejected")
VoicePrefix = Callable[[Path], torch.Tensor]  # reference clip -> (1, K, D) prefix


@dataclass(frozen=True)
class PairsConfig:
    cfg_scale: float = 2.0  # w of the chosen (two-pass) decoding; the report gives no value (§6.1 is past our copy)
    temperature: float = 0.6  # both sides; the recipe puts the model's own served default here
    top_k: int = 20
    seed: int = 0
    # the frame bound, as duet speak sets it; flat, as a pair directory's settings.json has always held it
    frames_per_token: float = FrameBound.frames_per_token
    margin_frames: int = FrameBound.margin_frames
    max_frames: int = FrameBound.max_frames
    chunk: int = 16  # pairs per codes file: what a crash can cost

    def __post_init__(self) -> None:
        if self.cfg_scale == 1.0:
            raise DuetError("the chosen decoding needs classifier-free guidance: cfg_scale != 1")
        if self.chunk < 1:
            raise DuetError("chunk must be at least 1")
        self.sampling(), self.bound()  # the sampler's and the bound's own checks, once, here

    def sampling(self, seed: int | None = None) -> SamplingParams:
        """The rejected side's sampler settings (the chosen side adds ``cfg_scale``)."""
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, seed=seed)

    def bound(self) -> FrameBound:
        return FrameBound(self.frames_per_token, self.margin_frames, self.max_frames)


@dataclass(frozen=True)
class PairPrompt:
    id: str
    text: str
    language: str = "en"
    prompt_wav: str | None = None  # a reference clip whose voice both sides clone


def pair_seed(seed: int, uid: str) -> int:
    """The seed both sides of one prompt's pair sample with."""
    return zlib.crc32(f"{seed}:{uid}".encode()) & 0x7FFFFFFF


def clip_prefix(model: GepardModel, codec: Codec) -> VoicePrefix:
    """Reference clip (a file) -> the model's voice prefix (1, K, D), as the runtime computes a request's: the clip
    read at the codec's rate, then ``duet.gepard.voice.reference_prefix``. Raises DuetError at once for a model
    without the voice compressor."""
    if model.qformer is None:
        raise DuetError("this Gepard has no voice compressor: it cannot clone a voice")
    from duet.audio import load_audio

    def prefix(path: Path) -> torch.Tensor:
        audio, _ = load_audio(path, sample_rate=codec.sample_rate)
        return reference_prefix(model, codec, audio)  # (1, K, D)

    return prefix


# ---- storage ---------------------------------------------------------------------------------------------------


class PairStore:
    """The pair directory (module docstring). ``settings`` (JSON-able) must equal what the directory was made with."""

    def __init__(self, root: str | Path, settings: dict[str, Any]):
        self.root = Path(root)
        (self.root / "codes").mkdir(parents=True, exist_ok=True)
        path = self.root / "settings.json"
        settings = json.loads(json.dumps(settings))  # tuples -> lists, as they come back
        if path.is_file():
            saved = json.loads(path.read_text())
            if saved != settings:
                changed = sorted(k for k in set(saved) | set(settings) if saved.get(k) != settings.get(k))
                raise DuetError(f"{self.root} holds pairs made with a different {', '.join(changed)}; use another "
                                "run directory")
        else:
            path.write_text(json.dumps(settings, indent=2) + "\n")
        self._lines = self.root / "pairs.jsonl"
        self.records = self._read()
        self._shards: dict[str, dict[str, torch.Tensor]] = {}

    def _read(self) -> list[dict[str, Any]]:
        if not self._lines.is_file():
            return []
        records, lines = [], self._lines.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            try:
                if not line.endswith("\n"):
                    raise ValueError("torn line")
                records.append(json.loads(line))
            except ValueError:
                if i != len(lines) - 1:
                    raise DuetError(f"{self._lines}: line {i + 1} is not JSON") from None
                self._lines.write_text("".join(lines[:-1]))  # a torn last line from a crash: made again
        return records

    def done(self) -> set[str]:
        return {r["id"] for r in self.records}

    def append(self, records: Sequence[dict[str, Any]], tensors: dict[str, torch.Tensor]) -> None:
        """Store one chunk: its codes file (atomically), then its lines."""
        if not records:
            return
        shard = f"codes/{len({r['shard'] for r in self.records}):05d}.safetensors"
        tmp = self.root / f"{shard}.tmp"
        save_file({k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}, str(tmp))  # own memory each
        os.replace(tmp, self.root / shard)
        with open(self._lines, "a") as fh:
            for record in records:
                fh.write(json.dumps({**record, "shard": shard}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        self.records += [{**r, "shard": shard} for r in records]

    def tensor(self, record: dict[str, Any], name: str) -> torch.Tensor | None:
        """``chosen`` / ``rejected`` (G, T) packed codes, ``prefix`` (K, D) or ``durations`` (S,) of a pair (None:
        it has none)."""
        shard = record["shard"]
        if shard not in self._shards:
            self._shards[shard] = load_file(str(self.root / shard))
        return self._shards[shard].get(f"{record['id']}/{name}")


def store_settings(model_path: str, pairs: PairsConfig, scoring: dict[str, Any]) -> dict[str, Any]:
    """What a pair set depends on (``PairStore``'s settings)."""
    return {"model": model_path, "pairs": {k: v for k, v in asdict(pairs).items() if k != "chunk"},
            "scoring": scoring}


# ---- generation --------------------------------------------------------------------------------------------------


def _side(result: GenerationResult, score: ClipScore, ref_logp: float) -> dict[str, Any]:
    return {"frames": int(result.lengths[0]), "ended": result.ended[0], "wer": score.wer,
            "transcript": score.transcript, "sim": score.sim, "ref_logp": ref_logp}


@torch.no_grad()
def make_pair(model: GepardModel, codec: Codec, tokenizer: Any, prompt: PairPrompt, scorer: ClipScoring,
              cfg: PairsConfig, voice_prefix: VoicePrefix | None = None,
              ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """One prompt's pair -> (its record without ``shard``, its tensors). ``model`` in eval mode."""
    device = model.embed_tokens.weight.device
    ids = gepard_prompt(prompt.text, tokenizer, language=prompt.language)
    prefix = None
    if prompt.prompt_wav is not None:
        if voice_prefix is None:
            raise DuetError(f"{prompt.id} clones {prompt.prompt_wav}, but no voice prefix was given (the model's "
                            "voice-cloning compressor)")
        prefix = voice_prefix(Path(prompt.prompt_wav)).to(device)  # (1, K, D)
    text = torch.tensor([ids], device=device)  # (1, S)
    durations = None  # aligned text input: one layout (1, S) for both sides and both CFG passes
    if model.is_aligned:
        durations = model.duration.predict(text, torch.tensor([len(ids)], device=device))
    gp = GepardPrompt(text, prefix=prefix, durations=durations)
    seed = pair_seed(cfg.seed, prompt.id)
    sampling = cfg.sampling(seed)
    results = {"chosen": generate(model, gp, params=replace(sampling, cfg_scale=cfg.cfg_scale), bound=cfg.bound(),
                                  uncond_prompt=model.unconditional(gp)),
               "rejected": generate(model, gp, params=sampling, bound=cfg.bound())}
    fsq = GroupFSQ(FSQConfig())
    channels = {s: r.codes[0, :, : int(r.lengths[0])] for s, r in results.items()}  # (C, T) each
    packed = {s: fsq.fold(c[None].cpu())[0].to(torch.int16) for s, c in channels.items()}  # (G, T) each

    layout = None if durations is None else [durations[0].tolist()] * 2
    batch = collate([(ids, channels["chosen"].cpu()), (ids, channels["rejected"].cpu())],
                    pad_id=service_ids(tokenizer).pad, durations=layout).to(device)
    if prefix is not None:
        batch = replace(batch, prefix=prefix.expand(2, -1, -1))  # (2, K, D)
    stopped = torch.tensor([results[s].ended[0] == STOP for s in SIDES], device=device)
    ref = trajectory_logprob(model.audio_logits(batch), batch.codes, batch.audio_lengths, stopped,
                             stop_floor=STOP_FLOOR).total.tolist()  # (2,)

    sides = {}
    for i, side in enumerate(SIDES):
        audio = _decode(codec, packed[side])
        score = scorer.score(audio, codec.sample_rate, prompt.text,
                             Path(prompt.prompt_wav) if prompt.prompt_wav else None)
        sides[side] = _side(results[side], score, ref[i])
    record = {"id": prompt.id, "text": prompt.text, "language": prompt.language, "prompt_wav": prompt.prompt_wav,
              "text_ids": ids, "seed": seed, **sides}
    tensors = {f"{prompt.id}/{s}": packed[s] for s in SIDES}
    if prefix is not None:
        tensors[f"{prompt.id}/prefix"] = prefix[0].float().cpu()
    if durations is not None:
        tensors[f"{prompt.id}/durations"] = durations[0].float().cpu()
    return record, tensors


def _decode(codec: Codec, packed: torch.Tensor) -> np.ndarray:
    """Packed tokens (G, T) -> mono audio (S,) float32; no frames give no samples."""
    if packed.shape[1] == 0:
        return np.zeros(0, np.float32)
    with torch.no_grad():
        out = codec.decode(packed.long()[None])
    return out.audio[0, : int(out.lengths[0])].float().cpu().numpy()


def make_pairs(model: GepardModel, codec: Codec, tokenizer: Any, prompts: Iterable[PairPrompt], store: PairStore,
               scorer: ClipScoring, cfg: PairsConfig, voice_prefix: VoicePrefix | None = None,
               progress: bool = True) -> int:
    """Make the pairs of every prompt the store does not hold yet, ``cfg.chunk`` at a time; returns how many."""
    if not model.has_unconditional_path:
        raise DuetError("the model has no unconditional path for the CFG (chosen) decoding (train it with duet "
                        "train gepard --voice-prefix, or --text-dropout 0.1)")
    if len(codec.codebook_sizes) != FSQConfig().num_groups:
        raise DuetError(f"Gepard pairs need a packed-FSQ codec of {FSQConfig().num_groups} code streams")
    from tqdm import tqdm

    done = store.done()
    todo = [p for p in prompts if p.id not in done]
    model.eval()
    made = 0
    chunk_records: list[dict[str, Any]] = []
    chunk_tensors: dict[str, torch.Tensor] = {}
    for prompt in tqdm(todo, desc="pairs", unit="pair", disable=not progress):
        record, tensors = make_pair(model, codec, tokenizer, prompt, scorer, cfg, voice_prefix)
        chunk_records.append(record)
        chunk_tensors.update(tensors)
        if len(chunk_records) == cfg.chunk:
            store.append(chunk_records, chunk_tensors)
            made += len(chunk_records)
            chunk_records, chunk_tensors = [], {}
    store.append(chunk_records, chunk_tensors)
    return made + len(chunk_records)
