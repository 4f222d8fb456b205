"""The narrow interface between the serving engine and a model family.

The engine (``engine.py``) knows nothing about transformers, heads or codecs' insides. Each family supplies an
adapter that turns a :class:`SynthesisRequest` into per-request state once (``prefill``) and then advances every
running request by one *engine step* (``step``), returning the frames that became final:

- Gepard (autoregressive): one step = one decode step of the KV-cached backbone; each row yields one frame and
  its stop probability. The frame sampled at the step whose stop probability exceeds the request's
  ``stop_threshold`` is the terminal "phantom" frame (DESIGN.md §A, heads and loss) and is not emitted.
- Luna (masked diffusion, ``luna_adapter.py``) and Luna Realtime (``luna_realtime_adapter.py``): one step = one
  refinement step for every running request ("batched by refinement step"); rows emit no frames until a block
  (Realtime) or the whole grid is committed, then return its frames, with ``final=True`` on the last one. Luna holds
  no KV cache; its ``cache_bytes_per_position`` charges the per-position working set of a step instead.

Failures stay with their request. ``prefill`` and ``step`` either succeed for every request given or raise with
every state as it was (random streams included: :func:`restoring_generators`), so the engine can run the requests
again one by one and end only the one that fails; an adapter that steps its requests one after another returns
``StepOutput(error=...)`` for a request that failed instead of raising.

Shape legend: K code streams of the codec (what ``Codec.decode`` reads), t frames emitted by one step.
The codes an adapter returns are already in the codec's space (Gepard packs its 32 channel digits into 8 groups).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol, Sequence, runtime_checkable

import numpy as np
import torch

from duet.codecs.base import Codec
from duet.serve.sampling import SamplingParams


@dataclass(frozen=True, eq=False)
class SynthesisRequest:
    """One utterance to speak. ``reference`` (mono float32 at the codec's sample rate) asks for voice cloning."""

    text: str
    voice: str | None = None
    instructions: str | None = None  # emotion / style text, passed to the adapter unchanged
    speed: float = 1.0
    reference: np.ndarray | None = field(default=None, repr=False)  # (S,)
    params: SamplingParams = SamplingParams()


@dataclass(frozen=True)
class StepOutput:
    """What one request produced in one engine step."""

    codes: torch.Tensor  # (K, t) int64, t >= 0 frames that became final
    stop_prob: float | None = None  # AR families: probability that this step is the end (compared to the threshold)
    final: bool = False  # the adapter says this request is complete after these codes (non-AR families)
    error: str | None = None  # this request failed in this step (the others of the step did not)


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


@runtime_checkable
class ModelAdapter(Protocol):
    """A model family behind the engine. Called from the engine's single thread only."""

    name: str  # the model id clients put in ``model``
    codec: Codec
    voices: tuple[str, ...]  # built-in speakers; the first is the default
    supports_cloning: bool
    max_frames: int  # hard length bound of one request (the adapter's position budget)
    default_params: SamplingParams  # what a request samples with where it sets no field (the API fills the rest)
    cache_bytes_per_position: int  # KV-cache bytes one cached position costs (all layers, keys and values)

    def validate(self, request: SynthesisRequest) -> None:
        """Raise ``InvalidRequest`` for what this model cannot do (unknown voice, speed, cloning). Cheap; any thread."""
        ...

    def frame_bound(self, request: SynthesisRequest) -> int:
        """The length bound of a request that sets no ``max_frames`` (at most ``max_frames``), e.g. from its text."""
        ...

    def prompt_positions(self, request: SynthesisRequest) -> int:
        """Positions prefill caches for this request (speaker prefix + text with service tokens)."""
        ...

    def prefill(self, requests: Sequence[SynthesisRequest], seeds: Sequence[int]) -> list[Any]:
        """Run the prompts (together or one by one) and return one opaque state per request."""
        ...

    def step(self, states: Sequence[Any]) -> list[StepOutput]:
        """Advance every given request by one step; states are updated in place (their caches grow)."""
        ...

    def release(self, state: Any) -> None:
        """Free a request's cache; the state is never used again."""
        ...
