"""What Luna-TTS trains and ships as one unit: the acoustic model (``LunaModel``) and its duration predictor.

Luna §2.5 / §3.2: decoding needs the target length T before the first step, and a separate bidirectional text model
predicts it. Both read the same text ids, so duet trains them side by side on the same batches, in one loop and one
optimizer, and ships them in one directory (``duet.luna.shipped``). Their parameters are disjoint, so the summed
loss trains each exactly as its own loss would (AdamW is per parameter); what they share is the LR schedule, the
global gradient-norm clip and the non-finite guard. Divergence from the report, which fine-tunes the predictor as
its own model: one run is simpler to train, resume and ship, and the predictor costs a few percent of a step.

``forward`` returns the losses (like ``GepardModel.forward``), so DDP sees one module called once per micro-batch.

Shape legend: B batch, S text tokens, T frames, Q codebooks, N duration bins.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from duet.errors import DuetError
from duet.luna.config import LunaConfig
from duet.luna.diffusion import DiffusionConfig, DiffusionLoss, diffusion_training_loss
from duet.luna.duration import DurationConfig, DurationPredictor, duration_loss, expected_durations
from duet.luna.model import LunaInputs, LunaModel
from duet.nn.masks import lengths_to_mask


@dataclass(frozen=True)
class LunaBatch:
    """A training batch: conditions and clean target grids, plus per-token duration targets."""

    inputs: LunaInputs  # text (B, S), clean target (B, T, Q); no prompt: the objective cuts prompts (diffusion.py)
    durations: torch.Tensor  # (B, S) int64 frames per text token; each row adds up to its target length

    def to(self, device: torch.device | str) -> "LunaBatch":
        i = self.inputs
        move = lambda x: None if x is None else x.to(device)  # noqa: E731
        inputs = LunaInputs(move(i.text_ids), move(i.text_lengths), move(i.target), move(i.target_lengths),
                            move(i.prompt), move(i.prompt_lengths))
        return LunaBatch(inputs, self.durations.to(device))


@dataclass(frozen=True)
class LunaLosses:
    diffusion: DiffusionLoss  # the masked-diffusion loss and its detached metrics
    duration: torch.Tensor  # scalar: the predictor's mean bin cross-entropy over real tokens
    length_error: torch.Tensor  # scalar, detached: mean |sum of expected durations - T| / T over rows


class LunaBundle(nn.Module):
    def __init__(self, config: LunaConfig, duration: DurationConfig):
        super().__init__()
        if config.backbone.vocab_size != duration.backbone.vocab_size:
            raise DuetError(f"the acoustic model reads {config.backbone.vocab_size} text ids, the duration "
                             f"predictor {duration.backbone.vocab_size}: they share one tokenizer")
        self.acoustic = LunaModel(config)
        self.duration = DurationPredictor(duration)

    def forward(self, batch: LunaBatch, cfg: DiffusionConfig = DiffusionConfig(),
                generator: torch.Generator | None = None) -> LunaLosses:
        inputs = batch.inputs
        diffusion = diffusion_training_loss(self.acoustic, inputs, cfg, generator)
        logits = self.duration(inputs.text_ids, inputs.text_lengths)  # (B, S, N)
        loss = duration_loss(logits, inputs.text_lengths, batch.durations)
        with torch.no_grad():
            valid = lengths_to_mask(inputs.text_lengths, logits.shape[1])  # (B, S)
            total = (expected_durations(logits) * valid).sum(dim=1)  # (B,)
            frames = inputs.target_lengths.float()  # (B,)
            length_error = ((total - frames).abs() / frames).mean()
        return LunaLosses(diffusion, loss, length_error)
