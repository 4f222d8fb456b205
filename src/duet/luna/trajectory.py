"""Denoising trajectories of MaskGIT decoding, recorded for RL post-training (Luna report §4.1).

A trajectory of S steps is the sequence (M_k, a_k), k = 1..S: M_k the cells still masked before step k, a_k the
tokens committed at step k (the cells step k unmasked; the decoder samples a token for every masked cell, but only
the committed ones are actions, the rest are re-masked and drawn again later). Committed cells are never revisited
(``duet.luna.decode``), so the whole sequence is held in two grids:

    commit_step[b, t, q] = k   the step that committed cell (t, q) of row b (0: a cell never generated: a visible
                               prompt inside the grid, or padding)
    tokens[b, t, q]            the final grid; a_k = tokens at commit_step == k
    M_k = {commit_step >= k}   state before step k = tokens with M_k set to the mask id

The effective policy (§4.1: "the same validity constraints and sampling transformations the decoder uses, and CFG
when enabled") is the distribution a committed token was drawn from:

    pi(a | state, cell) = softmax(top_k(l_u + w (l_c - l_u)) / temperature)[a]

over the K codes of the cell's codebook (the mask id is not a code: the only validity constraint of duet's grid;
top-k leaves -inf outside the k most likely codes). Temperature 0 is argmax: a point mass (log-probability 0 for
the argmax, -inf elsewhere), recorded but useless for a policy gradient. The selection of which cells to commit
(confidence plus annealed Gumbel noise) is not part of the token policy: the report conditions the update on the
positions that actually occurred and leaves a learned position policy to future work.

What is recorded beyond the two grids: the behaviour policy's log-probability of every action (the "old" policy of
the importance ratio), computed from the very logits the sampler used, and the :class:`DecodeConfig` that defines the
policy family (steps, temperature, top-k, CFG scale). The conditional and unconditional logits themselves are not
kept (S x T x Q x K floats per row): a replay recomputes both from the model (``duet.train.objectives.luna_grpo``).

Shape legend: B rows, T frames, Q codebooks, K codes per codebook.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from duet.errors import DuetError
from duet.luna.decode import DecodeConfig, guide, top_k_filter


def effective_log_probs(guided: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """Guided logits (..., K) -> log pi (..., K) of the decoder's sampling distribution: top-k, then temperature
    (temperature 0: the argmax as a point mass). -inf outside the top-k set."""
    logits = top_k_filter(guided.float(), top_k)
    if temperature == 0:
        best = logits.argmax(dim=-1, keepdim=True)  # (..., 1)
        return torch.full_like(logits, float("-inf")).scatter(-1, best, 0.0)
    return (logits / temperature).log_softmax(dim=-1)


def action_log_probs(guided: torch.Tensor, actions: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """guided (B, T, Q, K), actions (B, T, Q) codes -> log pi(action) (B, T, Q) under the effective policy. Cells
    holding the mask id (or anything out of 0..K-1) get a clamped code: the caller keeps only committed cells."""
    logp = effective_log_probs(guided, temperature, top_k)  # (B, T, Q, K)
    codes = actions.clamp(0, guided.shape[-1] - 1)
    return logp.gather(-1, codes.unsqueeze(-1)).squeeze(-1)  # (B, T, Q)


@dataclass(frozen=True)
class Trajectory:
    """B recorded decodes of one ``maskgit_decode`` call (module docstring)."""

    tokens: torch.Tensor  # (B, T, Q) the final grid
    commit_step: torch.Tensor  # (B, T, Q) int64: 1..S the step that committed the cell, 0 never generated
    old_log_probs: torch.Tensor  # (B, T, Q) float: log pi_old(a) of each committed token, 0 elsewhere
    policy: DecodeConfig  # the decoder's settings: steps S, temperature, top-k, CFG scale
    mask_id: int

    @property
    def steps(self) -> int:
        return self.policy.steps

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    def actions(self) -> torch.Tensor:
        """(B, T, Q) bool: the committed cells, one token action each."""
        return self.commit_step > 0

    def num_actions(self) -> torch.Tensor:
        """(B,) int64: n, the number of token actions of each row."""
        return self.actions().flatten(1).sum(dim=1)

    def masked_before(self, step: int) -> torch.Tensor:
        """M_k (B, T, Q) bool: cells still masked when step ``step`` (1..S) starts."""
        return self.commit_step >= step

    def committed_at(self, step: int) -> torch.Tensor:
        """(B, T, Q) bool: the cells step ``step`` unmasked; their tokens are a_k."""
        return self.commit_step == step

    def state_before(self, step: int) -> torch.Tensor:
        """(B, T, Q): the grid the model saw at step ``step``: the final tokens with M_k masked."""
        return self.tokens.masked_fill(self.masked_before(step), self.mask_id)

    def active_steps(self) -> list[int]:
        """The steps that committed at least one cell (the cosine schedule may commit none at a step)."""
        present = torch.unique(self.commit_step)
        return [int(k) for k in present.tolist() if k > 0]

    def rows(self, index: torch.Tensor | list[int]) -> "Trajectory":
        """The trajectories of some rows (a group's candidates)."""
        index = torch.as_tensor(index, dtype=torch.long, device=self.tokens.device)
        return Trajectory(self.tokens[index], self.commit_step[index], self.old_log_probs[index], self.policy,
                          self.mask_id)

    def to(self, device: torch.device | str) -> "Trajectory":
        return Trajectory(self.tokens.to(device), self.commit_step.to(device), self.old_log_probs.to(device),
                          self.policy, self.mask_id)


class TrajectoryRecorder:
    """A ``duet.luna.decode.StepRecorder``: pass it to ``maskgit_decode(..., recorder=)``, then
    :meth:`trajectory`. One recorder per decode call."""

    def __init__(self, mask_id: int):
        self.mask_id = mask_id
        self.policy: DecodeConfig | None = None
        self._commit_step: torch.Tensor | None = None
        self._old: torch.Tensor | None = None
        self._tokens: torch.Tensor | None = None

    @torch.no_grad()
    def record(self, step: int, cfg: DecodeConfig, logits: torch.Tensor, still: torch.Tensor, commit: torch.Tensor,
               tokens: torch.Tensor) -> None:
        if self._commit_step is None:
            self.policy = cfg
            self._commit_step = torch.zeros_like(tokens)
            self._old = torch.zeros(tokens.shape, dtype=torch.float32, device=tokens.device)
        elif cfg != self.policy:
            raise DuetError("one TrajectoryRecorder records one decode: the settings changed between steps")
        if bool((commit & ~still).any()):
            raise DuetError(f"step {step} committed a cell that was not masked before it")
        guided = guide(logits, tokens.shape[0], cfg)  # (B, T, Q, K): what the sampler drew from
        logp = action_log_probs(guided, tokens, cfg.temperature, cfg.top_k)  # (B, T, Q)
        self._old = torch.where(commit, logp, self._old)
        self._commit_step = self._commit_step.masked_fill(commit, step)
        self._tokens = tokens

    def trajectory(self) -> Trajectory:
        """The recorded decode (a DuetError when nothing was recorded: the grid had no cell to generate)."""
        if self._commit_step is None or self.policy is None:
            raise DuetError("nothing was recorded: the decode had no masked cell to generate")
        return Trajectory(self._tokens.clone(), self._commit_step.clone(), self._old.clone(), self.policy,
                          self.mask_id)
