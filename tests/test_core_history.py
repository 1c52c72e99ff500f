"""The core's per-host history (MachineRecord.history) on hand-made event sequences, and View.task_size's contract."""

from __future__ import annotations

import pytest
from helpers import Scripted, assigns, make_policy, new_core

from mgst.core import PolicyError, SuspectDown
from mgst.core.stats import DOWN, RECLAIMED, SUSPENDED, UP
from mgst.model import Availability, Job
from mgst.policies.base import Policy


def history_core():
    """One host of power 2 and one of power 1, FCFS; not started, both DOWN from time 0."""
    core = new_core(make_policy("fcfs"), [[2.0, 1.0]])
    core.start(0.0)
    return core


def test_history_counts_states_and_delivered_cpu_by_hand():
    core = history_core()
    h = core.machines[0].history
    core.machine_up(100.0, 0, 1.0)  # DOWN 0..100
    core.cpu_share_changed(300.0, 0, 0.5)  # UP at 1.0, 100..300: 200 CPU-s
    core.cpu_share_changed(500.0, 0, 0.0)  # UP at 0.5, 300..500: 100 CPU-s
    core.cpu_share_changed(700.0, 0, 1.0)  # SUSPENDED 500..700: nothing
    core.machine_down(800.0, 0)  # UP at 1.0, 700..800: 100 CPU-s; the interval delivered 200 + 100 + 100 = 400
    assert h.delivered(800.0) == 400.0
    assert h.intervals == 1 and h.interval_sum == 400.0 and h.interval_sumsq == 160000.0
    core.machine_ready(1000.0, 0)  # DOWN 800..1000; up again at its last share, 1.0
    # at 1100: UP 200 + 200 + 100 + 100 (the open one), SUSPENDED 200, DOWN 100 + 200
    assert h.time_in(UP, 1100.0) == 600.0
    assert h.time_in(SUSPENDED, 1100.0) == 200.0
    assert h.time_in(DOWN, 1100.0) == 300.0
    assert h.delivered(1100.0) == 500.0
    assert h.open_interval(1100.0) == 100.0
    # the open interval (100) has delivered less than the ended one's mean (400): not counted yet
    assert h.mean_delivered_per_interval(1100.0) == 400.0
    # at 1500 it has delivered 500 > 400: it counts, as if it ended now
    assert h.mean_delivered_per_interval(1500.0) == (400.0 + 500.0) / 2
    core.machine_down(1600.0, 0)  # the second interval delivered 600
    assert h.intervals == 2
    assert h.mean_delivered_per_interval(2000.0) == 500.0  # down: the ended ones only
    assert h.sd_delivered_per_interval() == pytest.approx(100.0)  # population sd of 400 and 600
    assert h.time_in(DOWN, 2000.0) == 100.0 + 200.0 + 400.0


def test_a_host_never_up_has_no_history_and_its_down_time_runs_from_zero():
    core = history_core()
    h = core.machines[1].history
    assert h.mean_delivered_per_interval(50.0) is None
    assert h.sd_delivered_per_interval() is None
    assert h.time_in(DOWN, 50.0) == 50.0 and h.delivered(50.0) == 0.0
    with pytest.raises(ValueError, match="unknown availability state 'busy'"):
        h.time_in("busy", 50.0)


def test_a_share_noted_while_down_starts_the_next_interval():
    core = history_core()
    h = core.machines[1].history
    core.cpu_share_changed(10.0, 1, 0.25)  # down: noted, no CPU delivered
    core.machine_up(20.0, 1)  # up at 0.25
    assert h.delivered(120.0) == 25.0
    assert h.mean_delivered_per_interval(120.0) == 25.0  # the open interval alone: none has ended


def test_a_suspicion_ends_an_interval_like_a_failure():
    policy = Scripted()
    core = new_core(policy, [[1.0]])
    core.start(0.0)
    h = core.machines[0].history
    core.machine_ready(0.0, 0, 1.0)
    policy.todo = [SuspectDown(0)]
    core.cpu_share_changed(30.0, 0, 0.5)  # the policy suspects it after this event: down at 30
    assert not h.is_up
    assert h.intervals == 1 and h.interval_sum == 30.0
    assert h.time_in(DOWN, 50.0) == 20.0


def test_completions_and_losses_are_read_through_the_history():
    core = history_core()
    h = core.machines[0].history
    core.machine_ready(0.0, 0)
    out = core.job_arrived(0.0, Job(0, 0, 0.0, 10.0))
    core.replica_done(5.0, assigns(out)[0].replica, ready=True)
    out = core.job_arrived(6.0, Job(1, 0, 6.0, 10.0))
    assert assigns(out)
    core.machine_down(7.0, 0)
    assert (h.completed, h.lost) == (1, 1)


class SizeReader(Policy):
    """Reads the size of the job it is asked about (declares knows_sizes only in the subclass below)."""

    name = "size_reader"
    hooks = frozenset({"choose"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.sizes: list[float] = []

    def choose(self, view, machine):
        head = next((q.head for q in view.queues.values() if q.head is not None), None)
        if head is not None:
            self.sizes.append(view.task_size(head))
        return head


class DeclaredSizeReader(SizeReader):
    name = "declared_size_reader"
    knows_sizes = True


def test_a_policy_that_does_not_declare_knows_sizes_is_refused_a_size():
    core = new_core(SizeReader(), [[1.0]])
    core.start(0.0)
    core.machine_ready(0.0, 0)
    with pytest.raises(PolicyError, match="policy size_reader reads the size of job 0 but does not declare"):
        core.job_arrived(0.0, Job(0, 0, 0.0, 42.0))


def test_a_policy_that_declares_knows_sizes_reads_them():
    policy = DeclaredSizeReader()
    core = new_core(policy, [[1.0]])
    core.start(0.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, Job(0, 0, 0.0, 42.0))
    assert policy.sizes == [42.0]


def test_history_has_reclaimed_periods_transitions_and_the_host_s_record():
    """GridBot's host attributes and Kondo's history, from the core: states with their periods, errors, successes
    (recent ones), jobs today and mean turnaround."""
    core = history_core()
    h = core.machines[0].history
    core.machine_up(100.0, 0, 1.0)  # DOWN 0..100
    core.machine_availability(200.0, 0, Availability.RECLAIMED, 0.5)  # UP 100..200: 100 CPU-s
    core.machine_availability(300.0, 0, Availability.RECLAIMED, 0.0)  # RECLAIMED at 0.5, 200..300: 50 CPU-s
    core.machine_availability(400.0, 0, Availability.UP, 1.0)  # SUSPENDED (reclaimed at 0) 300..400: nothing
    assert [h.time_in(s, 400.0) for s in (UP, RECLAIMED, SUSPENDED, DOWN)] == [100.0, 100.0, 100.0, 100.0]
    assert [h.periods(s) for s in (UP, RECLAIMED, SUSPENDED, DOWN)] == [2, 1, 1, 1]  # UP again from 400
    assert h.delivered(400.0) == 150.0
    # Three jobs of 4 units (2 time units on this host of power 2): done, failed, done; on model day 0 and 1.
    for i in (1, 2, 3):
        core.job_arrived(400.0, Job(i, 0, 400.0, 4.0))
    core.machine_ready(400.0, 0)  # job 1, sent at 400
    core.replica_done(402.0, 1, ready=True)  # turnaround 2; job 2 sent at 402
    core.replica_failed(403.0, 2)  # an error; job 2 requeued
    core.machine_ready(86_400.0, 0)  # the next model day: job 2 again (replica 3)
    core.replica_done(86_403.0, 3)  # turnaround 3
    assert (h.completed, h.errors, h.successes, h.recent_successes) == (2, 1, 2, 2)
    assert h.stats.recent == (True, False, True)
    assert h.mean_turnaround == 2.5
    assert h.jobs_today(86_403.0) == 1 and h.jobs_today(500.0) == 0  # two on day 0, one on day 1 (of 86,400)
