"""Availability injection plays the simulator's periods for the welcome's law, in wall time (no processes)."""

from __future__ import annotations

import pytest

from adjuster.failures import AvailabilitySchedule
from mgst.availability.exponential import ExponentialUpDown
from mgst.availability.process import State
from mgst.availability.registry import process_from_wire
from mgst.availability.weibull import WeibullNormalUpDown
from mgst.model import FailureModel, WeibullGroup


def play(failures, machine: int, time_unit: float, now: float) -> AvailabilitySchedule:
    """A schedule at a_j = 1 (the share only names the UP periods' share)."""
    return AvailabilitySchedule(failures, machine, time_unit, now, 1.0)


def walk(schedule: AvailabilitySchedule, start: float, n: int) -> list[float]:
    """Up, down, up, ... period lengths in wall seconds, as a puller going down and coming back sees them."""
    periods = []
    now = start
    assert schedule.period.state is State.UP
    for _ in range(n):
        down_at = schedule.ends_at
        assert schedule.advance(down_at).state is State.DOWN
        up_at = schedule.ends_at
        assert schedule.advance(up_at).state is State.UP
        periods += [down_at - now, up_at - down_at]
        now = up_at
    return periods


@pytest.mark.parametrize("machine", [0, 3, 11])
def test_weibull_schedule_is_the_simulators_stream(machine: int) -> None:
    group = WeibullGroup(mttf=5000.0, shape=0.7, repair_mean=600.0, repair_sd=200.0)
    seed, unit = 2024, 0.01
    schedule = play(("weibull", 5000.0, 0.7, 600.0, 200.0, seed), machine, unit, 100.0)
    reference = WeibullNormalUpDown(group, seed, 0, machine)
    drawn = [x for _ in range(200) for x in (reference.next_up() * unit, reference.next_down() * unit)]
    got = walk(schedule, 100.0, 200)
    assert got == pytest.approx([max(0.01, x) for x in drawn], rel=1e-9)  # none shorter than 10 ms (MIN_PERIOD)
    assert all(d > 0 for d in got[1::2])  # repairs truncated to positive lengths


def test_periods_shorter_than_the_minimum_last_the_minimum() -> None:
    """A law of microseconds plays every period at MIN_PERIOD (10 ms); a draw above it is left alone."""
    tiny = play(("exponential", 1e-6, 1e-6, 4), 0, 1.0, 0.0)
    assert walk(tiny, 0.0, 50) == pytest.approx([0.01] * 100, rel=1e-9)
    law = ("weibull", 5000.0, 0.7, 600.0, 200.0, 2024)  # machine 0 draws an up period of 0.23 units: 2.3 ms
    reference = WeibullNormalUpDown(WeibullGroup(*law[1:5]), 2024, 0, 0)
    drawn = [x for _ in range(200) for x in (reference.next_up() * 0.01, reference.next_down() * 0.01)]
    short = [i for i, x in enumerate(drawn) if x < 0.01]
    assert short, "the case that shows the clamp: some draw shorter than 10 ms"
    got = walk(play(law, 0, 0.01, 0.0), 0.0, 200)
    assert [got[i] for i in short] == pytest.approx([0.01] * len(short), rel=1e-9)
    assert [g for i, g in enumerate(got) if i not in short] == pytest.approx(
        [x for i, x in enumerate(drawn) if i not in short], rel=1e-9)


def test_exponential_schedule_is_the_simulators_stream() -> None:
    schedule = play(["exponential", 40.0, 5.0, 9], 2, 0.5, 0.0)  # (a list, as msgpack gives)
    reference = ExponentialUpDown(FailureModel(40.0, 5.0), 9, 0, 2)
    expected = [x for _ in range(50) for x in (reference.next_up() * 0.5, reference.next_down() * 0.5)]
    assert walk(schedule, 0.0, 50) == pytest.approx(expected, rel=1e-9)


def test_machines_and_seeds_differ() -> None:
    law = ("weibull", 100.0, 0.5, 10.0, 2.0)
    firsts = {process_from_wire((*law, seed), m, 1.0).next().duration for seed in (1, 2) for m in (0, 1)}
    assert len(firsts) == 4


@pytest.mark.parametrize(("failures", "message"), [
    (None, "non-empty tuple"),
    ((), "non-empty tuple"),
    (("gamma", 1.0, 2.0, 3), "unknown failure model"),
    (("exponential", 1.0, 2.0), "seed"),
    (("exponential", 1.0, 2.0, 1.5), "seed"),
    (("exponential", 1.0, 2.0, 3.0, 4), "(mean_up, mean_down, seed)"),
    (("exponential", 0.0, 2.0, 3), "mean_up > 0"),
    (("exponential", 1.0, float("inf"), 3), "non-finite"),
    (("weibull", 100.0, 0.5, 10.0, 3), "(mttf, shape, repair_mean, repair_sd, seed)"),
    (("weibull", 100.0, 0.01, 10.0, 1.0, 3), "shape"),
    (("weibull", 100.0, 0.5, -10.0, 1.0, 3), "repair_mean > 0"),
    (("weibull", "100", 0.5, 10.0, 1.0, 3), "non-numeric"),
    (("weibull", 100.0, 0.5, 10.0, 1.0, -1), "seed"),
])
def test_bad_models_are_refused_clearly(failures, message: str) -> None:
    with pytest.raises(ValueError) as err:
        play(failures, 0, 1.0, 0.0)
    assert message in str(err.value), err.value


def test_time_unit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="time_unit"):
        play(("exponential", 1.0, 1.0, 0), 0, 0.0, 0.0)
