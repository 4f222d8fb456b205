"""One clip's WER and SIM (``duet.eval.clip_scorer``) in the shape each post-training stage reads: a DPO pair side's
``duet.train.quality.Quality`` and a GRPO candidate's ``duet.luna.rewards.CandidateScore``.

The two differ only in a SIM that cannot be computed: a pair side cloned from a reference scores 0 (as far from the
voice as it gets, so the margin still counts it), while a GRPO candidate keeps None (``duet.luna.rewards`` ranks it
below any measured SIM).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from duet.eval.clip_scorer import ClipScoreConfig, ClipScorer
from duet.luna.rewards import CandidateScore
from duet.train.quality import Quality


class ClipQuality:
    """``duet.train.quality.QualityScorer`` over a :class:`ClipScorer` (models load on first use)."""

    def __init__(self, config: ClipScoreConfig = ClipScoreConfig()):
        self.clip = ClipScorer(config)

    def score(self, audio: np.ndarray, sample_rate: int, text: str, prompt_wav: Path | None = None) -> Quality:
        s = self.clip.score(audio, sample_rate, text, prompt_wav)
        sim = 0.0 if s.sim is None and prompt_wav is not None else s.sim
        return Quality(wer=s.wer, transcript=s.transcript, sim=sim)


class ClipReward:
    """``duet.train.grpo_loop.Scorer`` over a :class:`ClipScorer`: ``(audio, sample_rate, text, reference)`` ->
    :class:`CandidateScore`."""

    def __init__(self, config: ClipScoreConfig = ClipScoreConfig()):
        self.clip = ClipScorer(config)

    def __call__(self, audio: np.ndarray, sample_rate: int, text: str, reference: Path | None) -> CandidateScore:
        s = self.clip.score(audio, sample_rate, text, reference)
        return CandidateScore(wer=s.wer, sim=s.sim)
