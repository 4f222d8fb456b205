"""Luna-TTS Realtime's continual-training objective: the block-wise absorbing forward process, the block-diffusion
loss and the end head's cross-entropy (the model and the block geometry are ``duet.luna.realtime``; the design,
noise and end-of-speech rules are in its docstring).

Shape legend: B batch, T target frames, N blocks, B_k frames per block, F = N B_k frames per stream, Q codebooks,
K codes per codebook.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from duet.errors import DuetError
from duet.luna.diffusion import DiffusionConfig, drop_text, sample_noise_level, split_prompt, weighted_cell_loss
from duet.luna.model import LunaInputs
from duet.luna.realtime import LunaRealtime, RealtimeLogits, num_blocks
from duet.nn.masks import lengths_to_mask


def end_targets(target_lengths: torch.Tensor, block_size: int, frames: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of the end head over F noisy frames: target_lengths (B,) -> (past_end (B, F) bool: frame >= T_b,
    supervised (B, F) bool: frame inside the row's ``num_blocks`` blocks)."""
    i = torch.arange(frames, device=target_lengths.device)[None, :]  # (1, F)
    past_end = i >= target_lengths[:, None]  # (B, F)
    supervised = i < (num_blocks(target_lengths, block_size) * block_size)[:, None]  # (B, F)
    return past_end, supervised


def mask_blocks(
    target: torch.Tensor,
    target_lengths: torch.Tensor,
    t: torch.Tensor,
    block_size: int,
    mask_id: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise absorbing forward process: every real cell of block n of row b is masked with probability t_{b,n}.

    target (B, T, Q) clean, target_lengths (B,), t (B, N) with N >= max ``num_blocks`` -> (noisy (B, F, Q), masked
    (B, F, Q) bool), F = N B_k. Frames past a row's end (and padding) hold ``mask_id`` and are never "masked" (they
    have no code target). One uniform draw per cell of the (B, F, Q) grid, in that order.
    """
    B, T, Q = target.shape
    N = t.shape[1]
    Fr = N * block_size
    if int(num_blocks(target_lengths, block_size).max()) > N:
        raise DuetError(f"{N} noise levels per row do not cover {int(target_lengths.max())} frames of this batch")
    grid = target.new_full((B, Fr, Q), mask_id)
    grid[:, : min(T, Fr)] = target[:, :Fr]  # frames past Fr are padding of every row
    real = lengths_to_mask(target_lengths, Fr)[:, :, None]  # (B, F, 1)
    where = generator.device if generator is not None else target.device
    u = torch.rand((B, Fr, Q), generator=generator, device=where).to(target.device)  # (B, F, Q)
    t_frame = t.repeat_interleave(block_size, dim=1)  # (B, F): t of each frame's block
    masked = (u < t_frame[:, :, None]) & real  # (B, F, Q)
    noisy = grid.masked_fill(masked | ~real, mask_id)
    return noisy, masked


@dataclass(frozen=True)
class RealtimeObjective:
    diffusion: DiffusionConfig = DiffusionConfig()  # t_min, text dropout 0.1, prompt splits: as Luna's
    end_weight: float = 1.0  # weight of the end head's BCE next to the diffusion loss (duet's choice)

    def __post_init__(self) -> None:
        if self.end_weight < 0:
            raise DuetError(f"end_weight must be >= 0, got {self.end_weight}")


@dataclass(frozen=True)
class RealtimeLoss:
    loss: torch.Tensor  # scalar: diffusion (codebook-weighted, if asked) + end_weight * end
    diffusion: torch.Tensor  # scalar, detached: sum of masked CE / t_block over the number of target cells (unweighted)
    end: torch.Tensor  # scalar: mean BCE of the end head over the supervised noisy frames
    masked_ce: torch.Tensor  # detached: plain mean CE over masked cells (nan when none)
    masked_accuracy: torch.Tensor  # detached
    end_accuracy: torch.Tensor  # detached: (logit > 0) == past_end over the supervised frames
    num_masked: int
    num_cells: int


def block_diffusion_loss(
    logits: RealtimeLogits,
    target: torch.Tensor,
    target_lengths: torch.Tensor,
    masked: torch.Tensor,
    t: torch.Tensor,
    block_size: int,
    end_weight: float = 1.0,
    codebook_weights: tuple[float, ...] = (),
) -> RealtimeLoss:
    """logits over F noisy frames, clean target (B, T, Q), target_lengths (B,), masked (B, F, Q), t (B, N).

    ``codebook_weights`` weigh the codebooks in the loss as Luna's (``diffusion.masked_diffusion_loss``); the logged
    ``diffusion`` stays the unweighted bound.
    """
    B, Fr, Q, K = logits.codes.shape
    num_cells = int(target_lengths.sum()) * Q
    if num_cells <= 0:
        raise DuetError("a batch needs at least one target frame")
    grid = target.new_zeros((B, Fr, Q))
    # padding may hold the mask id: clamp it into range (it is never a target cell)
    grid[:, : min(target.shape[1], Fr)] = target[:, :Fr].clamp(0, K - 1)  # (B, F, Q)
    ce = F.cross_entropy(logits.codes.reshape(-1, K).float(), grid.reshape(-1), reduction="none").view(B, Fr, Q)
    masked = masked & lengths_to_mask(target_lengths, Fr)[:, :, None]
    m = masked.to(ce.dtype)
    t_frame = t.repeat_interleave(block_size, dim=1)[:, :Fr]  # (B, F)
    weighted, bound = weighted_cell_loss(ce * m / t_frame[:, :, None], num_cells, codebook_weights)
    diffusion = weighted.detach() if bound is None else bound  # the unweighted bound, logged

    past_end, supervised = end_targets(target_lengths, block_size, Fr)
    bce = F.binary_cross_entropy_with_logits(logits.end.float(), past_end.float(), reduction="none")  # (B, F)
    end = (bce * supervised).sum() / supervised.sum()
    with torch.no_grad():
        n = int(masked.sum())
        masked_ce = (ce * m).sum() / n if n else torch.tensor(float("nan"))
        acc = ((logits.codes.argmax(-1) == grid) & masked).sum().float() / n if n else torch.tensor(float("nan"))
        end_acc = (((logits.end > 0) == past_end) & supervised).sum().float() / supervised.sum()
    return RealtimeLoss(
        weighted + end_weight * end, diffusion, end, masked_ce.detach(), acc, end_acc, n, num_cells
    )


def realtime_training_loss(
    model: LunaRealtime,
    inputs: LunaInputs,
    objective: RealtimeObjective = RealtimeObjective(),
    generator: torch.Generator | None = None,
) -> RealtimeLoss:
    """One continual-training forward: prompt split, text dropout, per-block noise, masking, two-stream forward, loss.

    ``inputs.target`` is the clean grid (B, T, Q). The shared training loop back-propagates ``.loss``.
    """
    cfg, bk = objective.diffusion, model.block_size
    mask_id = model.mask_id
    if inputs.prompt is None and cfg.prompt_prob > 0:
        prompt, prompt_lengths, target, target_lengths = split_prompt(
            inputs.target, inputs.target_lengths, cfg, mask_id, generator
        )
        inputs = replace(
            inputs, prompt=prompt, prompt_lengths=prompt_lengths, target=target, target_lengths=target_lengths
        )
    text_lengths, _ = drop_text(inputs.text_lengths, cfg.text_drop_prob, generator)
    B = inputs.batch_size
    N = int(num_blocks(inputs.target_lengths, bk).max())
    t = sample_noise_level(B * N, cfg.t_min, generator, inputs.target.device).view(B, N)  # (B, N) independent
    noisy, masked = mask_blocks(inputs.target, inputs.target_lengths, t, bk, mask_id, generator)
    logits = model(replace(inputs, text_lengths=text_lengths), noisy)
    return block_diffusion_loss(logits, inputs.target, inputs.target_lengths, masked, t, bk, objective.end_weight,
                                cfg.codebook_weights)
