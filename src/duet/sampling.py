"""How a request samples, and how many frames a text may take: one type each for every family and every way in.

``duet speak`` (``duet.tts.speaker``), the serving engine and its speech API, the vLLM path, ``duet eval`` and
post-training all read the same :class:`SamplingParams`; Gepard's decode loop (``duet.gepard.generate``), its
runtime and the vLLM client bound a text's frames with the same :class:`FrameBound`. Every number is checked against
``duet.limits``, once, here. The sampling itself is Gepard's one sampler (``duet.gepard.sampling``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from duet.errors import DuetError, InvalidRequest
from duet.limits import out_of_bounds


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. ``max_frames=None`` means the runtime's own bound; ``seed=None`` a random seed.

    Each family reads the fields that apply to it: Gepard all but ``steps``; Luna and Luna Realtime
    ``temperature``, ``top_k``, ``steps`` (Realtime: per block), ``cfg_scale``, ``max_frames`` and ``seed`` (they
    refuse ``top_p`` < 1; Realtime stops by its own end-of-speech head, not by ``stop_threshold``). A value outside
    ``duet.limits`` is an InvalidRequest naming the field (the speech API's 400).
    """

    temperature: float = 1.0  # 0 = greedy
    top_k: int = 0  # 0 = off; ties keep the lower codes (stable sort)
    top_p: float = 1.0  # nucleus mass in (0, 1]
    stop_threshold: float = 0.5  # stop when the model's stop probability exceeds it (Gepard §3.3)
    max_frames: int | None = None  # length bound; reaching it ends the request with reason "bound"
    seed: int | None = None
    # Refinement steps of a non-autoregressive family (Luna: MaskGIT steps, §2.5; Realtime: per block); None = default.
    # Autoregressive families (Gepard) decode one frame per step and ignore it.
    steps: int | None = None
    # Classifier-free guidance scale w (1 = off); None = the family's default (Luna 2, Gepard 1).
    cfg_scale: float | None = None

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            problem = None if value is None else out_of_bounds(f.name, value)
            if problem:
                raise InvalidRequest(problem, param=f.name)


@dataclass(frozen=True)
class FrameBound:
    """The most frames a generation of a text may emit: ``min(max_frames, ceil(frames_per_token * tokens +
    margin_frames))``; a request's own ``SamplingParams.max_frames`` takes its place.

    Defaults from the report's data (Gepard §4.1.1): 8.97 s mean clips (193 frames at 21.5 Hz) for 32.7 mean text
    tokens is 5.9 frames per Qwen token; 12 per token is twice that, + 2 s margin, capped at the longest training
    clip (40 s = 860 frames). Set them per model and codec.
    """

    frames_per_token: float = 12.0
    margin_frames: int = 43  # 2 s at 21.5 frames/s
    max_frames: int = 860  # hard cap: 40 s at 21.5 frames/s (the report's longest clip)

    def __post_init__(self) -> None:
        if self.max_frames < 1 or self.margin_frames < 0 or self.frames_per_token < 0:
            raise DuetError("max_frames must be >= 1, margin_frames and frames_per_token >= 0")

    def frames(self, num_text_tokens: int) -> int:
        """The bound for a text of ``num_text_tokens`` tokens (service tokens not counted)."""
        return min(self.max_frames, math.ceil(self.frames_per_token * max(num_text_tokens, 0) + self.margin_frames))
