"""Gepard's frame sampler: one batched, factorised sampling step that ``duet.gepard.generate``, the Gepard runtime
behind ``duet speak`` and ``duet serve`` (``duet.tts.gepard``) and the vLLM path (``duet.serve.vllm.sampler``) all
call, so one model, text and seed give the same frames in each.

Shape legend: B rows, C code channels per frame, V the widest channel alphabet (narrower channels pad their logits
with -inf).

Each row samples with its own temperature, top-k, top-p and ``torch.Generator``; the random numbers a row draws
depend only on that row's generator, so a row's output is the same whether it runs alone or in a batch (the
engine's determinism contract, tested in ``tests/serve/test_sampling.py``). Sampling is Gumbel-max:
``argmax(logits / temperature + Gumbel noise)`` draws from ``softmax(logits / temperature)`` and, unlike
``torch.multinomial``, takes per-row noise without a per-row loop over the batch. Temperature 0 is greedy.
"""

from __future__ import annotations

from typing import Sequence

import torch

from duet.sampling import SamplingParams


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


def sample_frames(logits: torch.Tensor, temperature: Sequence[float], top_k: Sequence[int],
                  top_p: Sequence[float], generators: Sequence[torch.Generator | None]) -> torch.Tensor:
    """One frame per row: logits (B, C, V) -> codes (B, C) int64, row b sampled at temperature[b] (0 = greedy),
    top_k[b] (0 = off), top_p[b] (1 = off) with generators[b] (None: torch's global generator)."""
    B, C, V = logits.shape
    if not len(temperature) == len(top_k) == len(top_p) == len(generators) == B:
        raise ValueError(f"need {B} temperatures, top-k, top-p and generators")
    logits = logits.float()
    temp = torch.tensor([float(t) for t in temperature], device=logits.device)
    greedy = temp == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temp), temp).view(B, 1, 1)
    if any(k > 0 for k in top_k) or any(p < 1.0 for p in top_p):
        scaled = filter_logits(scaled, torch.tensor(list(top_k), dtype=torch.long, device=logits.device),
                               torch.tensor([float(p) for p in top_p], device=logits.device))
    # Per-row noise from the row's own generator: batch composition never changes a row's random stream.
    uniform = torch.stack([torch.rand((C, V), generator=g, device=g.device if g is not None else logits.device)
                           for g in generators])  # (B, C, V)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-10, 1.0 - 1e-7)))
    gumbel = gumbel.to(logits.device).masked_fill(greedy.view(B, 1, 1), 0.0)
    return torch.argmax(scaled + gumbel, dim=-1)  # (B, C)


def sample_requests(logits: torch.Tensor, params: Sequence[SamplingParams],
                    generators: Sequence[torch.Generator]) -> torch.Tensor:
    """One frame per request: logits (B, C, V) -> codes (B, C) int64, row b sampled with params[b], generators[b]."""
    if len(params) != logits.shape[0]:
        raise ValueError(f"need {logits.shape[0]} params, got {len(params)}")
    return sample_frames(logits, [p.temperature for p in params], [p.top_k for p in params],
                         [p.top_p for p in params], generators)


def channel_logit_mask(levels: Sequence[int]) -> torch.Tensor:
    """(C, V) additive mask: 0 inside each channel's alphabet, -inf beyond it (V = max level)."""
    V = max(levels)
    mask = torch.full((len(levels), V), float("-inf"))
    for c, level in enumerate(levels):
        mask[c, :level] = 0.0
    return mask
