"""The engine's cost model (``duet.serve.cost``): step prices by the positions a step runs, and the replay of the
scheduler's policy that says when a new request would end, checked against hand-computed schedules."""

import pytest

from duet.errors import DuetError
from duet.serve.cost import CostConfig, StepClock, finish_in
from duet.tts.runtime import StepCost


def clock(prices: dict[int, float], prefill: float | None = None) -> StepClock:
    c = StepClock(smoothing=1.0)
    for positions, seconds in prices.items():
        c.record_step(positions, seconds)
    if prefill is not None:
        c.record_prefill(1, prefill)
    return c


def cost(steps: int, positions: int = 1) -> StepCost:
    return StepCost(steps, positions)


def test_a_step_is_priced_from_the_nearest_measured_sizes():
    c = clock({2: 0.010, 8: 0.022})
    assert c.step_seconds(2) == 0.010 and c.step_seconds(8) == 0.022
    assert c.step_seconds(1) == 0.010  # below every measurement: no cheaper than the smallest
    assert c.step_seconds(5) == pytest.approx(0.016)  # between: interpolated
    assert c.step_seconds(16) == pytest.approx(0.044)  # above: linear in the positions (compute-bound)


def test_timings_are_running_averages_per_bucket():
    c = StepClock(smoothing=0.5)
    c.record_step(40, 1.0)
    c.record_step(41, 2.0)  # the same quarter-octave bucket: averaged with the first, positions too
    assert c.step_seconds(40.5) == pytest.approx(1.5)
    c.record_step(80, 4.0)  # an octave up: a bucket of its own
    assert c.step_seconds(80) == pytest.approx(4.0)
    c.record_prefill(2, 1.0)  # two requests in 1 s: 0.5 s each
    c.record_prefill(1, 1.5)
    assert c.prefill_seconds == pytest.approx(1.0)


def test_nothing_measured_means_no_estimate():
    assert finish_in([cost(5)], [], cost(10), 4, StepClock()) is None


def test_alone_a_request_costs_its_steps_at_its_own_size_and_its_prefill():
    assert finish_in([], [], cost(10), 4, clock({1: 0.1}, prefill=0.5)) == pytest.approx(0.5 + 10 * 0.1)
    # a request of 4 positions a step (Luna: its rows' sequence) priced from a measured 2-position step
    assert finish_in([], [], cost(10, 4), 4, clock({2: 0.1})) == pytest.approx(10 * 0.2)


def test_a_request_joins_a_batch_with_room_and_pays_the_batch_price():
    # running: 4 and 12 steps left; the new one (10) runs beside them: 4 steps at 3 positions, then 6 at 2
    c = clock({1: 0.01, 2: 0.02, 3: 0.03})
    assert finish_in([cost(4), cost(12)], [], cost(10), 4, c) == pytest.approx(4 * 0.03 + 6 * 0.02)


def test_a_full_batch_makes_it_wait_first_in_first_out():
    # one slot: the running request (3 left), the queued one (5), then the new one (2), one after another
    c = clock({1: 0.1})
    assert finish_in([cost(3)], [cost(5)], cost(2), 1, c) == pytest.approx((3 + 5 + 2) * 0.1)
    # two slots: the queued one starts when the first ends; the new one when a slot frees again
    c = clock({1: 0.1, 2: 0.1})
    assert finish_in([cost(3), cost(10)], [cost(4)], cost(2), 2, c) == pytest.approx((3 + 4 + 2) * 0.1)


def test_the_config_is_checked():
    with pytest.raises(DuetError):
        CostConfig(headroom=0.0)
    with pytest.raises(DuetError):
        CostConfig(smoothing=1.5)
    CostConfig(headroom=None)  # admission by cost off
