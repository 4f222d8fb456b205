"""Luna-TTS decoding: MaskGIT confidence-based iterative unmasking (report §2.5 "iterative parallel decoding").

Chang et al. 2022 "MaskGIT" (arXiv:2202.04200) for the cosine schedule and confidence-based selection with annealed
Gumbel noise; Ho & Salimans 2022 for classifier-free guidance. Pure functions over a ``logits_fn``; no model inside,
so every branch is tested with fake models (``tests/luna/test_decode.py``). One step is exposed on its own
(``cells_to_generate`` once; then per step ``guidance_rows`` -> one forward -> ``maskgit_step``, i.e. ``guide`` ->
``unmask_step``) so the block-streaming decoder of Luna-TTS Realtime (``duet.luna.stream``) and Luna's runtime
(``duet.tts.luna.LunaRuntime``, which batches the forward passes of many requests at different steps) refine with
exactly this logic.

Contract of ``logits_fn(tokens, conditional) -> logits``:
    tokens (B', T, Q) int64, the mask id at cells still to be decided; conditional (B',) bool;
    logits (B', T, Q, K). B' is B (no guidance) or 2B: rows [0, B) conditional, rows [B, 2B) the same grids
    unconditional (text dropped), so both passes of CFG share ONE forward call. Row i belongs to request i % B.

One step s = 1..S (N_b = cells to generate in row b, i.e. masked cells of real frames at the start):
  1. guided = logits_u + w (logits_c - logits_u)                   (w = cfg_scale; w = 1 skips the unconditional rows)
  2. a token is sampled for every cell from softmax(top_k(guided) / temperature) (argmax when temperature = 0)
  3. confidence = log softmax(guided)[sampled]  +  gumbel_temperature (1 - s/S) g,  g ~ Gumbel(0, 1),
     over cells still masked (others -inf). The noise anneals linearly to 0 at the last step (MaskGIT's
     "choice temperature"; 4.5 is MaskGIT's value, the Luna report gives none).
  4. n_s = floor(N_b cos(pi/2 s/S)) cells stay masked (cosine schedule; n_S = 0); the (masked_b - n_s) most
     confident masked cells are committed with their sampled tokens, the rest stay masked for the next step.
Committed cells are never revisited (no re-masking of decided tokens) and visible cells (a prompt inside the grid,
the unedited part of an utterance, padding frames) are never written.

Divergences from MaskGIT: MaskGIT forces at least one commit per step and keeps at least one masked cell until the
end; here the count follows the cosine formula exactly (a step may commit nothing when N is small and S large). The
confidence uses the guided distribution before top-k and temperature (as MaskGIT uses the model's probabilities);
the sampled token itself comes from the effective distribution (top-k, temperature, CFG), the policy family that
RL post-training reuses (§4).

Recording (RL post-training, §4). ``maskgit_decode`` takes an optional ``recorder`` (a :class:`StepRecorder`,
``duet.luna.trajectory.TrajectoryRecorder``): after each step it is handed the step's forward output, the cells
masked before the step and the cells it committed. It only reads; without one nothing is computed or kept, and the
random draws (hence the output for a seed) are the same either way.

Shape legend: B batch, T frames, Q codebooks, K codes per codebook, N = T Q cells per row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Protocol

import torch

from duet.errors import DuetError
from duet.limits import out_of_bounds
from duet.nn.masks import lengths_to_mask

LogitsFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class StepRecorder(Protocol):
    def record(self, step: int, cfg: "DecodeConfig", logits: torch.Tensor, still: torch.Tensor,
               commit: torch.Tensor, tokens: torch.Tensor) -> None:
        """Step ``step`` of ``maskgit_decode`` with ``cfg``: logits (B', T, Q, K) of its forward pass, still
        (B, T, Q) bool the cells masked before it, commit (B, T, Q) bool the cells it decided, tokens (B, T, Q) the
        grid after it."""
        ...


@dataclass(frozen=True)
class DecodeConfig:
    steps: int = 32  # S, chosen per request (§2.5: 32 by default; 16 and 8 reported)
    temperature: float = 1.0  # token sampling temperature; 0 = argmax
    top_k: int = 0  # keep the k most likely codes per cell before sampling; 0 = all
    cfg_scale: float = 2.0  # w in logits_u + w (logits_c - logits_u); 1 = no guidance (one pass). Report: not given
    gumbel_temperature: float = 4.5  # scale of the selection noise at step 0, annealed to 0 (MaskGIT)

    def __post_init__(self) -> None:
        if not isinstance(self.steps, int):
            raise DuetError(f"steps must be a positive integer (8, 16 or 32 are typical), got {self.steps!r}")
        for name in ("steps", "temperature", "top_k", "cfg_scale"):  # a request's bounds (duet.limits)
            problem = out_of_bounds(name, getattr(self, name))
            if problem:
                raise DuetError(problem)
        if self.gumbel_temperature < 0:
            raise DuetError(f"gumbel_temperature must be >= 0, got {self.gumbel_temperature}")


def with_overrides(decode: DecodeConfig, **overrides) -> DecodeConfig:
    """``decode`` with the overrides that were given (not None); DecodeConfig refuses bad values with a DuetError."""
    return replace(decode, **{k: v for k, v in overrides.items() if v is not None})


@dataclass(frozen=True)
class DecodeResult:
    tokens: torch.Tensor  # (B, T, Q): the input grid with every generated cell filled
    commit_step: torch.Tensor  # (B, T, Q) int64: the step 1..S that committed a cell; 0 for cells never generated


def masked_after_step(num_cells: torch.Tensor, step: int, steps: int) -> torch.Tensor:
    """Cosine schedule: cells still masked after step ``step`` of ``steps`` = floor(N cos(pi/2 step/steps)).

    num_cells (B,) int64 -> (B,) int64; exactly N at step 0 and exactly 0 at step ``steps`` (cos(pi/2) is 6e-17 in
    floating point, so the last step is pinned rather than trusted to round down).
    """
    if step >= steps:
        return torch.zeros_like(num_cells)
    return torch.floor(num_cells.double() * math.cos(math.pi / 2 * step / steps)).long()


def gumbel_scale(step: int, steps: int, temperature: float) -> float:
    """Annealed selection-noise scale at step 1..S: temperature (1 - step/steps); 0 at the last step."""
    return temperature * (1.0 - step / steps)


def cfg_combine(logits_c: torch.Tensor, logits_u: torch.Tensor, scale: float) -> torch.Tensor:
    """Classifier-free guidance on logits: logits_u + w (logits_c - logits_u)."""
    return logits_u + scale * (logits_c - logits_u)


def top_k_filter(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Set all but the k largest logits of the last axis to -inf (k = 0 or k >= K: unchanged)."""
    if k <= 0 or k >= logits.shape[-1]:
        return logits
    kth = logits.topk(k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def _rand(shape: torch.Size, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """U[0, 1) drawn on the generator's device (a CPU generator can drive a GPU decode), then moved."""
    where = generator.device if generator is not None else device
    return torch.rand(shape, generator=generator, device=where).to(device)


def _gumbel(shape: torch.Size, generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    u = _rand(shape, generator, device)
    e = (-torch.log(u.clamp(min=1e-20))).clamp(min=1e-20)  # Exp(1), never 0
    return -torch.log(e)  # Gumbel(0, 1)


def sample_tokens(
    logits: torch.Tensor, temperature: float, top_k: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """logits (..., K) -> codes (...): a draw from softmax(top_k(logits) / temperature), argmax at temperature 0."""
    logits = top_k_filter(logits, top_k)
    if temperature == 0:
        return logits.argmax(dim=-1)
    # Gumbel-max: argmax(l / tau + g) is a draw from softmax(l / tau), and it honours the generator.
    return (logits / temperature + _gumbel(logits.shape, generator, logits.device)).argmax(dim=-1)


def guidance_rows(batch: int, cfg: DecodeConfig, device: torch.device | str = "cpu") -> torch.Tensor:
    """The ``conditional`` flags (B',) of one forward call: B trues, then B falses when guiding (cfg_scale != 1)."""
    conditional = torch.ones(batch, dtype=torch.bool, device=device)
    if cfg.cfg_scale != 1.0:
        conditional = torch.cat([conditional, torch.zeros_like(conditional)])  # (2B,)
    return conditional


def guide(logits: torch.Tensor, batch: int, cfg: DecodeConfig) -> torch.Tensor:
    """Logits (B', ...) of the rows ``guidance_rows`` asked for -> guided float logits (B, ...) (item 1 above)."""
    logits = logits.float()
    if cfg.cfg_scale != 1.0:
        return cfg_combine(logits[:batch], logits[batch:], cfg.cfg_scale)
    return logits


def unmask_step(
    guided: torch.Tensor,
    tokens: torch.Tensor,
    still: torch.Tensor,
    num_cells: torch.Tensor,
    step: int,
    cfg: DecodeConfig,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One MaskGIT step s (items 2-4 of the module docstring) on guided logits.

    guided (B, T, Q, K) float, tokens (B, T, Q), still (B, T, Q) bool = cells masked now and to be generated,
    num_cells (B,) = N_b cells to generate in all -> (new tokens (B, T, Q), commit (B, T, Q) bool: the cells this step
    decided). Cells outside ``still`` are never written. Shared by ``maskgit_decode`` and the block-streaming decoder
    (``duet.luna.stream``), which runs it once per step inside each block.
    """
    B, T, Q = tokens.shape
    S = cfg.steps
    # Only the M cells still masked are drawn and ranked (decided cells keep their tokens): the sampler's work
    # and its random numbers are per masked cell, never over the whole grid's K logits.
    cells = still.nonzero(as_tuple=True)
    masked = guided[cells]  # (M, K)
    drawn = sample_tokens(masked, cfg.temperature, cfg.top_k, generator)  # (M,)
    drawn_conf = masked.log_softmax(dim=-1).gather(-1, drawn.unsqueeze(-1)).squeeze(-1)  # (M,) log p of the draw
    noise = gumbel_scale(step, S, cfg.gumbel_temperature)
    if noise > 0:
        drawn_conf = drawn_conf + noise * _gumbel(drawn_conf.shape, generator, drawn_conf.device)
    sampled = tokens.clone()
    sampled[cells] = drawn
    # Finite for every cell still masked (so none can rank below a decided one), -inf for the rest.
    confidence = torch.full((B, T, Q), float("-inf"), device=guided.device)
    confidence[cells] = drawn_conf.clamp(min=-1e30)
    confidence = confidence.flatten(1)  # (B, N)

    n_commit = still.flatten(1).sum(dim=1) - masked_after_step(num_cells, step, S)  # (B,)
    order = confidence.argsort(dim=1, descending=True, stable=True)  # (B, N)
    arange = torch.arange(order.shape[1], device=order.device).expand_as(order)  # (B, N)
    rank = torch.empty_like(order).scatter_(1, order, arange)  # rank[b, j] = place of cell j in the order
    commit = (rank < n_commit[:, None]).view(B, T, Q) & still  # (B, T, Q)
    return torch.where(commit, sampled, tokens), commit


def cells_to_generate(tokens: torch.Tensor, mask_id: int, frame_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """tokens (B, T, Q) -> (B, T, Q) bool: the cells a decode generates, i.e. masked cells of real frames.

    ``frame_lengths`` (B,) marks the frames beyond each row's length as padding (never generated); their sum per row
    is N_b of the module docstring.
    """
    B, T, _ = tokens.shape
    real = torch.ones(B, T, dtype=torch.bool, device=tokens.device)
    if frame_lengths is not None:
        real = lengths_to_mask(frame_lengths.to(tokens.device), T)
    return (tokens == mask_id) & real[:, :, None]


def maskgit_step(
    logits: torch.Tensor,
    tokens: torch.Tensor,
    still: torch.Tensor,
    num_cells: torch.Tensor,
    step: int,
    cfg: DecodeConfig,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Step s of ``maskgit_decode`` after its forward pass (items 1-4 of the module docstring).

    logits (B', T, Q, K) of the rows ``guidance_rows(B, cfg)`` asked for, tokens (B, T, Q), still (B, T, Q) bool,
    num_cells (B,) -> (new tokens (B, T, Q), commit (B, T, Q) bool). The random numbers drawn depend on the cells still
    masked in ``tokens`` and on ``generator`` only, so a caller that slices one request's rows out of a larger forward pass
    (``duet.tts.luna.LunaRuntime``) draws exactly what ``maskgit_decode`` of that request alone would.
    """
    return unmask_step(guide(logits, tokens.shape[0], cfg), tokens, still, num_cells, step, cfg, generator)


def maskgit_decode(
    logits_fn: LogitsFn,
    tokens: torch.Tensor,
    mask_id: int,
    cfg: DecodeConfig = DecodeConfig(),
    frame_lengths: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    recorder: StepRecorder | None = None,
) -> DecodeResult:
    """Fill every masked cell of ``tokens`` (B, T, Q) in ``cfg.steps`` steps; see the module docstring.

    ``frame_lengths`` (B,) marks padding frames beyond each row's length: they are neither generated nor changed.
    ``recorder`` sees every step (module docstring, "Recording").
    """
    if tokens.dim() != 3:
        raise DuetError(f"tokens must be (B, T, Q), got shape {tuple(tokens.shape)}")
    B = tokens.shape[0]
    tokens = tokens.clone()
    to_generate = cells_to_generate(tokens, mask_id, frame_lengths)  # (B, T, Q)
    num_cells = to_generate.flatten(1).sum(dim=1)  # (B,) N_b
    commit_step = torch.zeros_like(tokens)
    if int(num_cells.sum()) == 0:
        return DecodeResult(tokens, commit_step)
    conditional = guidance_rows(B, cfg, tokens.device)  # (B',)
    repeat = conditional.shape[0] // B

    still = to_generate.clone()  # (B, T, Q) cells masked now
    for s in range(1, cfg.steps + 1):
        logits = logits_fn(tokens.repeat(repeat, 1, 1), conditional)  # (B', T, Q) -> (B', T, Q, K)
        tokens, commit = maskgit_step(logits, tokens, still, num_cells, s, cfg, generator)
        if recorder is not None:
            recorder.record(s, cfg, logits, still, commit, tokens)
        commit_step = commit_step.masked_fill(commit, s)
        still = still & ~commit
    return DecodeResult(tokens, commit_step)
