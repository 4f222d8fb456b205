"""Per-request sampling parameters, and the frames of a batch of requests sampled with them.

One shape for every way in: ``duet speak`` (``duet.tts.speaker``), the serving engine and its speech API, and the
vLLM path read the same :class:`SamplingParams`. The sampling itself is Gepard's one sampler
(``duet.gepard.sampling``): each request samples with its own parameters and ``torch.Generator``, so its frames do
not depend on the batch it runs in.

Shape legend: B requests in the running batch, C code channels per frame, V the widest channel alphabet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from duet.errors import DuetError
from duet.gepard.sampling import sample_frames
from duet.limits import MAX_TOP_K


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. ``max_frames=None`` means the runtime's own bound; ``seed=None`` a random seed.

    Each family reads the fields that apply to it: Gepard all but ``steps``; Luna and Luna Realtime
    ``temperature``, ``top_k``, ``steps`` (Realtime: per block), ``cfg_scale``, ``max_frames`` and ``seed`` (they
    refuse ``top_p`` < 1; Realtime stops by its own end-of-speech head, not by ``stop_threshold``).
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
        if not 0.0 <= self.temperature <= 10.0:
            raise DuetError(f"temperature must be in [0, 10], got {self.temperature}")
        if not 0 <= self.top_k <= MAX_TOP_K:
            raise DuetError(f"top_k must be in [0, {MAX_TOP_K}] (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise DuetError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 < self.stop_threshold < 1.0:
            raise DuetError(f"stop_threshold must be in (0, 1), got {self.stop_threshold}")
        if self.max_frames is not None and self.max_frames < 1:
            raise DuetError(f"max_frames must be >= 1, got {self.max_frames}")
        if self.steps is not None and self.steps < 1:
            raise DuetError(f"steps must be a positive integer (8, 16 or 32 are typical), got {self.steps}")
        if self.cfg_scale is not None and not (math.isfinite(self.cfg_scale) and self.cfg_scale >= 0):
            raise DuetError(f"cfg_scale must be a finite number >= 0 (1 = no guidance), got {self.cfg_scale}")


def sample_requests(logits: torch.Tensor, params: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One frame per request: logits (B, C, V) -> codes (B, C) int64, row b sampled with params[b], generators[b]."""
    if len(params) != logits.shape[0]:
        raise ValueError(f"need {logits.shape[0]} params, got {len(params)}")
    return sample_frames(logits, [p.temperature for p in params], [p.top_k for p in params],
                         [p.top_p for p in params], generators)
