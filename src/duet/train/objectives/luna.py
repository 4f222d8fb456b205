"""Luna-TTS training: the masked-diffusion loss of the acoustic model plus its duration predictor's loss.

- loss = diffusion + ``duration_weight`` x duration CE, from one ``LunaBundle`` forward (``duet.luna.bundle``):
  absorbing-state masking with the 1/t-weighted cross-entropy (Luna §2.3, ``duet.luna.diffusion``), text dropped
  with probability 0.1 for classifier-free guidance (§2.5), prompt/target splits for cloning; the duration
  predictor's bin cross-entropy on its per-token targets (forced alignments or the character spread,
  ``duet.luna.data``).
- logged: ``diffusion`` (the 1/t-weighted loss, nats per target cell), ``masked_ce`` and ``masked_acc`` (plain CE and
  argmax accuracy over masked cells; 0 for a batch in which no cell was masked, which only a tiny batch at a tiny
  noise level produces), ``first_ce`` (the plain CE of the first codebook alone: the coarse codes that carry most
  of what is said; the deeper ones sit near their unigram entropy for a long time), ``duration_ce``, ``length_err``
  (mean |predicted T - true T| / T: what decoding will use); with codebook weights, ``diffusion`` is the weighted
  loss and ``bound`` the unweighted one.
- ``duration_only``: the predictor alone (loss = its CE; the acoustic model is frozen and not run), e.g. to retrain
  it on forced-alignment targets (``duet data align``) under a shipped acoustic model.
- randomness: every draw of the forward process (prompt cuts, text dropout, noise levels, masks) comes from the
  objective's own generator, which the loop seeds per rank and saves in every checkpoint, so a resumed run takes the
  same draws as an uninterrupted one.
- validation: the same losses, but with text dropout off (the conditional bound is what speaking uses) and a
  generator re-seeded for every batch, so the same held-out batch gets the same draws at every validation and
  validation never moves the training draws.
- no LR multipliers: the report gives none for Luna, and luna-tiny starts from scratch.

:class:`LunaRealtimeDiffusion` is the Realtime continual-training variant of the same objective (its own docstring).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from torch import nn

from duet.luna.bundle import LunaLosses
from duet.luna.diffusion import DiffusionConfig
from duet.luna.realtime_loss import RealtimeLoss, RealtimeObjective
from duet.train.loop import Objective

VAL_SEED = 1234


class LunaDiffusion(Objective):
    name = "luna-diffusion"

    def __init__(self, diffusion: DiffusionConfig = DiffusionConfig(), duration_weight: float = 1.0,
                 duration_only: bool = False):
        self.diffusion = diffusion
        self.duration_weight = duration_weight
        self.duration_only = duration_only  # train the predictor alone (the acoustic model is frozen, not run)
        self.generator = torch.Generator()  # CPU: drives GPU training too (diffusion._rand moves the draws)

    def generators(self) -> dict[str, torch.Generator]:
        return {"diffusion": self.generator}

    def _losses(self, out: LunaLosses) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        d = out.diffusion
        if d is None:  # predictor only
            return out.duration, {"duration_ce": out.duration.detach(), "length_err": out.length_error}
        loss = d.loss + self.duration_weight * out.duration
        metrics = {"diffusion": d.loss.detach(), "masked_ce": torch.nan_to_num(d.masked_ce, nan=0.0),
                   "masked_acc": torch.nan_to_num(d.masked_accuracy, nan=0.0), "first_ce": d.codebook_ce[0],
                   "duration_ce": out.duration.detach(), "length_err": out.length_error}
        if d.bound is not None:  # codebook-weighted training: the unweighted bound, comparable across runs
            metrics["bound"] = d.bound
        return loss, metrics

    def _forward(self, model: nn.Module, batch: Any, diffusion: DiffusionConfig, generator: torch.Generator) -> Any:
        if self.duration_only:
            return model(batch, diffusion, generator, duration_only=True)
        return model(batch, diffusion, generator)

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self._losses(self._forward(model, batch, self.diffusion, self.generator))

    @torch.no_grad()
    def evaluate(self, model: nn.Module, batch: Any) -> dict[str, float]:
        generator = torch.Generator().manual_seed(VAL_SEED)
        out = self._forward(model, batch, replace(self.diffusion, text_drop_prob=0.0), generator)
        loss, metrics = self._losses(out)
        return {"loss": float(loss), **{k: float(v) for k, v in metrics.items()}}


class LunaRealtimeDiffusion(LunaDiffusion):
    """Luna-TTS Realtime continual training (``duet.luna.realtime``): the block-diffusion loss (an independent noise
    level per block, 1/t weighting) plus ``end_weight`` x the end head's BCE, from one ``RealtimeBundle`` forward.
    Randomness and validation as :class:`LunaDiffusion` (the same generator, text dropout off in validation).

    Logged: ``diffusion``, ``masked_ce``, ``masked_acc`` as Luna's; ``end_bce`` and ``end_acc`` (the end head over
    the supervised noisy frames: every frame of each row's blocks, the terminal one included). The duration
    predictor is frozen (copied from the Luna the run starts from), so there is no duration loss.
    """

    name = "luna-realtime"

    def __init__(self, objective: RealtimeObjective = RealtimeObjective()):
        super().__init__(objective.diffusion, duration_weight=0.0)
        self.objective = objective

    def _forward(self, model: nn.Module, batch: Any, diffusion: DiffusionConfig, generator: torch.Generator) -> Any:
        return model(batch, replace(self.objective, diffusion=diffusion), generator)

    def _losses(self, out: RealtimeLoss) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return out.loss, {"diffusion": out.diffusion.detach(), "masked_ce": torch.nan_to_num(out.masked_ce, nan=0.0),
                          "masked_acc": torch.nan_to_num(out.masked_accuracy, nan=0.0),
                          "end_bce": out.end.detach(), "end_acc": out.end_accuracy}
