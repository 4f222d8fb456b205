"""The time budget: how many steps fit, the refusal of a budget too small, and the clock across invocations."""

from __future__ import annotations

import json
import time

import pytest

from duet.errors import DuetError
from duet.voice.budget import MIN_STEPS, StageClock, eval_reserve, measured_sec_per_step, plan_steps


def test_the_steps_fill_what_the_budget_leaves():
    plan = plan_steps(budget_s=3600, spent_s=300, reserve_s=400, sec_per_step=1.45, done=8)
    assert plan.steps == 8 + int((3600 - 300 - 400) / 1.45)
    assert plan.train_s == 2900 and plan.to_json()["steps"] == plan.steps
    assert eval_reserve(120, 0.1) > eval_reserve(60, 0.1) > eval_reserve(60, 0.1, evaluate=False)
    assert eval_reserve(60, 0.5) > eval_reserve(60, 0.1)  # a slower Whisper takes a larger share


def test_a_budget_too_small_is_refused_in_one_line_that_says_how_much_is_needed():
    with pytest.raises(DuetError, match=r"give at least --minutes \d+") as err:
        plan_steps(budget_s=600, spent_s=500, reserve_s=200, sec_per_step=1.5, done=8)
    assert "\n" not in str(err.value)
    assert plan_steps(600, 100, 200, 1.5, 8).steps >= MIN_STEPS


def test_the_measured_step_time_leaves_out_the_first_step(tmp_path):
    lines = [{"step": 1, "sec_per_step": 9.0}, {"step": 2, "sec_per_step": 1.0}, {"step": 3, "sec_per_step": 1.2},
             {"step": 4, "sec_per_step": 1.1}, {"step": 4, "val_loss": 3.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert measured_sec_per_step(tmp_path / "metrics.jsonl") == pytest.approx(1.1)


def test_the_clock_adds_up_the_stages_of_every_invocation(tmp_path):
    clock = StageClock(tmp_path / "clock.json")
    with clock.stage("data"):
        time.sleep(0.05)
    again = StageClock(tmp_path / "clock.json")  # a resumed invocation reads what the earlier ones spent
    with again.stage("data"):
        time.sleep(0.05)
    with again.stage("train"):
        assert again.spent >= 0.1  # the stage running now counts too
    assert again.seconds["data"] >= 0.1 and again.spent == pytest.approx(sum(again.seconds.values()))
