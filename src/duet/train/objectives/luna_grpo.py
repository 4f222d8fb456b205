"""GRPO over Luna's denoising trajectories (Luna report §4.1; DESIGN §B "RL post-training").

For each prompt the behaviour policy (the model at rollout time) decodes G >= 2 candidates, recording each
trajectory (``duet.luna.trajectory``: masked sets M_k and committed tokens a_k, the old log-probabilities and the
decoder's settings). The update replays them under the current parameters theta:

    log pi_theta(a_j | z_j)   the effective policy (same top-k, temperature, validity, CFG) at the state before the
                              step that committed action j, recomputed by a differentiable forward (:func:`replay`)
    rho_j = exp(log pi_theta(a_j | z_j) - log pi_old(a_j | z_j))                     per committed token action
    A_i = (R_i - mean_g R) / std_g R                 group-relative, shared by every action of trajectory i
    l_j = min(rho_j A_i, clip(rho_j, 1 - eps, 1 + eps) A_i)                          PPO's clipped surrogate
    J = 1/|B| sum_{i in B} 1/n_i sum_j l_j                      per token, normalised per utterance by its n_i

and minimises -J (+ an optional KL penalty, below). Rewards R are the prompt-local ordinal rewards of
``duet.train.rewards`` (WER first, speaker similarity breaks ties); a group whose candidates all tie has std 0 and is
skipped: its actions contribute nothing and it leaves |B| (:func:`group_advantages`).

Where the report is silent, duet reads it so:

* std is the sample standard deviation (the report says so) and no epsilon is added: a group with std 0 is the
  "no preference signal" case, skipped, and any other std is at least that of one ordinal step.
* n_i is the number of recorded actions of the trajectory (its committed cells), fixed before the replay: the
  report says the objective is additive over recorded actions so that the replay can be split by denoising state
  without changing the normalisation, which a count that depends on theta would break (:func:`grpo_loss` does split
  it, one backward pass per step, ``backward=True``).
* The "jointly valid action domain": with top-k, a recorded token can fall outside the current policy's top-k set
  (log pi_theta = -inf). Such actions are dropped from the sum (they stay counted in n_i) and reported as
  ``out_of_domain``; with top-k off every code is valid under both policies and nothing is dropped.
* |B| counts the trajectories of the groups kept; eps = 0.2 (PPO's) by default.
* The report names no KL term and no reference policy. ``kl_coef`` > 0 adds DeepSeekMath's per-token estimator
  k3 = exp(r) - r - 1, r = log pi_ref - log pi_theta, under the same effective policy at the same states, averaged
  like the surrogate; 0 (off) by default, as in the report.
* The selection of which cells to commit is conditioned on, not optimised (the report: a learned position policy is
  future work), so the Gumbel selection noise plays no part in a ratio.

The replay batches each step's B states (and their unconditional copies under CFG) into one forward pass, rows built
exactly as ``LunaModel.logits_fn`` builds them (``duet.luna.model.condition_rows``), but with gradients.

Shape legend: B trajectories, G candidates per prompt, P prompts, T frames, Q codebooks, K codes per codebook.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from duet.errors import DuetError
from duet.luna.decode import guidance_rows, guide
from duet.luna.model import LunaInputs, LunaModel, condition_rows
from duet.luna.trajectory import Trajectory, action_log_probs


@dataclass(frozen=True)
class GRPOConfig:
    clip_eps: float = 0.2  # PPO's epsilon; the report gives none
    kl_coef: float = 0.0  # weight of the k3 KL estimator to a reference policy; the report names none (off)

    def __post_init__(self) -> None:
        if not 0.0 < self.clip_eps < 1.0:
            raise DuetError(f"clip_eps must lie in (0, 1), got {self.clip_eps}")
        if self.kl_coef < 0:
            raise DuetError(f"kl_coef must be >= 0, got {self.kl_coef}")


@dataclass(frozen=True)
class GRPOLoss:
    loss: torch.Tensor  # scalar: -J (+ kl_coef KL); with a graph unless the replay already back-propagated it
    surrogate: float  # J
    kl: float  # the mean per-utterance KL estimate (0 when kl_coef is 0)
    ratio_mean: float  # mean rho over the actions in the domain
    clip_fraction: float  # share of those actions whose ratio lies outside [1 - eps, 1 + eps]
    actions: int  # actions replayed (sum of n_i)
    out_of_domain: int  # recorded actions outside the current policy's support (dropped)


def replay_step(model: LunaModel, inputs: LunaInputs, traj: Trajectory, step: int) -> torch.Tensor:
    """log pi_theta (B, T, Q) of the recorded final tokens at the state before step ``step`` under the trajectory's
    effective policy; meaningful at the cells ``traj.committed_at(step)``. Differentiable in the model's weights."""
    B, policy = traj.batch_size, traj.policy
    conditional = guidance_rows(B, policy, traj.tokens.device)  # (B',)
    state = traj.state_before(step).repeat(conditional.shape[0] // B, 1, 1)  # (B', T, Q)
    logits = model(condition_rows(inputs, state, conditional))  # (B', T, Q, K)
    guided = guide(logits, B, policy)  # (B, T, Q, K)
    return action_log_probs(guided, traj.tokens, policy.temperature, policy.top_k)  # (B, T, Q)


def replay(model: LunaModel, inputs: LunaInputs, traj: Trajectory) -> torch.Tensor:
    """log pi_theta (B, T, Q) of every recorded action at its own step; 0 at cells that are not actions."""
    out = torch.zeros(traj.tokens.shape, dtype=torch.float32, device=traj.tokens.device)
    for k in traj.active_steps():
        out = torch.where(traj.committed_at(k), replay_step(model, inputs, traj, k), out)
    return out


def group_advantages(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards (P, G) -> (advantages (P, G), kept (P,) bool): A = (R - mean) / std within each prompt's group
    (sample std); a group whose rewards are all equal has no preference signal: kept False, advantages 0."""
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise DuetError(f"rewards must be (prompts, G >= 2 candidates), got shape {tuple(rewards.shape)}")
    rewards = rewards.double()
    mean = rewards.mean(dim=1, keepdim=True)  # (P, 1)
    std = rewards.std(dim=1, keepdim=True)  # (P, 1), unbiased: the sample standard deviation
    kept = (rewards != rewards[:, :1]).any(dim=1)  # (P,)
    adv = torch.where(kept[:, None], (rewards - mean) / std.clamp(min=1e-300), torch.zeros_like(rewards))
    return adv.float(), kept


def clipped_surrogate(new_log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                      valid: torch.Tensor, clip_eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token PPO surrogate: new / old log-probs (B, T, Q), advantages (B,), valid (B, T, Q) bool (the actions in
    the jointly valid domain) -> (l (B, T, Q), 0 outside ``valid``; ratio rho (B, T, Q), 1 outside)."""
    diff = torch.where(valid, new_log_probs - old_log_probs, torch.zeros_like(new_log_probs))
    ratio = diff.exp()  # (B, T, Q)
    adv = advantages.to(device=ratio.device, dtype=ratio.dtype)[:, None, None]  # (B, 1, 1)
    term = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * adv)
    return term * valid.to(term.dtype), ratio


def kl_k3(new_log_probs: torch.Tensor, ref_log_probs: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate exp(r) - r - 1, r = log pi_ref - log pi_theta (>= 0), 0 outside
    ``valid`` (both policies must give the token a finite log-probability)."""
    r = torch.where(valid, ref_log_probs - new_log_probs, torch.zeros_like(new_log_probs))
    return (r.exp() - r - 1.0) * valid.to(r.dtype)


def grpo_loss(model: LunaModel, inputs: LunaInputs, traj: Trajectory, advantages: torch.Tensor,
              cfg: GRPOConfig = GRPOConfig(), *, normalizer: int | None = None, reference: LunaModel | None = None,
              backward: bool = False) -> GRPOLoss:
    """The GRPO loss of B trajectories (rows of ``inputs`` and ``traj``) with advantages (B,).

    Every row counts towards ``normalizer`` = |B| (default B; a caller that splits a mini-batch into several calls
    passes the whole mini-batch's count, so the pieces add up to the mini-batch's loss). Rows of skipped groups
    should not be passed at all. ``reference``: the frozen policy of the KL term (needed when ``cfg.kl_coef`` > 0).
    ``backward``: back-propagate step by step (one replay forward alive at a time; the objective is additive over
    recorded actions) and return the loss detached; else the loss keeps its graph.
    """
    if cfg.kl_coef > 0 and reference is None:
        raise DuetError("kl_coef > 0 needs the reference policy")
    n = traj.num_actions().clamp(min=1).float()  # (B,) n_i
    scale = 1.0 / (normalizer if normalizer is not None else traj.batch_size)
    weight = scale / n  # (B,) 1 / (|B| n_i)
    total = torch.zeros((), device=traj.tokens.device)
    surrogate = kl = ratio_sum = 0.0
    clipped = in_domain = out_of_domain = 0
    for k in traj.active_steps():
        at = traj.committed_at(k)  # (B, T, Q)
        new = replay_step(model, inputs, traj, k)  # (B, T, Q)
        valid = at & torch.isfinite(new)
        term, ratio = clipped_surrogate(new, traj.old_log_probs, advantages, valid, cfg.clip_eps)
        objective = (term.flatten(1).sum(dim=1) * weight).sum()  # this step's share of J
        loss_k = -objective
        if cfg.kl_coef > 0:
            with torch.no_grad():
                ref = replay_step(reference, inputs, traj, k)  # (B, T, Q)
            both = valid & torch.isfinite(ref)
            kl_k = (kl_k3(new, ref, both).flatten(1).sum(dim=1) * weight).sum()
            loss_k = loss_k + cfg.kl_coef * kl_k
            kl += float(kl_k.detach())
        if backward:
            loss_k.backward()
            loss_k = loss_k.detach()
        total = total + loss_k
        surrogate += float(objective.detach())
        r = ratio.detach()[valid]
        ratio_sum += float(r.sum())
        clipped += int(((r < 1.0 - cfg.clip_eps) | (r > 1.0 + cfg.clip_eps)).sum())
        in_domain += int(valid.sum())
        out_of_domain += int((at & ~valid).sum())
    return GRPOLoss(loss=total, surrogate=surrogate, kl=kl, ratio_mean=ratio_sum / max(in_domain, 1),
                    clip_fraction=clipped / max(in_domain, 1), actions=int(traj.num_actions().sum()),
                    out_of_domain=out_of_domain)
