"""Per-request sampling parameters and one batched, factorised sampling step.

Shape legend: B requests in the running batch, C code channels per frame, V the widest channel alphabet
(narrower channels pad their logits with -inf).

Each row of a batch samples with its own parameters and its own ``torch.Generator``; the random numbers a row
draws depend only on that row's generator, so a request's output is the same whether it runs alone or joins a
batch at any step (the engine's determinism contract, tested in ``tests/serve/test_sampling.py``).
Sampling is Gumbel-max: ``argmax(logits / temperature + Gumbel noise)`` draws from ``softmax(logits / temperature)``
and, unlike ``torch.multinomial``, takes per-row noise without a per-row loop over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from duet.errors import DuetError


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. ``max_frames=None`` means the adapter's own cap; ``seed=None`` a random seed.

    Each family reads the fields that apply to it: Gepard all but ``steps``; Luna and Luna Realtime
    ``temperature``, ``top_k``, ``steps`` (Realtime: per block), ``max_frames`` and ``seed`` (they refuse ``top_p``
    < 1; Realtime stops by its own end-of-speech head, not by ``stop_threshold``).
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

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 10.0:
            raise DuetError(f"temperature must be in [0, 10], got {self.temperature}")
        if self.top_k < 0:
            raise DuetError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise DuetError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 < self.stop_threshold < 1.0:
            raise DuetError(f"stop_threshold must be in (0, 1), got {self.stop_threshold}")
        if self.max_frames is not None and self.max_frames < 1:
            raise DuetError(f"max_frames must be >= 1, got {self.max_frames}")
        if self.steps is not None and self.steps < 1:
            raise DuetError(f"steps must be >= 1, got {self.steps}")


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Mask to -inf what top-k and top-p drop. logits (B, C, V); top_k (B,) long (0 = off); top_p (B,) float.

    The kept set is a prefix of the stably sorted logits, so among equal logits the lower code wins; at least
    one code per channel is always kept.
    """
    B, C, V = logits.shape
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)  # (B, C, V)
    rank = torch.arange(V, device=logits.device).view(1, 1, V)
    k = torch.where(top_k > 0, top_k, torch.full_like(top_k, V)).view(B, 1, 1)
    keep = (rank < k).expand(B, C, V).clone()
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # (B, C, V) probability of the better codes
    keep &= mass_before < top_p.view(B, 1, 1)
    keep[..., 0] = True
    kept = sorted_logits.masked_fill(~keep, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, kept)


def sample_frames(
    logits: torch.Tensor, params: Sequence[SamplingParams], generators: Sequence[torch.Generator]
) -> torch.Tensor:
    """One frame per row: logits (B, C, V) -> codes (B, C) int64, row b sampled with params[b], generators[b]."""
    B, C, V = logits.shape
    if len(params) != B or len(generators) != B:
        raise ValueError(f"need {B} params and generators, got {len(params)} and {len(generators)}")
    logits = logits.float()
    temperature = torch.tensor([p.temperature for p in params], device=logits.device)
    greedy = temperature == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature).view(B, 1, 1)
    if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
        top_k = torch.tensor([p.top_k for p in params], dtype=torch.long, device=logits.device)
        top_p = torch.tensor([p.top_p for p in params], device=logits.device)
        scaled = filter_logits(scaled, top_k, top_p)
    # Per-row noise from the row's own generator: batch composition never changes a row's random stream.
    uniform = torch.stack([torch.rand((C, V), generator=g, device=g.device) for g in generators])  # (B, C, V)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
    gumbel = gumbel.to(logits.device).masked_fill(greedy.view(B, 1, 1), 0.0)
    return torch.argmax(scaled + gumbel, dim=-1)  # (B, C)


def channel_logit_mask(levels: Sequence[int]) -> torch.Tensor:
    """(C, V) additive mask: 0 inside each channel's alphabet, -inf beyond it (V = max level)."""
    V = max(levels)
    mask = torch.full((len(levels), V), float("-inf"))
    for c, level in enumerate(levels):
        mask[c, :level] = 0.0
    return mask
