"""The wall-clock budget of ``duet voice train --minutes M``: where the time goes, and how many training steps fit.

Every stage's wall time is recorded as it ends (:class:`StageClock`, kept in the build's state, so a resumed run
counts the time its earlier invocations spent). Training gets what the budget leaves once the data is prepared and
encoded, minus what the evaluation and the export will take (:func:`eval_reserve`: a fixed part for loading
Whisper, the speaker encoder and two models, and a part per second of held-out audio, synthesised by two models and
scored for three systems, whose Whisper share is timed on a few held-out recordings: a multilingual Whisper base
is several times slower than the bundled tiny.en). The number of steps is that time over the measured seconds per step of a few real steps
(``calibration_steps``, taken inside the warm-up, whose learning rates do not depend on the run's length); the
learning-rate schedule ends at that step. The loop's own time limit (``duet.train.runner``) is set a little beyond
it, so a machine that slows down mid-run still ends near the budget.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError

EVAL_FIXED_S = 45.0  # loading Whisper, the speaker encoder and two Gepard models
SYNTH_PER_AUDIO_S = 0.4  # per second of held-out audio, for each of the two models that speak it (2 cores)
SIM_PER_AUDIO_S = 0.05  # the speaker encoder, per second of audio of each of the three systems
ASR_SLACK = 1.5  # a model in training is harder for Whisper than the recordings it was timed on (longer searches)
EXPORT_S = 20.0  # writing the voice and its card
TIME_LIMIT_SLACK = 1.1  # the loop stops at this multiple of the planned training time at the latest
MIN_STEPS = 20  # fewer than this is no fine-tuning: the budget is refused


def eval_reserve(heldout_seconds: float, asr_per_audio_s: float, evaluate: bool = True) -> float:
    """Seconds kept for the export and the evaluation of ``heldout_seconds`` of held-out audio, whose Whisper takes
    ``asr_per_audio_s`` seconds per second of recordings (measured on a few of them: ``duet.voice.evaluate``)."""
    if not evaluate:
        return EXPORT_S
    per_second = 2 * SYNTH_PER_AUDIO_S + 3 * (ASR_SLACK * asr_per_audio_s + SIM_PER_AUDIO_S)
    return EXPORT_S + EVAL_FIXED_S + per_second * heldout_seconds


@dataclass(frozen=True)
class StepPlan:
    """How many optimizer steps the budget holds."""

    budget_s: float  # the whole command's
    spent_s: float  # before training: checks, preparation, alignment, encoding, calibration
    reserve_s: float  # kept for the evaluation and the export
    sec_per_step: float  # measured
    steps: int  # the run's length (the LR schedule ends here)

    @property
    def train_s(self) -> float:
        return self.budget_s - self.spent_s - self.reserve_s

    def to_json(self) -> dict:
        return {"budget_s": self.budget_s, "spent_s": round(self.spent_s, 1), "reserve_s": round(self.reserve_s, 1),
                "sec_per_step": round(self.sec_per_step, 4), "steps": self.steps}


def plan_steps(budget_s: float, spent_s: float, reserve_s: float, sec_per_step: float, done: int = 0) -> StepPlan:
    """Steps that fit the budget after ``spent_s`` with ``reserve_s`` kept back; ``done`` steps are already taken
    (the calibration's), and their time is in ``spent_s``. A budget that holds fewer than ``MIN_STEPS`` steps in
    all is refused in one line."""
    if sec_per_step <= 0:
        raise DuetError(f"a training step cannot take {sec_per_step} s")
    more = max(0, math.floor((budget_s - spent_s - reserve_s) / sec_per_step))
    if done + more < MIN_STEPS:
        need = spent_s + reserve_s + (MIN_STEPS - done) * sec_per_step
        raise DuetError(f"a budget of {budget_s / 60:.1f} minutes leaves time for {done + more} training steps "
                        f"({sec_per_step:.2f} s each) after {spent_s / 60:.1f} minutes of preparation; give at least "
                        f"--minutes {math.ceil(need / 60)}")
    return StepPlan(budget_s, spent_s, reserve_s, sec_per_step, done + more)


def measured_sec_per_step(metrics_path: Path) -> float:
    """The median seconds per step of the logged steps of a run (``metrics.jsonl``), the first one left out (it
    pays for the first batches and the allocator's warm-up)."""
    from duet.train.metrics import read_metrics

    times = [r["sec_per_step"] for r in read_metrics(metrics_path) if "sec_per_step" in r and r.get("step", 0) > 1]
    if not times:
        raise DuetError(f"{metrics_path} holds no timed steps to plan the run by")
    return statistics.median(times)


class StageClock:
    """Wall seconds per stage, summed over invocations and written to ``path`` (JSON) as each stage ends."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds: dict[str, float] = json.loads(path.read_text()) if path.is_file() else {}
        self._running: tuple[str, float] | None = None

    @property
    def spent(self) -> float:
        """Seconds spent so far, including the stage running now."""
        now = time.monotonic() - self._running[1] if self._running else 0.0
        return sum(self.seconds.values()) + now

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self._running = (name, time.monotonic())
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - self._running[1]
            self._running = None
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps({k: round(v, 2) for k, v in self.seconds.items()}, indent=1) + "\n")
            tmp.replace(self.path)
