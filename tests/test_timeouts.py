"""The per-replica time-out piece (mgst/policies/timeouts.py), held by a policy driving a real core."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Hashable

import pytest
from helpers import assigns, of, plain

from mgst.core import (
    Assign,
    Cancel,
    CancelTimer,
    Hold,
    JobCompleted,
    JobRecord,
    JobRequeued,
    JobStatus,
    MachineRecord,
    MachineState,
    MachineSuspected,
    Outcome,
    ReplicaRecord,
    ReplicaTimedOut,
    Scheduler,
    SetTimer,
    TimeOut,
)
from mgst.model import Bag, Job, JobClass, Machine
from mgst.policies import policy_class
from mgst.policies.base import Decisions, Policy
from mgst.policies.timeouts import ReplicaTimeouts, nominal_expected

KEY1 = ("timeout", 1)


class TimedHead(Policy):
    """A machine that asks gets the head of queue 0; every replica gets a time-out."""
    hooks = frozenset({"on_replica_start", "on_replica_end", "on_timer", "choose"})

    name = "test-timed-head"

    def __init__(self, timeouts: ReplicaTimeouts):
        super().__init__()
        self.timeouts = timeouts

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        q = view.queues.get(0)
        return q.head if q else None

    def on_replica_start(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        return self.timeouts.on_replica_start(view, replica)

    def on_replica_end(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        return self.timeouts.on_replica_end(view, replica)

    def on_timer(self, view: Scheduler, key: Hashable) -> Decisions:
        return self.timeouts.on_timer(view, key)


def timed_core(factor: float = 3.0, rates=(2.0, 4.0), slots: int = 1, **kwargs) -> Scheduler:
    """Class 0 of mean size 10; machines M0 (rate 2), M1 (rate 4); a job 1 waiting since 0."""
    machines = [Machine(f"M{j}", (rate,), 1.0, slots) for j, rate in enumerate(rates)]
    core = Scheduler([JobClass("c", 1.0, 10.0)], machines, TimedHead(ReplicaTimeouts(factor, **kwargs)), check=True)
    core.start(0.0)
    core.job_arrived(0.0, Job(1, 0, 0.0, 7.0))
    return core


def test_the_timer_is_armed_at_sent_plus_k_times_the_expected_time():
    core = timed_core()
    # M0 asks at 1 with CPU share 1/2: expected time 10 * (1 - 0) / (2 * 0.5) = 10, k = 3.
    out = core.machine_ready(1.0, 0, cpu_share=0.5)
    assert plain(out) == [Assign(core.jobs[1].job, 0, 1, 0.0), SetTimer(KEY1, 31.0)]
    assert core.timers == {KEY1: 31.0}


def test_a_resumed_replica_is_expected_to_do_only_the_work_left():
    core = timed_core()
    core.machine_ready(1.0, 0)
    core.replica_checkpoint(2.0, 1, 0.4)
    core.machine_down(3.0, 0)  # job 1 back in the queue, best checkpoint 0.4
    # M1 (rate 4, share 1) at 5: expected 10 * 0.6 / 4 = 1.5; at = 5 + 3 * 1.5 = 9.5.
    out = core.machine_ready(5.0, 1)
    assert plain(out) == [Assign(core.jobs[1].job, 1, 2, 0.4), SetTimer(("timeout", 2), 9.5)]


def test_a_live_replica_times_out_counts_and_frees_its_slot():
    core = timed_core()
    core.machine_ready(1.0, 0)  # replica 1 on M0, timer at 1 + 3 * 10 / 2 = 16
    assert core.timers == {KEY1: 16.0}
    assert core.timer_fired(15.0, KEY1) == []  # not due: stale
    assert core.stale_events == 1
    job = core.jobs[1].job
    out = core.timer_fired(16.0, KEY1)
    assert out == [ReplicaTimedOut(1, 0, 1), JobRequeued(job, 1, 0, "timeout")]
    rec, m = core.jobs[1], core.machines[0]
    assert rec.status is JobStatus.QUEUED and rec.timeouts == 1
    assert rec.history[0].outcome is Outcome.TIMED_OUT
    assert m.stats.timed_out == 1 and m.state is MachineState.FREE and m.free_slots == 1
    assert core.timers == {}
    # The slot is free: M0 asks again and gets the job back (a new replica, a new timer).
    assert plain(core.machine_ready(17.0, 0)) == [Assign(job, 0, 2, 0.0), SetTimer(("timeout", 2), 32.0)]
    core.check_invariants()


def test_on_a_machine_with_two_slots_a_time_out_frees_one_slot():
    core = timed_core(slots=2)
    core.job_arrived(0.0, Job(2, 0, 0.0))
    assert [a.job.id for a in assigns(core.machine_ready(1.0, 0))] == [1, 2]
    core.timer_fired(16.0, KEY1)
    m = core.machines[0]
    assert m.state is MachineState.BUSY and m.free_slots == 1 and m.stats.timed_out == 1
    assert list(core.timers) == [("timeout", 2)]
    core.check_invariants()


def test_an_ended_replica_has_its_timer_cancelled():
    core = timed_core()
    core.machine_ready(1.0, 0)
    out = core.replica_done(5.0, 1)
    assert out == [JobCompleted(core.jobs[1].job, 1, 0), CancelTimer(KEY1)]
    assert core.timers == {}
    assert core.timer_fired(16.0, KEY1) == []  # a firing the driver did not drop: stale
    assert core.jobs[1].timeouts == 0


def test_a_lost_replica_has_its_timer_cancelled():
    core = timed_core()
    core.machine_ready(1.0, 0)
    out = core.machine_down(2.0, 0)
    assert out == [JobRequeued(core.jobs[1].job, 1, 0, "machine down"), CancelTimer(KEY1)]


def test_suspect_takes_the_machine_down_until_it_asks_again():
    core = timed_core(suspect=True)
    core.machine_ready(1.0, 0)
    out = core.timer_fired(16.0, KEY1)
    assert out == [ReplicaTimedOut(1, 0, 1), JobRequeued(core.jobs[1].job, 1, 0, "timeout"), MachineSuspected(0)]
    m = core.machines[0]
    assert m.state is MachineState.DOWN and m.suspected
    out = core.machine_ready(17.0, 0)  # back at its next request
    assert m.state is MachineState.BUSY and not m.suspected
    assert plain(assigns(out)) == [Assign(core.jobs[1].job, 0, 2, 0.0)]
    core.check_invariants()


def test_a_timed_out_replica_s_late_result_is_taken_once():
    core = timed_core()
    core.machine_ready(1.0, 0)
    core.timer_fired(16.0, KEY1)  # given up; job 1 waits again
    job = core.jobs[1].job
    assert plain(core.machine_ready(17.0, 1)) == [Assign(job, 1, 2, 0.0), SetTimer(("timeout", 2), 17.0 + 7.5)]
    assert core.accepts_result(1)
    # Replica 1's result comes after all: job 1 completes, replica 2 is cancelled, its timer too.
    out = core.replica_done(18.0, 1)
    assert out == [Cancel(2, 1, 1), JobCompleted(job, 1, 0), CancelTimer(("timeout", 2))]
    assert core.jobs[1].status is JobStatus.DONE and core.jobs[1].history[0].late
    assert not core.accepts_result(1)
    stale = core.stale_events
    assert core.replica_done(19.0, 1) == []  # once only
    assert core.stale_events == stale + 1
    assert core.machines[0].stats.completed == 1
    core.check_invariants()


def test_custom_expected_time_and_timer_keys_a_journal_can_store():
    core = timed_core(factor=2.0, expected=lambda view, replica: 4.0 + replica.id)
    out = core.machine_ready(1.0, 0)
    assert of(out, SetTimer) == [SetTimer(KEY1, 1.0 + 2.0 * 5.0)]
    (key,) = core.timers
    assert ReplicaTimeouts.key(1) == key and ReplicaTimeouts.owns(key)
    assert json.loads(json.dumps(key)) == list(key)  # a string and an int


def test_no_timer_when_the_machine_computes_nothing():
    core = timed_core()
    # CPU share 0: the machine asks for nothing (no CPU to give), so nothing starts and no timer is armed.
    assert core.machine_ready(1.0, 0, cpu_share=0.0) == []
    assert core.timers == {}
    # A replica whose machine is then suspended expects to take for ever from there (sent at 2 at share 1:
    # 10 / 2 = 5 expected, the timer at 2 + 3 x 5).
    assert plain(core.machine_ready(2.0, 0, cpu_share=1.0)) == [
        Assign(core.jobs[1].job, 0, 1, 0.0), SetTimer(KEY1, 17.0)]
    core.cpu_share_changed(3.0, 0, 0.0)
    assert nominal_expected(core, core.replica(1)) == math.inf


def test_foreign_and_stale_keys_are_ignored():
    piece = ReplicaTimeouts(2.0)
    core = timed_core()
    core.machine_ready(1.0, 0)
    for key in ("timeout", ("lpas_dg", "resolve"), ("timeout", 1, 2), ("timeout", 99)):
        assert not piece.on_timer(core, key)
    assert list(piece.on_timer(core, KEY1)) == [TimeOut(1)]


@pytest.mark.parametrize("factor", [0.0, -1.0, math.inf, math.nan])
def test_factor_must_be_positive_and_finite(factor):
    with pytest.raises(ValueError, match="^factor:"):
        ReplicaTimeouts(factor)


def test_composes_with_a_bag_policy():
    base = policy_class("fcfs_share")

    class TimedShare(base):  # type: ignore[valid-type, misc]
        hooks = frozenset({"on_replica_start", "on_replica_end", "on_timer"})
        def __init__(self, options=None, rng=None):
            super().__init__(options, rng)
            self.timeouts = ReplicaTimeouts(1.5)

        def on_replica_start(self, view, replica):
            return self.timeouts.on_replica_start(view, replica)

        def on_replica_end(self, view, replica):
            return self.timeouts.on_replica_end(view, replica)

        def on_timer(self, view, key):
            return self.timeouts.on_timer(view, key)

    core = Scheduler([JobClass("t", 0.0, 10.0)], [Machine(f"M{j}", (1.0,)) for j in range(3)],
                     TimedShare(rng=random.Random(0)), check=True)
    core.start(0.0)
    for j in range(3):
        assert core.machine_ready(0.0, j) == [Hold(j)]
    out = core.bag_arrived(1.0, Bag(1, 1.0, (Job(1, 0, 1.0, 5.0, 1),)))
    # Two replicas of task 1 (RepThresh 2), each timed at 1 + 1.5 * 10 / 1 = 16.
    assert [a.job.id for a in assigns(out)] == [1, 1]
    assert sorted(of(out, SetTimer)) == [SetTimer(("timeout", 1), 16.0), SetTimer(("timeout", 2), 16.0)]
    on = core.replica(1).machine
    out = core.timer_fired(16.0, ("timeout", 1))
    assert of(out, ReplicaTimedOut) == [ReplicaTimedOut(1, on, 1)]
    # The freed machine does not ask by itself; the held machine takes a new replica of
    # task 1 at once (its live replicas fell to 1 < 2), timed at 16 + 15 = 31.
    assert [a.job.id for a in assigns(out)] == [1]
    assert of(out, SetTimer) == [SetTimer(("timeout", 3), 31.0)]
    core.check_invariants()
