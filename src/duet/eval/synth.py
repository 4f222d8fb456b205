"""What ``duet eval run`` evaluates: a small synthesiser protocol, the built-in systems, and a registry by name.

A synthesiser turns test items (:class:`duet.eval.testset.TestItem`: target text, optional prompt wav and text,
optional ground-truth wav) into :class:`Synthesis` results: audio plus whatever it knows about how it got there
(wall time, time to first audio, frames, whether it stopped or hit its length bound, per-frame probes).

Built in, by ``--model`` spec:
- ``ground-truth``: the set's ``gt_wav`` itself, the ceiling every other row of a comparison is read against;
- ``codec:NAME_OR_DIR``: resynthesis through a codec of :func:`duet.codecs.load` (encode the ground truth, decode
  it); PESQ-WB, STOI and MCD then compare the reconstruction with the original;
- ``mock``: the serving engine's weightless mock model (``duet.serve.mock``: uniform logits, scripted stop, a sine
  for audio), run through :class:`EngineSynthesizer` exactly as a real model would be. Its numbers are meaningless;
  it exists to check the pipeline (batching, time to first audio, runaway detection) without weights.

- ``gepard[:NAME|DIR]``, ``luna[:NAME|DIR]`` and ``luna-realtime[:NAME|DIR]`` (defaults gepard-tiny, luna-tiny,
  luna-realtime-tiny): a shipped model's family runtime (``duet.tts.load_runtime``) driven by the serving engine
  through :class:`EngineSynthesizer`. A model that clones from a reference clip alone (``clone_from_audio``: a Gepard
  with the voice compressor) takes each item's prompt wav as its reference; the others speak without it.
  ``--steps`` sets Luna's refinement steps (Realtime: per block).
- ``speaker:NAME|DIR``: any model ``duet.load`` knows through its speaker (:class:`SpeakerSynthesizer`), one item
  at a time and streamed; Luna clones each item's prompt (prompt wav + transcript) here. The speaker drives the
  same family runtime as the engine, so the frames of an item are the same either way.

Other systems plug in through :func:`register_synthesizer`; any family runtime (``duet.tts.runtime.FamilyRuntime``)
becomes a synthesiser with ``EngineSynthesizer(runtime)``.

Shape legend: B batch, S samples.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from duet.errors import DuetError
from duet.eval.testset import TestItem
from duet.families import FAMILIES, Family
from duet.limits import out_of_bounds


@dataclass(frozen=True)
class Synthesis:
    """One synthesised utterance. Every field but ``audio`` and ``sample_rate`` is optional knowledge."""

    audio: np.ndarray  # (S,) float32 mono
    sample_rate: int
    wall_s: float | None = None  # compute time charged to this utterance; None = nothing was synthesised
    ttfa_s: float | None = None  # request -> first audio chunk; None = not streamed
    frames: int | None = None
    frame_bound: int | None = None  # the most frames it was allowed
    ended: str | None = None  # "stop" (model decided) | "bound" (hit frame_bound: a runaway) | None = unknown
    frame_rate: float | None = None
    stop_prob: list[float] | None = None  # per stop decision (Gepard probes: frames + 1 entries)
    entropy: list[list[float]] | None = None  # per stop decision, per channel, nats

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate


@dataclass(frozen=True)
class SynthOptions:
    """Options every factory receives; a factory ignores those that do not apply to it."""

    batch_size: int = 8
    device: str = "cpu"
    seed: int = 0
    steps: int | None = None  # refinement steps of diffusion models (Luna); None = the model's default
    cfg_scale: float | None = None  # classifier-free guidance w (speaker: models only); None = the model's default
    temperature: float | None = None  # sampling temperature; None = the model's default
    top_k: int | None = None  # sampling truncation (0 = off); None = the model's default

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise DuetError(f"batch size must be at least 1, got {self.batch_size}")
        for name, value in self.given("steps", "cfg_scale", "temperature", "top_k").items():
            problem = out_of_bounds(name, value)  # the request bounds (duet.limits), checked before any model loads
            if problem:
                raise DuetError(problem)

    def given(self, *names: str) -> dict[str, Any]:
        """The named sampling options that were set (the rest stay the model's defaults)."""
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


class Synthesizer(Protocol):
    name: str  # what reports call the system
    batch_size: int  # items per synthesize() call (1 = one at a time)
    reconstructs_reference: bool  # output should equal gt_wav sample for sample -> PESQ / STOI / MCD apply

    def synthesize(self, items: Sequence[TestItem]) -> list[Synthesis]:
        """One result per item, in order. Raises DuetError when it cannot do one of them."""
        ...


def item_seed(seed: int, utt: str) -> int:
    """A per-utterance seed: the same utterance gets the same sample whatever batch it lands in."""
    return int.from_bytes(hashlib.sha256(f"{seed}\x00{utt}".encode()).digest()[:8], "big") >> 2


class GroundTruth:
    """The recording itself (``gt_wav``): reading a file costs no synthesis time, so RTF and TTFA stay empty."""

    name = "ground-truth"
    reconstructs_reference = False  # comparing the reference with itself would be trivially perfect

    def __init__(self, options: SynthOptions = SynthOptions()):
        self.batch_size = options.batch_size

    def synthesize(self, items: Sequence[TestItem]) -> list[Synthesis]:
        from duet.audio import load_audio

        out = []
        for item in items:
            if item.gt_wav is None:
                raise DuetError(f"utt {item.utt!r} has no gt_wav (the 5th meta.lst field)")
            audio, sr = load_audio(item.gt_wav)
            out.append(Synthesis(audio=audio, sample_rate=sr))
        return out


class CodecResynthesis:
    """Encode the ground truth with a codec and decode it again, a batch at a time (padded, lengths kept)."""

    reconstructs_reference = True

    def __init__(self, codec: Any, name: str, options: SynthOptions = SynthOptions()):
        self.codec = codec
        self.name = name
        self.batch_size = options.batch_size
        self.device = options.device

    def synthesize(self, items: Sequence[TestItem]) -> list[Synthesis]:
        import torch

        from duet.audio import load_audio

        sr = int(self.codec.sample_rate)
        clips = []
        for item in items:
            if item.gt_wav is None:
                raise DuetError(f"utt {item.utt!r} has no gt_wav to resynthesise")
            clips.append(load_audio(item.gt_wav, sample_rate=sr)[0])
        lengths = torch.tensor([len(c) for c in clips])
        batch = torch.zeros(len(clips), int(lengths.max()))  # (B, S)
        for i, c in enumerate(clips):
            batch[i, : len(c)] = torch.from_numpy(c)
        start = time.perf_counter()
        with torch.inference_mode():
            enc = self.codec.encode(batch.to(self.device), lengths.to(self.device))
            dec = self.codec.decode(enc.codes, enc.lengths)
        wall = time.perf_counter() - start
        audio = dec.audio.float().cpu().numpy()  # (B, S')
        total = float(lengths.sum())
        out = []
        for i, n in enumerate(lengths.tolist()):
            # The codec pads to whole frames; keep the input's length so sample-aligned metrics line up.
            n_out = min(n, int(dec.lengths[i]), audio.shape[1])
            out.append(Synthesis(audio=audio[i, :n_out].copy(), sample_rate=sr, wall_s=wall * n / total,
                                 frames=int(enc.lengths[i]), frame_rate=float(self.codec.frame_rate)))
        return out


class EngineSynthesizer:
    """Any family runtime (``duet.tts.runtime.FamilyRuntime``) driven through the continuous-batching engine.

    A batch is submitted at once and its requests run side by side, so ``ttfa_s`` is measured under that load
    (submit -> first audio chunk, stamped by the engine) and ``wall_s`` is the batch's wall time shared out by
    audio length.
    ``ended`` is the engine's finish reason: "stop" or "bound" (the request ran into its frame bound). An item's
    prompt wav is its reference clip where the runtime clones from one (``FamilyTraits.clone_from_audio``). The
    engine takes the whole batch whatever its cost (no admission by cost: an evaluation waits for every item).
    """

    reconstructs_reference = False

    def __init__(self, runtime: Any, options: SynthOptions = SynthOptions(), params: Any = None,
                 timeout_s: float = 600.0):
        from dataclasses import replace

        from duet.serve.cost import CostConfig
        from duet.serve.engine import Engine, EngineConfig
        from duet.serve.scheduler import SchedulerConfig

        self.runtime = runtime
        self.name = runtime.name
        self.batch_size = options.batch_size
        self.seed = options.seed
        self.params = params or replace(runtime.default_params,
                                        **options.given("steps", "temperature", "top_k", "cfg_scale"))
        self.timeout_s = timeout_s
        scheduler = SchedulerConfig(max_running=options.batch_size, max_waiting=options.batch_size)
        self.engine = Engine(runtime, EngineConfig(scheduler=scheduler, cost=CostConfig(headroom=None)))

    def _request(self, item: TestItem):
        from dataclasses import replace

        from duet.audio import load_audio
        from duet.tts.request import SynthesisRequest

        reference = None
        if item.prompt_wav is not None and self.runtime.traits.clone_from_audio:
            reference = load_audio(item.prompt_wav, sample_rate=self.runtime.codec.sample_rate)[0]
        params = replace(self.params, seed=item_seed(self.seed, item.utt))
        return SynthesisRequest(text=item.target_text, reference=reference, params=params)

    def synthesize(self, items: Sequence[TestItem]) -> list[Synthesis]:
        from duet.serve.errors import GenerationFailed

        requests = [self._request(it) for it in items]
        bounds = [r.params.max_frames or min(self.runtime.frame_bound(r), self.runtime.max_frames) for r in requests]
        if not self.engine.alive:
            self.engine.start()
        start = time.perf_counter()
        handles = [self.engine.submit(r) for r in requests]  # InvalidRequest / QueueFull are DuetErrors
        collected = []
        for item, handle in zip(items, handles, strict=True):
            try:
                collected.append(handle.collect(timeout=self.timeout_s))
            except GenerationFailed as err:
                for h in handles:
                    h.cancel()
                raise DuetError(f"utt {item.utt!r}: generation failed: {err}") from err
            except TimeoutError as err:
                for h in handles:
                    h.cancel()
                raise DuetError(f"utt {item.utt!r}: no audio within {self.timeout_s} s") from err
        wall = time.perf_counter() - start
        total = sum(len(a) for a, _ in collected) or 1
        sr = int(self.runtime.codec.sample_rate)
        out = []
        for item, bound, handle, (audio, finish) in zip(items, bounds, handles, collected, strict=True):
            if finish.reason not in ("stop", "bound"):
                raise DuetError(f"utt {item.utt!r}: the engine ended the request with {finish.reason!r}")
            if len(audio) == 0:
                raise DuetError(f"utt {item.utt!r}: the model produced no audio")
            # The engine stamps the first chunk on its own thread, so TTFA does not depend on our draining order.
            ttfa = None if handle.first_audio_at is None else handle.first_audio_at - handle.submitted_at
            out.append(Synthesis(audio=audio.astype(np.float32), sample_rate=sr, wall_s=wall * len(audio) / total,
                                 ttfa_s=ttfa, frames=finish.frames, frame_bound=bound, ended=finish.reason,
                                 frame_rate=float(self.runtime.codec.frame_rate)))
        return out

    def close(self) -> None:
        self.engine.stop()


class SpeakerSynthesizer:
    """Any model ``duet.load`` knows (``duet.tts``: Gepard, Luna, Luna Realtime) through its speaker, one item at a
    time, streamed: time to first audio is the first chunk's arrival (Gepard: a frame; Luna: a whole sentence;
    Luna Realtime: a block). A speaker that clones from a voice prompt (``clone_from_prompt``, Luna) clones each
    item's prompt wav with its transcript (Luna §2.5), one that clones from a clip alone (``clone_from_audio``: a
    Gepard with the voice compressor) takes the prompt wav as ``voice_ref``; the others speak without it. ``wall_s`` includes encoding the prompt.
    """

    batch_size = 1
    reconstructs_reference = False

    def __init__(self, speaker: Any, name: str, options: SynthOptions = SynthOptions()):
        self.speaker = speaker
        self.name = name
        self.seed = options.seed
        # only the options given: a speaker without steps (Gepard) refuses the keyword
        self.options = options.given("steps", "cfg_scale", "temperature", "top_k")
        self.clone_from_prompt = speaker.clone_from_prompt  # a voice prompt: the clip and its transcript (Luna)
        self.clone_from_audio = speaker.clone_from_audio  # the clip alone (a Gepard with the voice compressor)

    def synthesize(self, items: Sequence[TestItem]) -> list[Synthesis]:
        from duet.audio import load_audio

        sr = int(self.speaker.sample_rate)
        out = []
        for item in items:
            start = time.perf_counter()
            options = dict(self.options)
            if item.prompt_wav is not None and (self.clone_from_prompt or self.clone_from_audio):
                clip = load_audio(item.prompt_wav, sample_rate=sr)[0]
                if self.clone_from_prompt:
                    options["prompt"] = self.speaker.voice_prompt(clip, item.prompt_text)
                else:
                    options["voice_ref"] = clip
            ended: list[str] = []
            chunks, first = [], None
            for chunk in self.speaker.stream(item.target_text, seed=item_seed(self.seed, item.utt), ended=ended,
                                             **options):
                first = time.perf_counter() if first is None else first
                chunks.append(chunk)
            audio = np.concatenate(chunks).astype(np.float32)
            if len(audio) == 0:
                raise DuetError(f"utt {item.utt!r}: the model produced no audio")
            out.append(Synthesis(audio=audio, sample_rate=sr, wall_s=time.perf_counter() - start,
                                 ttfa_s=first - start, ended="bound" if "bound" in ended else "stop",
                                 frames=len(audio) // self.speaker.codec.samples_per_frame,
                                 frame_rate=float(self.speaker.codec.frame_rate)))
        return out


# --------------------------------------------------------------------------------------------------------------
# Registry: ``--model NAME`` or ``--model NAME:ARG``

SynthFactory = Callable[[str | None, SynthOptions], Synthesizer]


def _ground_truth(arg: str | None, options: SynthOptions) -> Synthesizer:
    if arg:
        raise DuetError(f"ground-truth takes no argument, got {arg!r}")
    return GroundTruth(options)


def _codec(arg: str | None, options: SynthOptions) -> Synthesizer:
    if not arg:
        raise DuetError("codec resynthesis needs a codec: --model codec:NAME or codec:DIR (e.g. codec:duet-fsq)")
    try:
        from duet.codecs import load
    except ImportError as err:
        raise DuetError(f"the codec registry is not available ({err}); cannot resynthesise with {arg!r}") from err
    from pathlib import Path

    codec = load(arg, options.device)
    name = f"codec:{Path(arg).name if Path(arg).is_dir() else arg}"
    return CodecResynthesis(codec, name, options)


def _mock(arg: str | None, options: SynthOptions) -> Synthesizer:
    from duet.serve.mock import MockRuntime

    if arg:
        raise DuetError(f"mock takes no argument, got {arg!r}")
    return EngineSynthesizer(MockRuntime(), options)


def _family(fam: Family) -> SynthFactory:
    """A model of this family (default: its first shipped model): its runtime, driven by the serving engine."""

    def factory(arg: str | None, options: SynthOptions) -> Synthesizer:
        from duet.shipped import model_type
        from duet.tts import load_runtime

        target = arg or fam.default_model
        _, found = model_type(target)
        if found != fam.name:
            raise DuetError(f"{target} is a {found} model, not {fam.name}")
        return EngineSynthesizer(load_runtime(target, device=options.device), options)

    return factory


def _speaker(arg: str | None, options: SynthOptions) -> Synthesizer:
    from pathlib import Path

    from duet.tts import load

    if not arg:
        raise DuetError("speaker needs a model: --model speaker:NAME or speaker:DIR (e.g. speaker:luna-tiny)")
    return SpeakerSynthesizer(load(arg, device=options.device), f"speaker:{Path(arg).name}", options)


_REGISTRY: dict[str, SynthFactory] = {"ground-truth": _ground_truth, "codec": _codec, "mock": _mock,
                                      "speaker": _speaker, **{f.name: _family(f) for f in FAMILIES}}
_ALIASES = {"gt": "ground-truth"}


def register_synthesizer(name: str, factory: SynthFactory) -> None:
    """Make ``--model name[:arg]`` build ``factory(arg, options)`` (Gepard and Luna register here)."""
    if not name or ":" in name:
        raise DuetError(f"a model name must be non-empty and hold no ':', got {name!r}")
    _REGISTRY[name] = factory


def known_models() -> list[str]:
    return sorted(_REGISTRY)


def load_synthesizer(spec: str, options: SynthOptions = SynthOptions()) -> Synthesizer:
    """``"ground-truth"``, ``"codec:duet-fsq"``, ``"mock"``, ``"gepard[:NAME|DIR]"`` (default gepard-tiny),
    ``"luna[:NAME|DIR]"`` (default luna-tiny), a name given to :func:`register_synthesizer`, or a shipped model's
    name or directory as ``duet speak`` takes it (its family read from its ``config.json``)."""
    name, _, arg = spec.partition(":")
    name = _ALIASES.get(name, name)
    factory = _REGISTRY.get(name)
    if factory is None:
        from duet.shipped import model_type

        try:
            _, kind = model_type(spec)
        except DuetError:
            kind = None
        if kind not in _REGISTRY:
            raise DuetError(f"unknown model {spec!r}: neither a shipped model name or directory nor one of "
                            f"{', '.join(known_models())}")
        return _REGISTRY[kind](spec, options)
    return factory(arg or None, options)
