"""How good one generated utterance is, for preference pairs: WER against its text and, when cloning, speaker
similarity to the reference clip.

Train needs only the shape: :class:`Quality` and the :class:`QualityScorer` protocol. The scorer the DPO stage uses
is ``duet eval``'s Whisper and speaker encoder (``duet.eval.clip_scorer``, adapted by
``duet.posttrain.scoring.ClipQuality``): an utterance with no audio (the stop head fired at once) has an empty
transcript, WER 1 (every word deleted); a SIM that cannot be computed (no speech left after trimming) is 0.

One number per utterance (:meth:`Quality.value`): ``1 - min(WER, 1)``, plus ``sim_weight x SIM`` when cloning.
WER is capped at 1 so a runaway's insertions do not outweigh everything else; a pair's quality margin is the
difference of the two values (``duet.train.gepard_pairs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Quality:
    wer: float
    transcript: str
    sim: float | None = None  # to the reference clip (cloning only)

    def value(self, sim_weight: float = 1.0) -> float:
        return 1.0 - min(self.wer, 1.0) + (sim_weight * self.sim if self.sim is not None else 0.0)


class QualityScorer(Protocol):
    def score(self, audio: np.ndarray, sample_rate: int, text: str, prompt_wav: Path | None = None) -> Quality:
        """Mono audio (S,) of one utterance that should say ``text`` (in the voice of ``prompt_wav``, if given)."""
        ...
