"""The log-likelihood of a generated Gepard utterance under a model, teacher-forced (Gepard §3.3), for DPO.

Generation is two decisions per step (§3.3): stop or go on, a Bernoulli with p_stop, then the frame's C = 32
channel digits, each from its own categorical (factorised, §3.2). In duet's layout (``duet.gepard.model``) audio
position j (SOS for j = 0, frame j-1 after it) carries the logits of frame j and the stop logit that says "frame j
is the terminal phantom frame"; the sampler reads exactly these (``duet.gepard.generate``: at step t it checks
p_stop at position t, then samples frame t). A trajectory of T frames therefore scores::

    log pi(y | x) = sum_{j<T} sum_c log p_c(y_j^c)        the digits, positions 0 .. T-1
                  + sum_{j<T} log(1 - p_stop,j)            "go on", positions 0 .. T-1
                  + 1[stopped] log p_stop,T                "stop", position T (the phantom frame)

which are the labels of the training loss (``gepard_loss``: codes at j < T, stop 0 at j < T and 1 at j = T), so
the likelihood DPO moves is the one pretraining fitted. The report writes the same sum with its own step index
(continue terms t = 0 .. T-2, the stop term at T-1); read with the phantom frame as its last step, it is this one.
A trajectory cut by the frame bound ("bound") has no stop term (the report's indicator 1(not truncated)).

p_stop floor (§3.3): the stop head saturates (logits towards +-inf), so each Bernoulli probability is floored at
``stop_floor`` = 1e-4 before the log: log max(p, 1e-4) and log max(1 - p, 1e-4), each term bounded by
log 1e-4 = -9.2. Computed as ``max(logsigmoid(+-logit), log floor)``, the same value without the round trip
through a probability that underflows.

Temperature: by default the model's own distribution (temperature 1), the pi of the report's formula. A sampler's
temperature, top-k and CFG are decoding heuristics outside the model; DPO compares the policy's and the reference's
likelihoods of the same trajectories, and a greedy decoder (temperature 0, gepard-tiny's default) has no likelihood
to compare. ``temperature`` (channel logits only: the report finds temperature on the stop head meaningless, §3.3)
is there for scoring under a tempered policy deliberately.

Shape legend: B rows, N audio positions (T + 1), C channels, Lmax widest channel alphabet, T frames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from duet.gepard.heads import FrameLogits
from duet.gepard.model import GepardBatch, GepardModel

STOP_FLOOR = 1e-4  # Gepard §3.3: p_floor


@dataclass(frozen=True)
class TrajectoryLogProb:
    """Per-row parts of log pi(y | x): ``codes`` (B,) the digits, ``stop`` (B,) the Bernoulli terms."""

    codes: torch.Tensor
    stop: torch.Tensor

    @property
    def total(self) -> torch.Tensor:
        return self.codes + self.stop  # (B,)


def trajectory_logprob(logits: FrameLogits, codes: torch.Tensor, lengths: torch.Tensor, stopped: torch.Tensor, *,
                       stop_floor: float = STOP_FLOOR, temperature: float = 1.0) -> TrajectoryLogProb:
    """Teacher-forced logits (B, N >= T + 1, ...) of trajectories codes (B, C, T) with ``lengths`` (B,) frames each,
    ``stopped`` (B,) bool (ended by the stop head, not the bound) -> their log-likelihood parts (module docstring).
    """
    if not 0.0 < stop_floor < 1.0 or temperature <= 0:
        raise ValueError(f"need 0 < stop_floor < 1 and temperature > 0, got {stop_floor}, {temperature}")
    b, c, t = codes.shape
    j = torch.arange(t, device=codes.device)  # (T,)
    frame_ok = j[None] < lengths[:, None]  # (B, T)
    logp = torch.log_softmax(logits.padded()[:, :t].float() / temperature, dim=-1)  # (B, T, C, Lmax)
    digits = codes.clamp(min=0).transpose(1, 2)[..., None]  # (B, T, C, 1); -1 past a row's end -> any valid index
    per_frame = logp.gather(-1, digits)[..., 0].sum(-1)  # (B, T)
    code_part = torch.where(frame_ok, per_frame, 0.0).sum(-1)  # (B,)

    floor = math.log(stop_floor)
    stop_logits = logits.stop.float()  # (B, N)
    go_on = F.logsigmoid(-stop_logits[:, :t]).clamp(min=floor)  # (B, T) log max(1 - p, floor)
    ends = F.logsigmoid(stop_logits.gather(1, lengths[:, None])[:, 0]).clamp(min=floor)  # (B,) log max(p, floor)
    stop_part = torch.where(frame_ok, go_on, 0.0).sum(-1) + torch.where(stopped, ends, 0.0)
    return TrajectoryLogProb(codes=code_part, stop=stop_part)


class GepardTrajectories(nn.Module):
    """A Gepard model as a trajectory scorer: ``forward(batch, stopped)`` -> log pi (B,), with the graph.

    The module a training loop trains for DPO (``duet.train.objectives.gepard_dpo``): calling it (rather than a
    method of the inner model) is what lets ``DistributedDataParallel`` see the forward. The wrapped model is
    ``gepard`` (so a checkpoint's names read ``gepard.model.layers...``).
    """

    def __init__(self, gepard: GepardModel, stop_floor: float = STOP_FLOOR, temperature: float = 1.0):
        super().__init__()
        self.gepard = gepard
        self.stop_floor, self.temperature = stop_floor, temperature

    def forward(self, batch: GepardBatch, stopped: torch.Tensor) -> TrajectoryLogProb:
        logits = self.gepard.audio_logits(batch)  # (B, T+1, ...); no text dropout on this path
        return trajectory_logprob(logits, batch.codes, batch.audio_lengths, stopped, stop_floor=self.stop_floor,
                                  temperature=self.temperature)
