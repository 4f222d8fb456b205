"""Prompt-local ordinal rewards for RL post-training (Luna report §4.2): content first, speaker similarity breaks ties.

Each candidate of a prompt's group has a word error rate (Whisper against the target text) and, when the prompt
carries reference audio, a speaker similarity to it (its ``duet.metrics.clip.ClipScore``). The report turns the two
into a lexicographic, group-local ordering (its Psi_g): a lower WER wins; among candidates of equal WER the higher
SIM wins. Only the order inside the group matters, so the reward is insensitive to how hard a prompt is or how a
metric's scale drifts between prompts.

The report gives the ordering, not the number it becomes. Duet's reading: candidate i's reward is its net wins

    R_i = #{j : i beats j} - #{j : j beats i}

(Copeland's score). For a strict order it is an affine function of the rank (2 rank - (G - 1)), so after the group
standardisation of ``duet.train.objectives.luna_grpo.group_advantages`` it gives exactly the rank's advantages; tied
candidates get equal rewards, and a group in which every candidate ties gets equal rewards everywhere, i.e. no
preference signal (skipped by the update).

"Equal WER" is exact by default. ``wer_tie`` > 0 treats WERs within that distance as equal (the report speaks of
refining among candidates of "similar" linguistic quality); net wins stay well defined even when such ties are not
transitive. A missing SIM (no reference, or nothing left to embed after silence trimming) ranks below any measured
one; two missing SIMs tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from duet.errors import DuetError
from duet.metrics.clip import ClipScore


def beats(a: ClipScore, b: ClipScore, wer_tie: float = 0.0) -> bool:
    """Whether ``a`` is preferred to ``b``: lower WER (by more than ``wer_tie``), else higher SIM."""
    if a.wer < b.wer - wer_tie:
        return True
    if abs(a.wer - b.wer) > wer_tie:
        return False
    sa = -math.inf if a.sim is None else a.sim
    sb = -math.inf if b.sim is None else b.sim
    return sa > sb


def lexicographic_rewards(scores: Sequence[ClipScore], wer_tie: float = 0.0) -> list[float]:
    """One group's candidates -> their rewards R_i (net wins, module docstring)."""
    if wer_tie < 0:
        raise DuetError(f"wer_tie must be >= 0, got {wer_tie}")
    if any(not math.isfinite(s.wer) for s in scores):
        raise DuetError("every candidate needs a finite WER")
    return [float(sum(beats(a, b, wer_tie) for b in scores) - sum(beats(b, a, wer_tie) for b in scores))
            for a in scores]
