"""Luna-TTS training objective: absorbing-state masked diffusion on the target grid (report §2.3, Eq. 2; §2.5).

Forward process. A noise level t in (0, 1] is drawn per utterance; each target cell (i, q) is independently replaced
by the mask token with probability t; conditions (text, prompt grid) are never masked. The grid is masked without
structure along time or depth (§2.5, "unrestricted random masking", after Zhu et al. 2026).

Loss. The model predicts every masked cell in parallel; the loss is the cross-entropy on masked cells weighted by 1/t,
which upper-bounds the negative log-likelihood (Sahoo et al. 2024 "MDLM"; Shi et al. 2024; Nie et al. 2025
"LLaDA"). Normalisation (duet's; LLaDA divides by batch x padded length, we by the real target cells only):

    loss = sum_b sum_{(i,q) masked in b} CE(i, q) / t_b  /  sum_b (T_b * Q)

i.e. the batch's ELBO bound in nats per target cell: for each utterance E_t,mask[sum_masked CE / t] equals the
MDLM bound on -log p(X_0 | c), and dividing by the number of target cells (not the number of masked ones) keeps the
estimator unbiased; a row whose draw masks no cell contributes 0, as it should. Prompt cells and padding are not
target cells.

Avoiding t = 0. t = t_min + (1 - t_min) * (1 - u) with u ~ U[0, 1), so t lies in (t_min, 1] (t_min = 1e-3 as in
LLaDA): the weight 1/t never exceeds 1/t_min, at the cost of a negligible bias from the excluded sliver (0, t_min].

Codebook weights (duet's, off by default; the report weighs every cell alike). ``codebook_weights`` (w_0 .. w_{Q-1})
multiply each codebook's cells in the training loss, normalised to mean 1 so the loss keeps its scale:

    loss_w = sum_b sum_{(i,q) masked in b} (w_q / mean(w)) CE(i, q) / t_b  /  sum_b (T_b * Q)

A tiny model spends most of its gradient on the deep RVQ codebooks, which sit near their unigram entropy, while the
first (coarse) codebook carries most of what is said; weighting it up moves capacity there. The loss is then no
longer the ELBO, so ``DiffusionLoss.bound`` keeps the unweighted value for comparing runs.

MaskGIT's objective (``objective="maskgit"``, duet's option for small models): the mask ratio is t = cos(pi/2 u),
u ~ U[0, 1) (Chang et al. 2022; more rows near fully masked, where decoding starts), and the loss is the mean CE of
the batch's masked cells, without the 1/t weight (whose rows of small t dominate the ELBO's gradient). It trains
the same conditional distributions, no longer weighted as the likelihood bound, which ``DiffusionLoss.bound``
still reports.

CFG. With probability 0.1 (§2.5) a row's text is dropped: its text length becomes 0, so the text positions are
masked out of attention and the row is conditioned on the prompt (if any) alone. This "empty text" is exactly the
null condition the decoder's unconditional rows use (``LunaModel.logits_fn``). Emotion and non-verbal tokens live in
the text, so they are dropped with it.

Prompt/target splits for cloning (§2.5: the prompt is the unmasked region of the same grid). With probability
``prompt_prob`` a row's first P frames, P ~ U{ceil(min_frac T) .. floor(max_frac T)} (at least 1 prompt and 1 target
frame), become the prompt condition and the rest the target. The text stays the whole utterance's, so at inference
cloning takes the prompt's transcript followed by the new text (as in MaskGCT / F5-TTS). The report gives neither the
probability nor the fraction range: prompt_prob 0.5 and 10%-50% are duet's choices.

Shape legend: B batch, T target frames, P prompt frames, Q codebooks, K codes per codebook, S text tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from duet.errors import DuetError
from duet.luna.model import LunaInputs, LunaModel
from duet.nn.masks import lengths_to_mask

OBJECTIVES = ("elbo", "maskgit")


@dataclass(frozen=True)
class DiffusionConfig:
    t_min: float = 1e-3  # noise levels are drawn in (t_min, 1]; caps the 1/t weight at 1000
    text_drop_prob: float = 0.1  # Luna §2.5: text dropped with probability 0.1 for CFG
    prompt_prob: float = 0.5  # probability that a row (without a prompt of its own) is split into prompt + target
    prompt_min_frac: float = 0.1  # prompt length as a fraction of the utterance's frames
    prompt_max_frac: float = 0.5
    codebook_weights: tuple[float, ...] = ()  # per-codebook loss weights (normalised to mean 1); () = all equal
    objective: str = "elbo"  # "elbo" (the report's, MDLM) or "maskgit" (cosine mask ratio, mean CE of masked cells)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise DuetError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if not 0.0 < self.t_min < 1.0:
            raise DuetError(f"t_min must lie in (0, 1), got {self.t_min}")
        for name in ("text_drop_prob", "prompt_prob"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise DuetError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.prompt_min_frac <= self.prompt_max_frac < 1.0:
            raise DuetError("need 0 < prompt_min_frac <= prompt_max_frac < 1")
        if self.codebook_weights and (min(self.codebook_weights) < 0 or sum(self.codebook_weights) <= 0):
            raise DuetError(f"codebook weights must be >= 0 with a positive sum, got {list(self.codebook_weights)}")


@dataclass(frozen=True)
class DiffusionLoss:
    loss: torch.Tensor  # scalar: sum over masked cells of (w_q) CE / t, over the number of target cells
    masked_ce: torch.Tensor  # scalar, detached: plain mean CE over masked cells (nan when none is masked)
    masked_accuracy: torch.Tensor  # scalar, detached: argmax accuracy over masked cells
    codebook_ce: torch.Tensor  # (Q,) detached: mean CE over masked cells of each codebook
    num_masked: int
    num_cells: int
    bound: torch.Tensor | None = None  # scalar, detached: the unweighted loss (the ELBO bound) when weights are used


def weighted_cell_loss(per_cell: torch.Tensor, num_cells: int,
                       codebook_weights: tuple[float, ...] = ()) -> tuple[torch.Tensor, torch.Tensor | None]:
    """per_cell (B, T, Q) (CE / t on masked cells, 0 elsewhere) -> (loss, bound): the sum over ``num_cells`` with
    each codebook's cells weighted (weights normalised to mean 1), and the unweighted sum, detached (None when the
    weights are equal, the loss then being the bound itself)."""
    plain = per_cell.sum() / num_cells
    if not codebook_weights:
        return plain, None
    Q = per_cell.shape[-1]
    if len(codebook_weights) != Q:
        raise DuetError(f"{len(codebook_weights)} codebook weights for a grid of {Q} codebooks")
    w = torch.tensor(codebook_weights, dtype=per_cell.dtype, device=per_cell.device)
    return (per_cell * (w * (Q / w.sum()))).sum() / num_cells, plain.detach()


def _rand(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U[0, 1) drawn on the generator's device (a CPU generator can drive GPU training), then moved."""
    where = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=where).to(device)


def sample_noise_level(
    batch: int, t_min: float = 1e-3, generator: torch.Generator | None = None, device: torch.device | str = "cpu",
    objective: str = "elbo",
) -> torch.Tensor:
    """t (B,) in (t_min, 1]: t = t_min + (1 - t_min) (1 - u) for the ELBO, max(t_min, cos(pi/2 u)) for MaskGIT;
    u ~ U[0, 1)."""
    u = _rand((batch,), generator, torch.device(device))
    if objective == "maskgit":
        return torch.cos(0.5 * math.pi * u).clamp(min=t_min)
    return t_min + (1.0 - t_min) * (1.0 - u)


def mask_target(
    target: torch.Tensor,
    target_lengths: torch.Tensor,
    t: torch.Tensor,
    mask_id: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbing-state forward process q(X_t | X_0).

    target (B, T, Q), t (B,) -> (noisy (B, T, Q) with masked cells set to ``mask_id``, masked (B, T, Q) bool).
    Each real cell is masked independently with probability t_b; padded frames are never "masked".
    """
    u = _rand(target.shape, generator, target.device)  # (B, T, Q)
    valid = lengths_to_mask(target_lengths, target.shape[1])[:, :, None]  # (B, T, 1)
    masked = (u < t[:, None, None]) & valid  # (B, T, Q)
    return target.masked_fill(masked, mask_id), masked


def masked_diffusion_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    masked: torch.Tensor,
    t: torch.Tensor,
    target_lengths: torch.Tensor,
    codebook_weights: tuple[float, ...] = (),
    objective: str = "elbo",
) -> DiffusionLoss:
    """logits (B, T, Q, K), clean target (B, T, Q), masked (B, T, Q) bool, t (B,), target_lengths (B,).

    ``codebook_weights`` (Q values, or () for equal) weigh each codebook's cells (see the module docstring);
    ``objective`` "maskgit" trains on the mean CE of the masked cells instead of the ELBO (``bound`` keeps it).
    """
    B, T, Q, K = logits.shape
    num_cells = int(target_lengths.sum()) * Q
    if num_cells <= 0:
        raise DuetError("a batch needs at least one target frame")
    ce = F.cross_entropy(
        logits.reshape(B * T * Q, K).float(), target.reshape(B * T * Q).clamp(0, K - 1), reduction="none"
    ).view(B, T, Q)  # (B, T, Q); clamp only keeps padding (which may hold the mask id) in range, masked=False there
    masked = masked & lengths_to_mask(target_lengths, T)[:, :, None]  # padding is never a target cell
    m = masked.to(ce.dtype)
    loss, bound = weighted_cell_loss(ce * m / t[:, None, None], num_cells, codebook_weights)
    n = int(masked.sum())
    if objective == "maskgit":
        bound = loss.detach() if bound is None else bound
        loss = weighted_cell_loss(ce * m, max(n, 1), codebook_weights)[0]
    with torch.no_grad():
        masked_ce = (ce * m).sum() / n if n else torch.tensor(float("nan"))
        hit = (logits.argmax(-1) == target) & masked
        acc = hit.sum().float() / n if n else torch.tensor(float("nan"))
        per_q = (ce * m).sum(dim=(0, 1)) / m.sum(dim=(0, 1)).clamp(min=1)  # (Q,)
    return DiffusionLoss(loss, masked_ce.detach(), acc, per_q.detach(), n, num_cells, bound)


def drop_text(
    text_lengths: torch.Tensor, prob: float, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """CFG condition dropout: text_lengths (B,) -> (new lengths with dropped rows at 0, dropped (B,) bool)."""
    dropped = _rand(text_lengths.shape, generator, text_lengths.device) < prob
    return text_lengths.masked_fill(dropped, 0), dropped


def split_prompt(
    grid: torch.Tensor,
    lengths: torch.Tensor,
    cfg: DiffusionConfig,
    mask_id: int,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cut a random prefix off some utterances to serve as the visible prompt.

    grid (B, T, Q) clean, lengths (B,) -> (prompt (B, P, Q), prompt_lengths (B,), target (B, T', Q),
    target_lengths (B,)). Rows not chosen (or shorter than 2 frames) get a prompt of length 0 and keep their whole
    grid as target. Padding in both outputs holds ``mask_id``.
    """
    B, T, Q = grid.shape
    draw = _rand((B,), generator, torch.device("cpu")).tolist()
    frac = _rand((B,), generator, torch.device("cpu")).tolist()
    cuts = []
    for b in range(B):
        n = int(lengths[b])
        if draw[b] >= cfg.prompt_prob or n < 2:
            cuts.append(0)
            continue
        lo = max(1, math.ceil(cfg.prompt_min_frac * n))
        hi = min(n - 1, max(lo, math.floor(cfg.prompt_max_frac * n)))
        lo = min(lo, hi)
        cuts.append(lo + min(int(frac[b] * (hi - lo + 1)), hi - lo))  # uniform on lo..hi
    prompt_lengths = torch.tensor(cuts, dtype=lengths.dtype, device=grid.device)
    target_lengths = lengths - prompt_lengths
    P, Tt = int(prompt_lengths.max()), int(target_lengths.max())
    prompt = grid.new_full((B, P, Q), mask_id)
    target = grid.new_full((B, Tt, Q), mask_id)
    for b, p in enumerate(cuts):
        n = int(lengths[b])
        prompt[b, :p] = grid[b, :p]
        target[b, : n - p] = grid[b, p:n]
    return prompt, prompt_lengths, target, target_lengths


def diffusion_training_loss(
    model: LunaModel,
    inputs: LunaInputs,
    cfg: DiffusionConfig = DiffusionConfig(),
    generator: torch.Generator | None = None,
) -> DiffusionLoss:
    """One training forward: prompt split (rows without a prompt), text dropout, noise, masking, loss.

    ``inputs.target`` is the clean grid. The shared training loop calls this and back-propagates ``.loss``.
    """
    mask_id = model.config.mask_id
    if inputs.prompt is None and cfg.prompt_prob > 0:
        prompt, prompt_lengths, target, target_lengths = split_prompt(
            inputs.target, inputs.target_lengths, cfg, mask_id, generator
        )
        inputs = replace(
            inputs, prompt=prompt, prompt_lengths=prompt_lengths, target=target, target_lengths=target_lengths
        )
    text_lengths, _ = drop_text(inputs.text_lengths, cfg.text_drop_prob, generator)
    t = sample_noise_level(inputs.batch_size, cfg.t_min, generator, inputs.target.device, cfg.objective)
    noisy, masked = mask_target(inputs.target, inputs.target_lengths, t, mask_id, generator)
    logits = model(replace(inputs, text_lengths=text_lengths, target=noisy))
    return masked_diffusion_loss(logits, inputs.target, masked, t, inputs.target_lengths, cfg.codebook_weights,
                                 cfg.objective)
