"""LPAS_DG's resolve_debounce: capacity changes within the interval cause one re-solve, at its end;
a change that leaves a class no eligible machine up re-solves at once; by default every change does."""

from __future__ import annotations

import pytest
from helpers import make_core, make_policy

from mgst.core import SetTimer

# The three machines of tests/test_policies.py: class 0 fast on M0, class 1 on M1 and M2.
# All up: delta* = [[1, 0, 3/4], [0, 1, 1/4]]: class 0 on M0 and M2, class 1 on M1 and M2.
RATES = [[4.0, 1.0, 1.0], [1.0, 4.0, 3.0]]
ALPHA = [1.0, 1.0]
ALL_UP = ((True, False, True), (False, True, True))
KEY = ("lpas_dg", "debounced")


def timers(outputs) -> list[SetTimer]:
    return [o for o in outputs if type(o) is SetTimer]


def test_by_default_every_capacity_change_re_solves():
    core = make_core(make_policy("lpas_dg"), RATES, ALPHA)
    policy = core.policy
    solves = policy.solves
    for t, event in enumerate(["down", "up", "down", "up"], start=1):
        out = core.machine_down(float(t), 2) if event == "down" else core.machine_up(float(t), 2)
        assert not timers(out)
        assert policy.solves == solves + t
    assert policy.eligible == ALL_UP


def debounced_core(interval: float = 10.0):
    """All machines up at 0; the ups after the first (which solved at once: nothing was up) wait for
    the debounced re-solve, fired here at 10."""
    core = make_core(make_policy("lpas_dg", {"resolve_debounce": interval}), RATES, ALPHA)
    assert core.timers == {KEY: interval}
    assert core.policy.eligible != ALL_UP  # planned with one machine up
    core.timer_fired(interval, KEY)
    assert core.policy.eligible == ALL_UP
    return core


def test_changes_within_the_interval_cause_one_solve_at_its_end():
    core = debounced_core()
    policy = core.policy
    solves = policy.solves
    # M2 down then up, within 10 of the last solve (at 10): nobody is starved, so nothing is solved now
    assert timers(core.machine_down(11.0, 2)) == [SetTimer(KEY, 20.0)]
    assert timers(core.machine_up(12.0, 2)) == []  # the re-solve is already on its way
    core.cpu_share_changed(13.0, 1, 0.5)
    assert policy.solves == solves
    core.timer_fired(20.0, KEY)
    assert policy.solves == solves + 1
    assert policy.allocation.delta[1][1] == pytest.approx(0.5)  # the share change is in the plan
    # a change after the interval has passed solves at once, as without the option
    core.machine_down(31.0, 2)
    assert policy.solves == solves + 2


def test_a_change_that_leaves_a_class_no_eligible_machine_up_solves_at_once():
    core = debounced_core()
    policy = core.policy
    solves = policy.solves
    core.machine_down(11.0, 0)  # class 0 still has M2
    assert policy.solves == solves
    core.machine_down(12.0, 2)  # class 0 has no eligible machine up, and M1 can run it: at once
    assert policy.solves == solves + 1
    assert policy.eligible[0] == (False, True, False)
    core.timer_fired(20.0, KEY)  # the change it waited for is in the plan already
    assert policy.solves == solves + 1


def test_a_class_that_no_machine_up_can_run_does_not_force_solves():
    # Class 1 runs only on M1: with M1 down, re-solving cannot help it, so changes stay debounced.
    rates = [[4.0, 1.0, 1.0], [0.0, 4.0, 0.0]]
    core = make_core(make_policy("lpas_dg", {"resolve_debounce": 10.0}), rates, ALPHA)
    core.timer_fired(10.0, KEY)
    policy = core.policy
    core.machine_down(11.0, 1)  # class 1 starved, and nobody up can run it: wait
    solves = policy.solves
    core.machine_down(12.0, 2)
    core.machine_up(13.0, 2)
    assert policy.solves == solves


@pytest.mark.parametrize("value", [0.0, -1.0])
def test_the_interval_must_be_positive(value):
    with pytest.raises(ValueError, match="resolve_debounce: must be > 0"):
        make_policy("lpas_dg", {"resolve_debounce": value})


# --- resolve_debounce = "auto" (the default): off below AUTO_DEBOUNCE_MACHINES machines, then a tenth of the
# shortest mean job time. Two classes on n machines: class 0 at rate 2 (mean job 1/2), class 1 at rate 0.5
# with granularity 3 on the machines (mean job 6); machine 0 is twice as fast at class 0 (mean job 1/4).

def scaled_core(n: int, options: dict | None = None):
    from mgst.core import Scheduler
    from mgst.model import JobClass, Machine

    classes = [JobClass("c0", 1.0), JobClass("c1", 1.0, granularity=3.0)]
    machines = [Machine(f"M{j}", (4.0 if j == 0 else 2.0, 0.5)) for j in range(n)]
    core = Scheduler(classes, machines, make_policy("lpas_dg", options), check=True)
    core.start(0.0)
    for j in range(n):
        core.machine_up(0.0, j)
    return core


def test_auto_re_solves_at_every_change_below_the_machine_count():
    from mgst.papers.mgst.lpas import AUTO_DEBOUNCE_MACHINES

    core = scaled_core(AUTO_DEBOUNCE_MACHINES - 1)
    assert core.policy.debounce is None
    solves = core.policy.solves
    core.machine_down(1.0, 5)
    core.machine_up(2.0, 5)
    assert core.policy.solves == solves + 2
    assert KEY not in core.timers


def test_auto_debounces_from_the_machine_count_to_a_tenth_of_the_shortest_mean_job():
    from mgst.papers.mgst.lpas import AUTO_DEBOUNCE_MACHINES

    core = scaled_core(AUTO_DEBOUNCE_MACHINES)
    policy = core.policy
    assert policy.debounce == pytest.approx(0.1 * 0.25)  # machine 0 runs class 0's jobs in 1/4 on average
    # the first machine up solved at once (nothing was up before it); the other n - 1 ups, one re-solve at 0.025
    assert policy.solves == 2
    assert core.timers == {KEY: pytest.approx(0.025)}
    core.timer_fired(0.025, KEY)
    assert policy.solves == 3
    assert all(any(row[j] for row in policy.eligible) for j in range(AUTO_DEBOUNCE_MACHINES))  # all planned


@pytest.mark.parametrize("options", [{"resolve_debounce": "off"}, {"resolve_debounce": "auto",
                                                                   "resolve_on_events": False,
                                                                   "resolve_period": 5.0}])
def test_off_and_periodic_re_solves_leave_auto_out_at_any_size(options):
    from mgst.papers.mgst.lpas import AUTO_DEBOUNCE_MACHINES

    core = scaled_core(AUTO_DEBOUNCE_MACHINES, options)
    assert core.policy.debounce is None
    assert KEY not in core.timers


def test_a_word_other_than_auto_or_off_names_the_option():
    with pytest.raises(ValueError, match='resolve_debounce: must be a number > 0, "auto" or "off"'):
        make_policy("lpas_dg", {"resolve_debounce": "sometimes"})
