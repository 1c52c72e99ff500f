"""The testbed run's clock and its wall-clock timers (mgst.testbed.run_clock), against hand-computed times."""

from __future__ import annotations

import math

from mgst.testbed.run_clock import RunClock, WallTimers


def test_model_time_is_zero_until_the_run_begins_then_wall_time_over_the_time_unit():
    clock = RunClock(time_unit=2.0)
    assert clock.t0 is None and clock.model_now(1e9) == 0.0
    clock.begin(100.0)
    assert clock.model_now(104.0) == 2.0
    assert clock.model_now(99.0) == 0.0  # never before 0 (a wall time read before t0)


def test_a_held_clock_stands_still_and_runs_on_with_the_wait_cut_out():
    clock = RunClock(time_unit=2.0)
    clock.hold(5.0, 200.0)  # a resumed run at model time 5, as of wall time 200
    assert clock.t0 == 190.0  # provisional
    assert clock.model_now(200.0) == clock.model_now(260.0) == 5.0
    assert clock.run_on(300.0) == 290.0  # the 100 s wait is cut out
    assert clock.held is None
    assert clock.model_now(302.0) == 6.0


def test_timers_fire_earliest_first_and_ties_in_the_order_set():
    timers = WallTimers()
    assert timers.next_at() == math.inf
    timers.push(10.0, "a")
    timers.push(5.0, "b")
    timers.push(5.0, "c")
    assert timers.next_at() == 5.0
    assert [timers.pop(), timers.pop(), timers.pop()] == ["b", "c", "a"]
    assert timers.next_at() == math.inf


def test_rebase_moves_the_timers_still_held_to_their_model_time_from_t0_and_drops_the_rest():
    timers = WallTimers()
    timers.push(1.0, "a")  # set while model time stood at 0: its wall time was provisional
    timers.push(2.0, "gone")  # no longer held by the core
    timers.push(3.0, "c")
    timers.rebase(100.0, 2.0, {"a": 4.0, "c": 0.5})
    assert [(timers.next_at(), timers.pop()), (timers.next_at(), timers.pop())] == [(101.0, "c"), (108.0, "a")]
    assert timers.next_at() == math.inf
