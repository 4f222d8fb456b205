"""The narrow interface between the serving engine and a model, and the one adapter of duet's families.

The engine (``engine.py``) knows nothing about transformers, heads or codecs' insides. It drives a
:class:`ModelAdapter`: ``validate`` a request, ask its ``frame_bound`` and ``prompt_positions``, ``prefill`` it once
and ``step`` every running request until ``duet.tts.runtime.settle`` says it ended, then ``release`` it. What a step
means, and how a failure stays with its request, is the family runtime's contract (``duet.tts.runtime``).

:class:`FamilyAdapter` serves any family runtime (Gepard, Luna, Luna Realtime) through that one interface; the
weightless mock (``mock.py``) and the vLLM path (``vllm/engine.py``) are the other adapters.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence, runtime_checkable

from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyRuntime, StepOutput, Stepped, check_request

__all__ = ["FamilyAdapter", "ModelAdapter", "StepOutput", "SynthesisRequest", "load_adapter"]


@runtime_checkable
class ModelAdapter(Stepped, Protocol):
    """A model behind the engine (``duet.tts.runtime.Stepped``: bounds, prefill, step, release) with what the speech
    API asks of it. Called from the engine's single thread only, but for the admission-time questions
    (``validate``, ``frame_bound``, ``prompt_positions``), which any thread may ask."""

    voices: tuple[str, ...]  # built-in speakers; the first is the default
    supports_cloning: bool  # takes the speech API's reference_audio

    def validate(self, request: SynthesisRequest) -> None:
        """Raise ``InvalidRequest`` for what this model cannot do (unknown voice, speed, cloning). Cheap; any thread."""
        ...


class FamilyAdapter:
    """A family runtime behind the engine: the checks every family shares plus the runtime's own, then its step
    code as it is. ``name`` is the model id clients send (default: the runtime's)."""

    def __init__(self, runtime: FamilyRuntime, name: str | None = None):
        self.runtime = runtime
        self.name = name or runtime.name
        self.codec = runtime.codec
        self.voices = runtime.traits.voices
        self.supports_cloning = runtime.traits.cloning

    # read through: a runtime's bounds and defaults follow its config
    max_frames = property(lambda self: self.runtime.max_frames)
    default_params = property(lambda self: self.runtime.default_params)
    cache_bytes_per_position = property(lambda self: self.runtime.cache_bytes_per_position)

    def validate(self, request: SynthesisRequest) -> None:
        check_request(request, self.runtime)

    def frame_bound(self, request: SynthesisRequest) -> int:
        return min(self.runtime.frame_bound(request), self.runtime.max_frames)

    def prompt_positions(self, request: SynthesisRequest) -> int:
        return self.runtime.prompt_positions(request)

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[Any]:
        return self.runtime.prefill(requests, seeds)

    def step(self, states: Sequence[Any]) -> list[StepOutput]:
        return self.runtime.step(states)

    def release(self, state: Any) -> None:
        self.runtime.release(state)


def load_adapter(name_or_path: str, codec: str | None = None, name: str | None = None,
                 device: str = "cpu") -> FamilyAdapter:
    """The adapter of a shipped model name or checkpoint directory of any family (``duet.tts.load_runtime``)."""
    from duet.tts import load_runtime

    return FamilyAdapter(load_runtime(name_or_path, codec=codec, device=device), name=name)
