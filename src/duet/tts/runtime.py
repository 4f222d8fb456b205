"""The one shape every model family takes: a runtime that prefills requests once and advances them step by step.

``duet speak`` (``duet.tts.speaker.Speaker``), the serving engine (``duet.serve.engine.Engine``) and so ``duet eval``
drive the same :class:`FamilyRuntime` of a model, so one model, text and seed give the same frames in each by
construction. The weightless mock (``duet.serve.mock``) and Gepard on vLLM (``duet.serve.vllm.engine``) implement
the same protocol, so the engine drives them the same way. A runtime turns a :class:`SynthesisRequest` into
per-request state once (``prefill``) and then advances every running request by one step (``step``), returning the
frames that became final:

- Gepard (autoregressive, ``duet.tts.gepard``): one step = one KV-cached decode step; each row yields one frame and
  its stop probability. The frame sampled at the step whose stop probability exceeds the request's
  ``stop_threshold`` is the terminal "phantom" frame (DESIGN.md §A, heads and loss) and is not emitted.
- Luna (masked diffusion, ``duet.tts.luna``) and Luna Realtime (``duet.tts.luna_realtime``): one step = one
  refinement step; rows emit no frames until a block (Realtime) or the whole grid is committed, then return its
  frames, with ``final=True`` on the last one.

What a step's output means is one rule for every caller (:func:`settle`). What every family refuses the same way
(unknown voice, cloning, an emotion, speed, nucleus sampling) is checked once (:func:`check_request`), from the
family's :class:`FamilyTraits`; a runtime's own ``check`` adds what only it knows (positions, predicted length).
What a request costs (``step_cost``: the most steps it takes, and the positions each of them runs through the
model for it) is the runtime's to say too: a serving engine prices a request by it (``duet.serve.cost``).

A runtime whose frames follow a layout of its text (aligned text input) puts that layout on every output of the
request (``StepOutput.layout``, which ``duet.tts.timestamps`` reads into word timings) and says so in its traits
(``timings``).

Failures stay with their request. ``prefill`` and ``step`` either succeed for every request given or raise with
every state as it was (random streams included: :func:`restoring_generators`), so a caller can run the requests
again one by one; a runtime that steps its requests one after another returns ``StepOutput(error=...)`` for a
request that failed instead of raising.

Shape legend: K code streams of the codec (what ``Codec.decode`` reads), t frames emitted by one step.
The codes a runtime returns are already in the codec's space (Gepard packs its 32 channel digits into 8 groups).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, Iterator, Protocol, Sequence, TypeVar, runtime_checkable

import torch

from duet.codecs.base import Codec
from duet.errors import InvalidRequest
from duet.finish import BOUND, STOP
from duet.sampling import SamplingParams
from duet.text.tokens import EMOTIONS
from duet.tts.request import SynthesisRequest
from duet.tts.timestamps import TextLayout


@dataclass(frozen=True)
class StepOutput:
    """What one request produced in one step."""

    codes: torch.Tensor  # (K, t) int64, t >= 0 frames that became final
    stop_prob: float | None = None  # AR families: probability that this step is the end (compared to the threshold)
    final: bool = False  # the runtime says this request is complete after these codes (non-AR families)
    error: str | None = None  # this request failed in this step (the others of the step did not)
    layout: TextLayout | None = None  # how the request's text lies over its frames (aligned models), else None


@dataclass(frozen=True)
class StepCost:
    """What a request costs a serving engine (``duet.serve.cost`` prices it): the most ``step`` calls it takes, and
    the positions the model runs for it in each (its share of a batched step)."""

    steps: int
    positions: int


@dataclass(frozen=True)
class FamilyTraits:
    """What a family can do, for the checks every family shares (:func:`check_request`). The two kinds of cloning
    are the ones ``duet.families`` names: from a reference clip alone, and from a voice prompt (a clip and its
    transcript, continued by infilling)."""

    voices: tuple[str, ...] = ("default",)  # built-in speakers; the first is the default
    clone_from_audio: bool = False  # takes a raw reference clip (the speech API's ``reference_audio``)
    clone_from_prompt: bool = False  # takes a prepared VoicePrompt (clip codes + transcript)
    speed: str | None = None  # None: takes a speed; else why it has none (the error message says it)
    nucleus: bool = False  # samples with top_p < 1
    steps: bool = False  # has refinement steps (``steps`` means something to it)
    clone_from_audio_note: str = ""  # why a reference clip alone is refused, appended to the message
    emotions: tuple[str, ...] = ()  # the utterance-level emotions it takes (EMOTIONS); (): no emotion control
    emotion_note: str = ""  # why it takes none, appended to the message
    tags: tuple[str, ...] = ()  # the inline event tags its text input reads as event tokens (NONVERBALS); (): none
    timings: bool = False  # its outputs carry a TextLayout: word timings from its own alignment


@runtime_checkable
class FamilyRuntime(Protocol):
    """A model, loaded: what it can do, its checks and bounds (asked by any thread, at admission), and its step
    code (prefill once, step, release; called from one thread at a time, ``settle`` reads a step)."""

    name: str  # the model id (what the speech API's ``model`` names)
    codec: Codec  # what its codes decode with (``Codec.stream_decoder``)
    traits: FamilyTraits
    max_frames: int  # hard length bound of one request (the position budget)
    default_params: SamplingParams  # what a request samples with where it sets no field
    cache_bytes_per_position: int  # cache bytes one position of a request costs (all layers, keys and values)

    def check(self, request: SynthesisRequest) -> None:
        """Raise InvalidRequest for what only this family knows it cannot do (after :func:`check_common`)."""
        ...

    def frame_bound(self, request: SynthesisRequest) -> int:
        """The length bound of a request that sets no ``max_frames``, e.g. from its text (callers cap it at
        ``max_frames``)."""
        ...

    def prompt_positions(self, request: SynthesisRequest) -> int:
        """Positions prefill takes for this request (text with service tokens, a prompt's frames)."""
        ...

    def step_cost(self, request: SynthesisRequest, frames: int) -> StepCost:
        """What producing at most ``frames`` frames costs this request: one step per frame of an autoregressive
        family, each running a position per cached row; the refinement steps of a diffusion family, each running
        its rows' whole grid or block."""
        ...

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[Any]:
        """Run the prompts (together or one by one) and return one opaque state per request."""
        ...

    def step(self, states: Sequence[Any]) -> list[StepOutput]:
        """Advance every given request by one step; states are updated in place."""
        ...

    def release(self, state: Any) -> None:
        """Free a request's cache; the state is never used again."""
        ...


def check_request(request: SynthesisRequest, runtime: FamilyRuntime) -> None:
    """The checks every family shares, then the runtime's own. Raises InvalidRequest naming the field."""
    check_common(request, runtime.name, runtime.traits)
    runtime.check(request)


def check_common(request: SynthesisRequest, name: str, traits: FamilyTraits) -> None:
    """The checks every family shares, from its traits (cheap: no model runs)."""
    if not request.text.strip():
        raise InvalidRequest("the text is empty", param="input")
    if request.reference is not None and not traits.clone_from_audio:
        raise InvalidRequest(f"{name} cannot clone a voice from reference audio{traits.clone_from_audio_note}",
                             param="reference_audio", code="cloning_unsupported")
    if request.prompt is not None and not traits.clone_from_prompt:
        raise InvalidRequest(f"{name} cannot clone a voice: it takes no voice prompt", param="prompt",
                             code="cloning_unsupported")
    if request.voice is not None and request.voice not in traits.voices:
        raise InvalidRequest(f"unknown voice {request.voice!r}; {name} has {', '.join(traits.voices)}",
                             param="voice", code="voice_not_found")
    if request.emotion is not None:
        check_emotion(request.emotion, name, traits)
    if not (math.isfinite(request.speed) and request.speed > 0):
        raise InvalidRequest(f"speed must be a positive number (1 = as predicted, 2 = twice as fast), got "
                             f"{request.speed}", param="speed")
    if request.speed != 1.0 and traits.speed is not None:
        raise InvalidRequest(f"{name} has no speed control: {traits.speed}; use speed 1", param="speed")
    if request.pace is not None and request.pace.layout and not traits.timings:
        raise InvalidRequest(f"{name} cannot lay out SSML pauses or rates inside a text: it has no aligned text input "
                             "(a duration layout of its text)", param="input", code="ssml_unsupported")
    if request.params.top_p < 1.0 and not traits.nucleus:
        raise InvalidRequest(f"{name} samples with temperature and top_k only; top_p must be 1", param="top_p")


def check_emotion(emotion: str, name: str, traits: FamilyTraits) -> None:
    """An emotion is one of EMOTIONS, and one the family takes. The error names ``instructions``: the speech API's
    field that carries it (``duet speak`` prints the message alone)."""
    if emotion not in EMOTIONS:
        raise InvalidRequest(f"unknown emotion {emotion!r}; choose one of: {', '.join(EMOTIONS)}",
                             param="instructions", code="invalid_value")
    if emotion not in traits.emotions:
        note = traits.emotion_note or " (Luna models take one)"
        raise InvalidRequest(f"{name} has no emotion control{note}", param="instructions",
                             code="emotion_unsupported")


def settle(out: StepOutput, produced: int, bound: int, stop_threshold: float) -> tuple[torch.Tensor, str | None]:
    """One step's output of a request that has ``produced`` frames of at most ``bound`` -> (the codes to keep
    (K, t), never past the bound; STOP, BOUND or None while it goes on). The one reading of a step for the
    Speaker and the engine: a stop probability over the threshold ends it without this step's (phantom) frame, a
    ``final`` output ends it after its frames, reaching the bound ends it there."""
    if out.stop_prob is not None and out.stop_prob > stop_threshold:
        return out.codes[..., :0], STOP
    codes = out.codes[..., : max(bound - produced, 0)]
    if out.final:
        return codes, STOP
    if produced + codes.shape[-1] >= bound:
        return codes, BOUND
    return codes, None


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, dtype: torch.dtype, rows: int = 1) -> int:
    """Bytes one cached position costs: keys and values of every layer, in each of ``rows`` rows (CFG: 2)."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    return rows * layers * 2 * kv_heads * head_dim * itemsize


@contextmanager
def restoring_generators(generators: Sequence[torch.Generator]) -> Iterator[None]:
    """Put the generators' states back if the block raises: a failed step leaves its requests' random streams as
    they were, so running them again draws the same numbers."""
    saved = [g.get_state() for g in generators]
    try:
        yield
    except BaseException:
        for g, state in zip(generators, saved):
            g.set_state(state)
        raise


def plan_key(request: SynthesisRequest) -> Hashable:
    """What a request's text plan depends on: its text, emotion, speed, voice prompt and SSML pace (not its
    sampling)."""
    return request.text, request.emotion, request.speed, request.prompt, request.pace  # a VoicePrompt: by identity


P = TypeVar("P")


class PerRequest(Generic[P]):
    """A value computed once per request text (check, frame_bound, prompt_positions and prefill all ask for it),
    kept for the ``size`` most recent. Safe from any thread; two threads may both compute it once, with equal
    results. Keyed by :func:`plan_key`, so a request copied with other sampling (the Speaker sets its bound) finds
    the plan of the original."""

    def __init__(self, size: int = 256) -> None:
        self._values: OrderedDict[Hashable, P] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def get(self, request: SynthesisRequest, compute: Callable[[SynthesisRequest], P]) -> P:
        key = plan_key(request)
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
        if value is None:
            value = compute(request)
            with self._lock:
                self._values[key] = value
                while len(self._values) > self._size:
                    self._values.popitem(last=False)
        return value
