"""Gepard's DPO objective: two-pass CFG distilled into single-pass weights (DESIGN §A, "CFG distilled by DPO").

DPO (Rafailov et al. 2023) on offline pairs: for one text x, the chosen trajectory y_w was decoded with two-pass
CFG and the rejected y_l without it (``duet.train.gepard_pairs``); the policy is the single-pass model with LoRA
adapters (``duet.nn.lora``), the reference the same model frozen before training. Per pair::

    r_w = (log pi(y_w | x) - log pi_ref(y_w | x)) / T_w        implicit reward per frame (length-normalised)
    r_l = (log pi(y_l | x) - log pi_ref(y_l | x)) / T_l
    loss = w_q * -log sigmoid(beta * (r_w - r_l))              w_q: the pair's quality weight

log pi is the trajectory likelihood with the Bernoulli stop terms (``duet.gepard.trajectory``; §3.3: without them
"preference gradients will not act on the stop decision"). The batch loss is the mean over its pairs.

What the report states and what it leaves to us. The report (§1.4 item 3) names "length- and quality-normalized
reward scaling"; the section that details it (§5) is past the end of our copy. Our reading:
- length: each implicit reward is divided by its trajectory's frame count (at least 1), so the CFG output, often
  shorter or longer than the single-pass one, is not preferred or penalised for its length (a 40-frame and a
  400-frame utterance would otherwise differ tenfold in log-ratio scale, and DPO on sums is known to favour length);
- quality: the pair's weight w_q grows with its quality margin (how much better the chosen utterance scored, in WER
  and, when cloning, SIM) and is normalised to mean 1 over the pair set (``duet.train.gepard_pairs``), so pairs
  where CFG fixed words pull harder than pairs where both were already right, and the loss keeps DPO's scale;
- beta = 0.1 (DPO's usual value); the reference log-likelihoods are computed once, when the pairs are made, by the
  model that made them (exactly the frozen reference, at no memory cost during training).

Logged: ``reward_chosen`` / ``reward_rejected`` (beta x per-frame rewards), ``reward_margin``, ``reward_accuracy``
(fraction of pairs with r_w > r_l), ``logp_chosen`` / ``logp_rejected`` (policy log pi per frame) and their stop
parts ``stop_chosen`` / ``stop_rejected``.

Shape legend: P pairs in a batch (2P trajectory rows: chosen first, then rejected).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError
from duet.train.loop import Objective


@dataclass(frozen=True)
class DPOConfig:
    beta: float = 0.1
    stop_floor: float = 1e-4  # Gepard §3.3
    temperature: float = 1.0  # of the channel logits when scoring trajectories (duet.gepard.trajectory)

    def __post_init__(self) -> None:
        if self.beta <= 0 or not 0 < self.stop_floor < 1 or self.temperature <= 0:
            raise DuetError(f"DPO needs beta > 0, 0 < stop_floor < 1 and temperature > 0; got {self.beta}, "
                            f"{self.stop_floor}, {self.temperature}")


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, frames_chosen: torch.Tensor, frames_rejected: torch.Tensor,
             weights: torch.Tensor, beta: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Length-normalised, quality-weighted DPO over P pairs (module docstring); every argument (P,).

    -> (the mean weighted loss with graph, detached metrics).
    """
    r_w = (policy_chosen - ref_chosen) / frames_chosen.clamp(min=1)  # (P,) implicit reward per frame
    r_l = (policy_rejected - ref_rejected) / frames_rejected.clamp(min=1)
    z = beta * (r_w - r_l)  # (P,)
    loss = (weights * -F.logsigmoid(z)).mean()
    metrics = {"reward_chosen": (beta * r_w).mean(), "reward_rejected": (beta * r_l).mean(),
               "reward_margin": z.mean(), "reward_accuracy": (z > 0).float().mean()}
    return loss, {k: v.detach() for k, v in metrics.items()}


@dataclass(frozen=True)
class DPOBatch:
    """P pairs as one padded Gepard batch of 2P rows (chosen rows 0 .. P-1, rejected rows P .. 2P-1).

    gepard: ``GepardBatch`` (2P rows); stopped (2P,) bool (ended by the stop head); ref_logp (2P,) float64 the
    reference's log pi of each row; weights (P,) the pairs' quality weights.
    """

    gepard: Any
    stopped: torch.Tensor
    ref_logp: torch.Tensor
    weights: torch.Tensor

    @property
    def pairs(self) -> int:
        return self.weights.shape[0]

    def to(self, device: torch.device | str) -> "DPOBatch":
        return DPOBatch(self.gepard.to(device), self.stopped.to(device), self.ref_logp.to(device),
                        self.weights.to(device))


class GepardDPO(Objective):
    """DPO over :class:`DPOBatch`es; the trained module is a ``duet.gepard.trajectory.GepardTrajectories``."""

    name = "gepard-dpo"

    def __init__(self, config: DPOConfig = DPOConfig()):
        self.config = config

    def loss(self, model: nn.Module, batch: DPOBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        p = batch.pairs
        scored = model(batch.gepard, batch.stopped)  # TrajectoryLogProb, (2P,) each
        logp = scored.total.double()
        ref = batch.ref_logp.double()
        frames = batch.gepard.audio_lengths.double()
        loss, metrics = dpo_loss(logp[:p], logp[p:], ref[:p], ref[p:], frames[:p], frames[p:],
                                 batch.weights.double(), self.config.beta)
        per_frame = (logp / frames.clamp(min=1)).detach()
        stop = (scored.stop.double() / frames.clamp(min=1)).detach()
        metrics.update(logp_chosen=per_frame[:p].mean(), logp_rejected=per_frame[p:].mean(),
                       stop_chosen=stop[:p].mean(), stop_rejected=stop[p:].mean())
        return loss.float(), metrics
