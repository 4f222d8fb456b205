"""What Luna-TTS trains and ships as one unit: the acoustic model (``LunaModel``) and its duration predictor.

Luna §2.5 / §3.2: decoding needs the target length T before the first step, and a separate bidirectional text model
predicts it. Both read the same text ids, so duet trains them side by side on the same batches, in one loop and one
optimizer, and ships them in one directory (``duet.luna.shipped``). Their parameters are disjoint, so the summed
loss trains each exactly as its own loss would (AdamW is per parameter); what they share is the LR schedule, the
global gradient-norm clip and the non-finite guard. Divergence from the report, which fine-tunes the predictor as
its own model: one run is simpler to train, resume and ship, and the predictor costs a few percent of a step.

``forward`` returns the losses (like ``GepardModel.forward``), so DDP sees one module called once per micro-batch.

``RealtimeBundle`` is Luna-TTS Realtime's unit (§3.2 "Block adaptation"): the block-causal ``LunaRealtime`` that
continual training adapts, and the duration predictor of the Luna it starts from, copied and frozen (Realtime stops
by its learned end of speech; the predicted length only sets a serving bound, ``duet.tts.luna_realtime``).

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
from duet.luna.realtime import LunaRealtime, RealtimeConfig
from duet.luna.realtime_loss import RealtimeLoss, RealtimeObjective, realtime_training_loss
from duet.nn.masks import lengths_to_mask


@dataclass(frozen=True)
class LunaBatch:
    """A training batch: conditions and clean target grids, plus per-token duration targets."""

    inputs: LunaInputs  # text (B, S), clean target (B, T, Q); no prompt: the objective cuts prompts (diffusion.py)
    # (B, S) frames per text token; each row adds up to its target length: int64 counts, or float (continuous
    # corpus timing, which aligned models also read as ``inputs.durations``)
    durations: torch.Tensor

    def to(self, device: torch.device | str) -> "LunaBatch":
        i = self.inputs
        move = lambda x: None if x is None else x.to(device)  # noqa: E731
        inputs = LunaInputs(move(i.text_ids), move(i.text_lengths), move(i.target), move(i.target_lengths),
                            move(i.prompt), move(i.prompt_lengths), move(i.durations))
        return LunaBatch(inputs, self.durations.to(device))


@dataclass(frozen=True)
class LunaLosses:
    diffusion: DiffusionLoss | None  # the masked-diffusion loss and its detached metrics (None: predictor only)
    duration: torch.Tensor  # scalar: the predictor's mean bin cross-entropy over real tokens
    length_error: torch.Tensor  # scalar, detached: mean |sum of expected durations - T| / T over rows


def _check_vocab(config: LunaConfig, duration: DurationConfig) -> None:
    if config.backbone.vocab_size != duration.backbone.vocab_size:
        raise DuetError(f"the acoustic model reads {config.backbone.vocab_size} text ids, the duration "
                        f"predictor {duration.backbone.vocab_size}: they share one tokenizer")


class LunaBundle(nn.Module):
    def __init__(self, config: LunaConfig, duration: DurationConfig):
        super().__init__()
        _check_vocab(config, duration)
        self.acoustic = LunaModel(config)
        self.duration = DurationPredictor(duration)

    def forward(self, batch: LunaBatch, cfg: DiffusionConfig = DiffusionConfig(),
                generator: torch.Generator | None = None, duration_only: bool = False) -> LunaLosses:
        """The losses of one batch; ``duration_only`` skips the acoustic model (a predictor-only fine-tune)."""
        inputs = batch.inputs
        diffusion = None if duration_only else diffusion_training_loss(self.acoustic, inputs, cfg, generator)
        logits = self.duration(inputs.text_ids, inputs.text_lengths)  # (B, S, N)
        loss = duration_loss(logits, inputs.text_lengths, batch.durations)
        with torch.no_grad():
            valid = lengths_to_mask(inputs.text_lengths, logits.shape[1])  # (B, S)
            total = (expected_durations(logits) * valid).sum(dim=1)  # (B,)
            frames = inputs.target_lengths.float()  # (B,)
            length_error = ((total - frames).abs() / frames).mean()
        return LunaLosses(diffusion, loss, length_error)


class RealtimeBundle(nn.Module):
    """``acoustic`` (``LunaRealtime``: ``acoustic.luna.*``, ``acoustic.end_head.*``) and ``duration`` (frozen)."""

    def __init__(self, config: RealtimeConfig, duration: DurationConfig):
        super().__init__()
        _check_vocab(config.luna, duration)
        self.acoustic = LunaRealtime(config)
        self.duration = DurationPredictor(duration)
        self.duration.requires_grad_(False)  # copied from Luna, never trained here: the loop's optimizer skips it

    @classmethod
    def from_luna(cls, luna: LunaBundle, block_size: int) -> "RealtimeBundle":
        """Continual training starts here: every Luna weight and the duration predictor copied, a fresh end head
        (drawn from torch's global RNG, as ``LunaRealtime.from_luna``)."""
        bundle = cls(RealtimeConfig(luna.acoustic.config, block_size), luna.duration.config)
        bundle.acoustic.luna.load_state_dict(luna.acoustic.state_dict())
        bundle.duration.load_state_dict(luna.duration.state_dict())
        return bundle

    def forward(self, batch: LunaBatch, objective: RealtimeObjective = RealtimeObjective(),
                generator: torch.Generator | None = None) -> RealtimeLoss:
        """The block-diffusion + end-of-speech loss of one batch (its duration targets are not used)."""
        return realtime_training_loss(self.acoustic, batch.inputs, objective, generator)
