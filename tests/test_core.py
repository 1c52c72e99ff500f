"""The scheduling core on hand-built states: every expected value below is worked out by hand."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import pytest
from helpers import Gang, Greedy, Scripted, assigns, job, make_core, make_policy, of, plain, queue_ids, ready_ids

from mgst.core import (
    Assign,
    Cancel,
    CancelTimer,
    Hold,
    JobArrived,
    JobCompleted,
    JobRequeued,
    JobStatus,
    MachineDown,
    MachineReady,
    MachineState,
    MachineUp,
    PolicyError,
    PolicyHooks,
    ReplicaCheckpoint,
    ReplicaDone,
    Scheduler,
    SetTimer,
)
from mgst.model import JobClass, Machine
from mgst.policies.base import Decisions, Policy
from mgst.policies.fcfs import FCFS

ONE = [[1.0]]  # one class, one machine
ONE_BY_TWO = [[1.0, 1.0]]  # one class, two machines
ONE_BY_THREE = [[1.0, 1.0, 1.0]]


def fcfs_core(rates=ONE, **kw) -> Scheduler:
    return make_core(make_policy("fcfs"), rates, **kw)


def snapshot(core: Scheduler) -> tuple:
    """Everything an event that changes nothing must leave alone."""
    return (
        tuple(m.state for m in core.machines),
        tuple((m.replica.id if m.replica else None) for m in core.machines),
        tuple(sorted((jid, r.status, r.attempts, r.requeues) for jid, r in core.jobs.items())),
        tuple((k, tuple(r.id for r in q)) for k, q in sorted(core.queues.items())),
        tuple(ready_ids(core)),
        core.queued_count,
        tuple(sorted(core.running)),
        core.capacity_version,
        dict(core.timers),
    )


# ---------------------------------------------------------------- machines and arrivals


def test_machines_start_down_and_up_makes_them_free_not_asking():
    core = fcfs_core(up=False)
    assert core.machines[0].state is MachineState.DOWN
    assert core.machine_up(1.0, 0) == []
    assert core.machines[0].state is MachineState.FREE
    assert plain(core.job_arrived(2.0, job(1, t=2.0))) == []  # a free machine is not asking
    assert plain(queue_ids(core)) == [1]
    out = core.machine_ready(3.0, 0)
    assert plain(out) == [Assign(job(1, t=2.0), 0, 1, 0.0)]
    core.check_invariants()


def test_machine_ready_on_down_machine_implies_up():
    core = fcfs_core(up=False)
    v = core.capacity_version
    assert core.machine_ready(4.0, 0) == [Hold(0)]
    m = core.machines[0]
    assert m.state is MachineState.READY
    assert m.up_since == 4.0
    assert core.capacity_version == v + 1
    core.check_invariants()


def test_ready_machine_with_nothing_queued_is_held():
    core = fcfs_core()
    out = core.machine_ready(1.0, 0)
    assert out == [Hold(0)]
    assert core.machines[0].state is MachineState.READY
    assert core.is_ready(0) and core.ready_count == 1
    # asking again while asking: held again, and still asking once
    assert core.machine_ready(2.0, 0) == [Hold(0)]
    assert ready_ids(core) == [0]
    core.check_invariants()


def test_job_arriving_while_a_machine_is_ready_is_assigned_at_once():
    core = fcfs_core()
    core.machine_ready(1.0, 0)
    j = job(7, t=2.0)
    out = core.job_arrived(2.0, j)
    assert plain(out) == [Assign(j, 0, 1, 0.0)]  # replica ids start at 1
    rec = core.jobs[7]
    assert rec.status is JobStatus.RUNNING
    assert rec.first_sent == 2.0
    assert rec.attempts == 1
    assert core.replica(1).machine == 0
    assert core.machines[0].state is MachineState.BUSY
    assert core.machines[0].replica is core.replica(1)
    assert core.ready_count == 0 and core.queued_count == 0
    core.check_invariants()


def test_handle_is_the_typed_methods():
    core = fcfs_core(up=False)
    j = job(1, t=1.0)
    assert plain(core.handle(0.5, MachineUp(0))) == []
    assert plain(core.handle(1.0, JobArrived(j))) == []
    assert plain(core.handle(2.0, MachineReady(0))) == [Assign(j, 0, 1, 0.0)]
    assert core.handle(3.0, ReplicaCheckpoint(1, 0.5)) == []
    assert core.handle(4.0, ReplicaDone(1, True)) == [JobCompleted(j, 1, 0), Hold(0)]
    assert core.handle(5.0, MachineDown(0)) == []
    assert core.machines[0].state is MachineState.DOWN


def test_replica_done_with_ready_makes_the_machine_ask_again():
    core = fcfs_core()
    core.machine_ready(0.0, 0)
    j1, j2 = job(1, t=1.0), job(2, t=2.0)
    core.job_arrived(1.0, j1)  # replica 1 on M0
    core.job_arrived(2.0, j2)  # waits
    out = core.replica_done(3.0, 1, ready=True)
    assert plain(out) == [JobCompleted(j1, 1, 0), Assign(j2, 0, 2, 0.0)]
    out = core.replica_done(4.0, 2, ready=True)
    assert out == [JobCompleted(j2, 2, 0), Hold(0)]
    assert core.machines[0].state is MachineState.READY
    core.check_invariants()



def test_a_driver_may_turn_completions_and_holds_off_and_the_state_is_the_same():
    """The simulator needs neither JobCompleted nor Hold: with both off, the outputs lack exactly
    them, and the records are those of a core that reports them."""
    cores = [fcfs_core(), fcfs_core()]
    cores[1].report_completions = cores[1].report_holds = False
    j1, j2 = job(1, t=1.0), job(2, t=2.0)
    outs = []
    for core in cores:
        out = core.machine_ready(0.0, 0)
        out += core.job_arrived(1.0, j1)
        out += core.job_arrived(2.0, j2)
        out += core.replica_done(3.0, 1, ready=True)
        out += core.replica_done(4.0, 2, ready=True)
        outs.append(out)
        core.check_invariants()
    assert plain(outs[0]) == [Hold(0), Assign(j1, 0, 1, 0.0), JobCompleted(j1, 1, 0), Assign(j2, 0, 2, 0.0),
                       JobCompleted(j2, 2, 0), Hold(0)]
    assert plain(outs[1]) == [Assign(j1, 0, 1, 0.0), Assign(j2, 0, 2, 0.0)]
    for rec, other in zip(cores[0].jobs.values(), cores[1].jobs.values(), strict=True):
        assert (rec.status, rec.completed, rec.done_by, rec.done_on) == (other.status, other.completed,
                                                                          other.done_by, other.done_on)



def test_queues_version_counts_the_queues_added_and_a_policy_cache_follows_its_core():
    """LPAS_DG keeps each class's queue by queues_version and by the core's queues dict: one policy
    driving two cores in turn (a researcher's loop) sees each core's own queues."""
    lpas = make_policy("lpas_dg")
    cores = [make_core(lpas, ((1.0,), (1.0,))), make_core(lpas, ((1.0,), (1.0,)))]
    first, second = cores
    assert first.queues_version == second.queues_version == 0
    j1, j2, j3 = job(1, cls=0, t=1.0), job(2, cls=0, t=2.0), job(3, cls=1, t=3.0)
    first.job_arrived(1.0, j1)
    assert first.queues_version == 1
    first.job_arrived(2.0, j2)
    assert first.queues_version == 1  # the same queue
    second.job_arrived(3.0, j3)
    assert second.queues_version == 1  # the same count, other queues
    assert plain(second.machine_ready(4.0, 0)) == [Assign(j3, 0, 1, 0.0)]  # its own class-2 job, not j1
    assert plain(first.machine_ready(5.0, 0)) == [Assign(j1, 0, 1, 0.0)]
    for core in cores:
        core.check_invariants()


def test_replica_done_without_ready_leaves_the_machine_free():
    core = fcfs_core()
    core.machine_ready(0.0, 0)
    j1, j2 = job(1, t=1.0), job(2, t=2.0)
    core.job_arrived(1.0, j1)
    core.job_arrived(2.0, j2)
    out = core.replica_done(3.0, 1)
    assert out == [JobCompleted(j1, 1, 0)]
    assert core.machines[0].state is MachineState.FREE
    assert queue_ids(core) == [2]
    core.check_invariants()


# ---------------------------------------------------------------- failures and requeues


def test_job_lost_to_a_machine_failure_is_requeued_at_the_head_and_completed_once():
    core = fcfs_core(ONE_BY_TWO)
    j1, j2, j3 = job(1, t=1.0), job(2, t=2.0), job(3, t=3.0)
    core.machine_ready(0.0, 0)
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0)]
    core.job_arrived(2.0, j2)
    core.job_arrived(3.0, j3)
    assert queue_ids(core) == [2, 3]

    out = core.machine_down(4.0, 0)
    assert out == [JobRequeued(j1, 1, 0, "machine down")]
    rec = core.jobs[1]
    assert rec.status is JobStatus.QUEUED
    assert rec.submitted == 1.0  # keeps its submission time
    assert queue_ids(core) == [1, 2, 3]  # ahead of the later arrivals
    assert core.queue(0).head is rec
    assert core.queued_count == 3
    assert core.machines[0].state is MachineState.DOWN
    core.check_invariants()

    out = core.machine_ready(5.0, 1)
    assert plain(out) == [Assign(j1, 1, 2, 0.0)]
    out = core.replica_done(6.0, 2)
    assert out == [JobCompleted(j1, 2, 1)]
    assert rec.status is JobStatus.DONE
    assert rec.completed == 6.0
    assert (rec.done_by, rec.done_on, rec.done_sent) == (2, 1, 5.0)
    assert rec.requeues == 1
    assert rec.attempts == 2
    assert rec.idle_time == (1.0 - 1.0) + (5.0 - 4.0)  # queued at arrival and after the requeue
    assert queue_ids(core) == [2, 3]
    core.check_invariants()


def test_late_done_from_a_given_up_replica_completes_a_queued_job():
    core = fcfs_core(ONE_BY_TWO)
    j1, j2 = job(1, t=1.0), job(2, t=2.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # replica 1 on M0
    core.job_arrived(2.0, j2)
    core.machine_down(3.0, 0)  # replica 1 given up on; job 1 back in the queue
    assert queue_ids(core) == [1, 2]

    out = core.replica_done(4.0, 1)  # ...but M0 had finished it after all
    assert out == [JobCompleted(j1, 1, 0)]
    rec = core.jobs[1]
    assert rec.status is JobStatus.DONE
    assert (rec.completed, rec.done_by, rec.done_on) == (4.0, 1, 0)
    assert queue_ids(core) == [2]
    assert core.queued_count == 1
    assert core.stale_events == 0
    assert core.machines[0].state is MachineState.DOWN  # the core does not infer "up" from a result
    core.check_invariants()

    # the same result again: stale, not a second completion
    out = core.replica_done(5.0, 1)
    assert of(out, JobCompleted) == []
    assert core.stale_events == 1
    core.check_invariants()


def test_late_done_from_a_given_up_replica_cancels_the_job_running_elsewhere():
    core = fcfs_core(ONE_BY_TWO)
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # replica 1 on M0
    core.machine_down(2.0, 0)
    assert plain(core.machine_ready(3.0, 1)) == [Assign(j1, 1, 2, 0.0)]

    out = core.replica_done(4.0, 1)
    assert sorted(out, key=repr) == sorted([Cancel(2, 1, 1), JobCompleted(j1, 1, 0)], key=repr)
    assert core.jobs[1].status is JobStatus.DONE
    assert core.jobs[1].done_by == 1
    assert core.machines[1].state is MachineState.FREE
    assert core.machines[1].replica is None
    assert core.replica(2) is None
    assert not core.running
    core.check_invariants()

    # the cancelled replica reports too: stale
    out = core.replica_done(5.0, 2)
    assert out == []
    assert core.stale_events == 1


def test_late_done_for_a_job_already_done_is_stale():
    core = fcfs_core(ONE_BY_TWO)
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # replica 1 on M0
    core.machine_down(2.0, 0)
    core.machine_ready(3.0, 1)  # replica 2 on M1
    assert core.replica_done(4.0, 2) == [JobCompleted(j1, 2, 1)]
    before = snapshot(core)
    out = core.replica_done(5.0, 1)
    assert out == []
    assert core.stale_events == 1
    assert core.jobs[1].done_by == 2 and core.jobs[1].completed == 4.0
    assert snapshot(core) == before
    assert core.machines[0].stats.completed == 0 and core.machines[1].stats.completed == 1


def test_done_for_an_unknown_replica_is_stale_and_changes_nothing():
    core = fcfs_core(ONE_BY_TWO)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, job(1, t=1.0))
    core.job_arrived(2.0, job(2, t=2.0))
    before = snapshot(core)
    assert core.replica_done(3.0, 99) == []
    assert core.replica_done(3.0, 99, ready=True) == []
    assert core.replica_failed(3.0, 99) == []
    assert core.replica_checkpoint(3.0, 99, 0.5) == []
    assert core.stale_events == 4
    assert snapshot(core) == before
    core.check_invariants()


def test_duplicate_job_arrival_is_stale():
    core = fcfs_core()
    core.job_arrived(1.0, job(1, t=1.0))
    before = snapshot(core)
    assert core.job_arrived(2.0, job(1, 0, 2.0)) == []  # same id, later
    assert core.stale_events == 1
    assert core.jobs[1].submitted == 1.0
    assert snapshot(core) == before


def test_job_of_unknown_class_is_rejected():
    core = fcfs_core()
    with pytest.raises(ValueError, match="class 3"):
        core.job_arrived(1.0, job(1, cls=3, t=1.0))


@pytest.mark.parametrize(("reason", "timeouts"), [("timeout", 1), ("failed", 0)])
def test_replica_failed_requeues_and_counts_timeouts(reason, timeouts):
    core = fcfs_core()
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)
    out = core.replica_failed(3.0, 1, reason)
    assert out == [JobRequeued(j1, 1, 0, reason)]
    rec = core.jobs[1]
    assert rec.timeouts == timeouts
    assert rec.status is JobStatus.QUEUED and rec.requeues == 1
    m = core.machines[0]
    assert m.state is MachineState.FREE  # stays up, not asking
    assert m.stats.lost == 1 and m.stats.busy_time == 2.0 and m.stats.failures == 0
    core.check_invariants()


def test_machine_asking_while_busy_loses_its_replica_and_may_get_it_again():
    core = fcfs_core()
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # replica 1
    out = core.machine_ready(2.0, 0)  # a restarted puller asks again
    assert plain(out) == [
        JobRequeued(j1, 1, 0, "machine asked for work while running it"),
        Assign(j1, 0, 2, 0.0),
    ]
    assert core.machines[0].stats.lost == 1
    core.check_invariants()


def test_job_lost_by_a_machine_asking_while_busy_goes_to_another_ready_machine():
    # M0 runs both classes, M1 only class 0, M2 only class 1.
    core = fcfs_core([[1.0, 1.0, 0.0], [1.0, 0.0, 1.0]])
    b, a = job(1, cls=1, t=0.0), job(2, cls=0, t=1.0)
    core.machine_ready(0.0, 2)
    assert plain(core.job_arrived(0.0, b)) == [Assign(b, 2, 1, 0.0)]
    core.machine_ready(0.5, 0)
    assert plain(core.job_arrived(1.0, a)) == [Assign(a, 0, 2, 0.0)]
    core.machine_ready(1.5, 1)  # nothing it can run: held
    core.machine_down(2.0, 2)  # B back in the queue; M1 cannot run it
    assert core.queued_count == 1 and ready_ids(core) == [1]
    out = core.machine_ready(3.0, 0)  # M0 restarted: A is lost and requeued
    # FCFS: M0 takes the oldest job it can run, B (submitted 0); A (submitted 1) should
    # then go to M1, which is idle, asking, and able to run it.
    pairs = {(d.job.id, d.machine) for d in out if isinstance(d, Assign)}
    assert pairs == {(b.id, 0), (a.id, 1)}


def test_machine_down_while_ready_withdraws_its_request_and_twice_is_stale():
    core = fcfs_core()
    core.machine_ready(0.0, 0)
    core.machine_down(1.0, 0)
    assert core.ready_count == 0
    assert core.machine_down(2.0, 0) == []
    assert core.stale_events == 1
    assert core.machines[0].stats.failures == 1
    core.job_arrived(3.0, job(1, t=3.0))
    assert queue_ids(core) == [1]
    core.check_invariants()


# ---------------------------------------------------------------- timers


class TimerPolicy(Scripted):
    """Scripted, plus a record of on_timer calls; ``rearm`` re-sets a fired timer later."""
    hooks = frozenset({"start", "on_timer"})

    def __init__(self, first: SetTimer | None = None, rearm: float | None = None):
        super().__init__()
        self.first = first
        self.rearm = rearm
        self.fired: list[tuple[float, Hashable]] = []

    def start(self, view: Scheduler) -> Decisions:
        return [self.first] if self.first else []

    def on_timer(self, view: Scheduler, key: Hashable) -> Decisions:
        self.fired.append((view.now, key))
        return [SetTimer(key, view.now + self.rearm)] if self.rearm is not None else []


def timer_core(policy: Policy) -> tuple[Scheduler, list]:
    """One class, one machine (down), started: returns the core and start()'s outputs."""
    core = Scheduler([JobClass("c0", 1.0)], [Machine("M0", (1.0,))], policy, check=True)
    return core, core.start(0.0)


def test_timer_set_at_start_fires_at_its_time_not_before():
    policy = TimerPolicy(SetTimer("tick", 5.0))
    core, out = timer_core(policy)
    assert out == [SetTimer("tick", 5.0)]
    assert core.timers == {"tick": 5.0}
    assert core.timer_fired(4.0, "tick") == []  # early: not due
    assert policy.fired == [] and core.stale_events == 1
    assert core.timers == {"tick": 5.0}
    core.timer_fired(5.0, "tick")
    assert policy.fired == [(5.0, "tick")]
    assert core.timers == {}
    core.timer_fired(5.0, "tick")  # delivered twice: the second is stale
    assert policy.fired == [(5.0, "tick")] and core.stale_events == 2


def test_timer_rearmed_from_on_timer():
    policy = TimerPolicy(SetTimer("tick", 2.0), rearm=3.0)
    core, _ = timer_core(policy)
    assert core.timer_fired(2.0, "tick") == [SetTimer("tick", 5.0)]
    assert core.timer_fired(5.0, "tick") == [SetTimer("tick", 8.0)]
    assert policy.fired == [(2.0, "tick"), (5.0, "tick")]


def test_replaced_timer_old_firing_is_stale():
    policy = TimerPolicy(SetTimer("k", 5.0))
    core, _ = timer_core(policy)
    policy.todo = [SetTimer("k", 8.0)]
    out = core.job_arrived(1.0, job(1, t=1.0))  # any event lets the policy speak
    assert out == [SetTimer("k", 8.0)]
    assert core.timers == {"k": 8.0}
    core.timer_fired(5.0, "k")  # the replaced firing
    assert policy.fired == [] and core.stale_events == 1
    core.timer_fired(8.0, "k")
    assert policy.fired == [(8.0, "k")]

    # replaced by an earlier time: the early one counts, the old one is then stale
    policy.todo = [SetTimer("k", 20.0)]
    core.job_arrived(9.0, job(2, t=9.0))
    policy.todo = [SetTimer("k", 12.0)]
    core.job_arrived(10.0, job(3, t=10.0))
    core.timer_fired(12.0, "k")
    core.timer_fired(20.0, "k")
    assert policy.fired == [(8.0, "k"), (12.0, "k")]
    assert core.stale_events == 2


def test_cancel_timer():
    policy = TimerPolicy()
    core, _ = timer_core(policy)
    policy.todo = [SetTimer("b", 12.0), SetTimer("c", 13.0), CancelTimer("b")]
    out = core.job_arrived(9.0, job(1, t=9.0))
    assert out == [SetTimer("b", 12.0), SetTimer("c", 13.0), CancelTimer("b")]
    assert core.timers == {"c": 13.0}
    assert core.timer_fired(12.0, "b") == []
    assert policy.fired == [] and core.stale_events == 1
    policy.todo = [CancelTimer("nope")]  # nothing to cancel: nothing to tell the driver
    assert core.job_arrived(12.5, job(2, t=12.5)) == []
    core.timer_fired(13.0, "c")
    assert policy.fired == [(13.0, "c")]


def test_timers_re_armed_for_the_same_instant_fail_as_the_policy_s_error_where_many_distinct_ones_do_not():
    """A policy whose timers keep model time from moving (one re-armed for now in on_timer, or two arming each other)
    hung the run in both drivers: the core refuses the TIMER_REFIRES + 1st firing of a key at one model time. Many
    distinct timers due at one instant (a time-out per replica started together) are not that, nor a timer fired
    that many times at different times."""
    from mgst.core.scheduler import TIMER_REFIRES  # noqa: PLC0415

    class PingPong(TimerPolicy):
        def on_timer(self, view, key):
            super().on_timer(view, key)
            return [SetTimer("pong" if key == "ping" else "ping", view.now)]

    for policy, keys in ((TimerPolicy(SetTimer("tick", 1.0), rearm=0.0), ["tick"]),
                         (PingPong(SetTimer("ping", 1.0)), ["ping", "pong"])):
        core, _ = timer_core(policy)
        fired = 0
        with pytest.raises(PolicyError, match=r"fired 1,000 times at model time 1: the policy sets it again"):
            while True:
                core.timer_fired(1.0, keys[fired % len(keys)])
                fired += 1
        assert fired == TIMER_REFIRES * len(keys)  # each key its TIMER_REFIRES firings, then refused

    n = 3 * TIMER_REFIRES
    policy = TimerPolicy()
    core, _ = timer_core(policy)
    policy.todo = [SetTimer(("timeout", i), 5.0) for i in range(n)]
    core.job_arrived(1.0, job(1, t=1.0))
    for i in range(n):
        core.timer_fired(5.0, ("timeout", i))
    assert len(policy.fired) == n and core.timers == {}

    policy = TimerPolicy(SetTimer("tick", 1.0), rearm=1e-3)  # a short period, fired over and over: time moves
    core, _ = timer_core(policy)
    now = 1.0
    for _ in range(2 * TIMER_REFIRES):
        core.timer_fired(now, "tick")
        now = core.timers["tick"]
    assert len(policy.fired) == 2 * TIMER_REFIRES


def test_a_long_value_in_a_policy_error_is_cut_with_an_ellipsis():
    """(A Job returned by choose() was said as "Job(id=0, ..., size=0.3029866924743614, b": cut with no sign of it.)"""
    from mgst.core.decisions import shown  # noqa: PLC0415

    assert shown("x" * 80) == "x" * 80
    assert shown("x" * 81) == "x" * 79 + "…" and len(shown("y" * 500)) == 80


@pytest.mark.parametrize("at", [float("nan"), float("inf"), -float("inf"), "5.0", None, True])
def test_a_timer_for_no_finite_time_is_the_policy_s_error(at):
    """NaN stopped the simulation as an error of mgst's, and the testbed took it without a word."""
    policy = TimerPolicy()
    core, _ = timer_core(policy)
    policy.todo = [SetTimer("t", at)]
    with pytest.raises(PolicyError, match=r"SetTimer t at .*: a timer's time must be a finite number"):
        core.job_arrived(1.0, job(1, t=1.0))


def test_decisions_from_on_timer_are_applied():
    class AssignOnTimer(TimerPolicy):
        hooks = frozenset({"on_timer"})
        def on_timer(self, view, key):
            super().on_timer(view, key)
            rec = view.queue(0).head
            return [Assign(rec.job, 0)]

    policy = AssignOnTimer(SetTimer("go", 3.0))
    core, _ = timer_core(policy)
    core.machine_ready(1.0, 0)
    j = job(1, t=2.0)
    assert plain(core.job_arrived(2.0, j)) == []  # never matches by itself; M0 keeps asking, silently
    assert plain(core.timer_fired(3.0, "go")) == [Assign(j, 0, 1, 0.0)]


# ---------------------------------------------------------------- checkpoints


@pytest.mark.parametrize(("resume", "progress"), [(True, 0.4), (False, 0.0)])
def test_next_replica_resumes_from_the_checkpoint_if_the_policy_says_so(resume, progress):
    class Fcfs(FCFS):
        resume_from_checkpoint = resume

    core = make_core(Fcfs(), ONE_BY_TWO)
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # replica 1 on M0
    assert core.replica_checkpoint(2.0, 1, 0.4) == []
    assert core.replica_checkpoint(2.5, 1, 0.2) == []  # an older checkpoint does not lower it
    assert core.replica(1).checkpoint == 0.4
    assert core.jobs[1].best_progress == 0.4
    core.machine_down(3.0, 0)
    out = core.machine_ready(4.0, 1)
    assert plain(out) == [Assign(j1, 1, 2, progress)]
    assert core.replica(2).progress == progress


def test_checkpoint_outside_zero_one_is_rejected():
    core = fcfs_core()
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, job(1, t=1.0))
    with pytest.raises(ValueError, match="1.5"):
        core.replica_checkpoint(2.0, 1, 1.5)


# ---------------------------------------------------------------- replicas


def test_second_replica_of_a_running_job_then_sibling_cancelled_on_first_done():
    core = make_core(Greedy(max_replicas=2), ONE_BY_THREE)
    for j in range(3):
        core.machine_ready(0.0, j)
    j1 = job(1, t=1.0)
    out = core.job_arrived(1.0, j1)
    assert plain(out) == [Assign(j1, 0, 1, 0.0), Assign(j1, 1, 2, 0.0)]  # the third machine: limit reached
    assert core.jobs[1].live_replicas == 2
    assert ready_ids(core) == [2]
    core.check_invariants()

    out = core.replica_done(4.0, 2)
    assert out == [Cancel(1, 0, 1), JobCompleted(j1, 2, 1)]
    m0 = core.machines[0]
    assert m0.state is MachineState.FREE  # not READY: the driver must stop it first
    assert not core.is_ready(0)
    assert m0.stats.cancelled == 1 and m0.stats.busy_time == 3.0 and m0.stats.completed == 0
    assert core.machines[1].stats.completed == 1
    assert core.machines[1].stats.service_by_class == [3.0]
    core.check_invariants()
    # the cancelled sibling's own result, if it comes, is stale
    assert core.replica_done(4.5, 1) == []
    assert core.stale_events == 1


def test_a_third_replica_over_the_limit_is_a_policy_error():
    core = make_core(Greedy(max_replicas=2, limit_aware=False), ONE_BY_THREE)
    for j in range(3):
        core.machine_ready(0.0, j)
    with pytest.raises(PolicyError, match="limit is 2"):
        core.job_arrived(1.0, job(1, t=1.0))


def test_a_replica_of_a_running_job_is_a_policy_error_without_replication():
    policy = Scripted()  # max_replicas = 1
    core = make_core(policy, ONE_BY_TWO)
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    policy.todo = [Assign(j1, 0)]
    core.job_arrived(1.0, j1)
    policy.todo = [Assign(j1, 1)]
    with pytest.raises(PolicyError, match="limit is 1"):
        core.job_arrived(2.0, job(2, t=2.0))


def test_losing_one_of_two_replicas_keeps_the_job_running():
    core = make_core(Greedy(max_replicas=2), ONE_BY_THREE)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    j1 = job(1, t=1.0)
    core.job_arrived(1.0, j1)  # replicas 1 (M0) and 2 (M1)
    assert plain(core.machine_down(2.0, 0)) == []  # no requeue: replica 2 still runs
    rec = core.jobs[1]
    assert rec.status is JobStatus.RUNNING and rec.live_replicas == 1 and rec.requeues == 0
    assert plain(core.machine_ready(3.0, 2)) == [Assign(j1, 2, 3, 0.0)]  # a new second replica
    assert rec.attempts == 3
    core.check_invariants()


def test_policy_cancel_of_the_only_replica_requeues_and_frees_the_machine():
    policy = Scripted()
    core = make_core(policy, ONE_BY_TWO)
    j1 = job(1, t=1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)
    policy.todo = [Assign(j1, 0)]
    assert plain(core.job_arrived(2.0, job(2, t=2.0))) == [Assign(j1, 0, 1, 0.0)]
    policy.todo = [Cancel(1)]
    out = core.job_arrived(3.0, job(3, t=3.0))
    assert out == [Cancel(1, 0, 1), JobRequeued(j1, 1, 0, "cancelled")]
    assert core.machines[0].state is MachineState.FREE
    assert queue_ids(core) == [1, 2, 3]
    core.check_invariants()


# ---------------------------------------------------------------- policy errors


@pytest.fixture
def scripted():
    policy = Scripted()
    core = make_core(policy, ONE_BY_TWO)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, job(1, t=1.0))  # Scripted never matches: job 1 waits, M0 asks
    return policy, core


def test_assign_to_a_machine_that_is_not_asking_is_a_policy_error(scripted):
    policy, core = scripted
    policy.todo = [Assign(job(1, t=1.0), 1)]  # M1 is up but not asking
    with pytest.raises(PolicyError, match="not asking"):
        core.job_arrived(2.0, job(2, t=2.0))


def test_assign_to_a_down_machine_is_a_policy_error(scripted):
    policy, core = scripted
    core.machine_down(1.5, 1)
    policy.todo = [Assign(job(1, t=1.0), 1)]
    with pytest.raises(PolicyError, match="not asking"):
        core.job_arrived(2.0, job(2, t=2.0))


def test_assign_of_a_done_job_is_a_policy_error(scripted):
    policy, core = scripted
    j1 = job(1, t=1.0)
    policy.todo = [Assign(j1, 0)]
    core.job_arrived(2.0, job(2, t=2.0))
    core.replica_done(3.0, 1)
    core.machine_ready(4.0, 1)
    policy.todo = [Assign(j1, 1)]
    with pytest.raises(PolicyError, match="done"):
        core.job_arrived(5.0, job(3, t=5.0))


class _SwallowsItsError(Scripted):
    """A dispatch generator that catches the PolicyError thrown in at its yield and returns (or yields on)."""

    hooks = frozenset({"dispatch"})

    def __init__(self, then_yield: bool) -> None:
        super().__init__()
        self.then_yield = then_yield

    def dispatch(self, view, new_job, asking):
        if new_job is None:
            return
        try:
            yield Hold(2)  # (machine 2 is not asking: a PolicyError)
        except PolicyError:
            if self.then_yield:
                yield Hold(0)
            return


@pytest.mark.parametrize("then_yield", [False, True])
def test_a_generator_that_swallows_its_policy_error_still_fails(then_yield):
    """The PolicyError thrown into a generator at its yield stands even if the generator catches it (a bare
    StopIteration escaped when it returned)."""
    core = make_core(_SwallowsItsError(then_yield), ONE_BY_THREE)
    with pytest.raises(PolicyError, match="not asking"):
        core.job_arrived(1.0, job(1, t=1.0))


class _ChoosesTheJobNotItsRecord(Greedy):
    """A policy's mistake: choose() returns the queue head's Job, not the head (its record)."""

    def choose(self, view, machine):
        rec = super().choose(view, machine)
        return None if rec is None else rec.job


def test_a_choose_that_returns_a_job_not_its_record_is_named():
    """Pure Python, a PolicyError naming the type returned (it was "'Job' object has no attribute 'job'");
    compiled, mypyc's TypeError where choose() returns, naming JobRecord too."""
    core = make_core(_ChoosesTheJobNotItsRecord(), ONE_BY_THREE)
    core.machine_ready(0.0, 0)
    with pytest.raises((PolicyError, TypeError), match="JobRecord"):
        core.job_arrived(1.0, job(1, t=1.0))


def test_assign_of_an_unknown_job_is_a_policy_error(scripted):
    policy, core = scripted
    policy.todo = [Assign(job(42), 0)]
    with pytest.raises(PolicyError, match="unknown job 42"):
        core.job_arrived(2.0, job(2, t=2.0))


@pytest.mark.parametrize(
    ("decision", "match"),
    [(Hold(1), "not asking"), (Cancel(5), "not running"), (JobCompleted(job(1), 1, 0), "cannot decide")],
)
def test_impossible_decisions_are_policy_errors(scripted, decision, match):
    policy, core = scripted
    policy.todo = [decision]
    with pytest.raises(PolicyError, match=match):
        core.job_arrived(2.0, job(2, t=2.0))


@pytest.mark.parametrize("decision", [SetTimer("x", 5.0), Hold(0), Cancel(5)])
def test_one_decision_returned_where_a_list_is_expected_is_named(scripted, decision):
    """A hook returning one decision, not a list of them: a NamedTuple, whose fields the core would otherwise take
    for decisions ("a policy cannot decide 'x'") or even carry out (Hold(0)'s 0, Cancel(5)'s 5)."""
    policy, core = scripted
    policy.todo = decision
    with pytest.raises(PolicyError, match=f"returned one decision, {type(decision).__name__}.*list of decisions"):
        core.job_arrived(2.0, job(2, t=2.0))


def test_hold_from_a_policy_rotates_the_ready_queue_without_an_output():
    policy = Scripted()
    core = make_core(policy, ONE_BY_THREE)
    for j in range(3):
        core.machine_ready(0.0, j)
    policy.todo = [Hold(0)]
    assert core.job_arrived(1.0, job(1, t=1.0)) == []
    assert ready_ids(core) == [1, 2, 0]


# ---------------------------------------------------------------- gang allocation


def test_gang_allocation_starts_all_members_at_once():
    policy = Gang((0, 1, 2))
    core = make_core(policy, [[1.0] * 4])
    jobs = [job(i, t=float(i)) for i in range(1, 7)]
    for jb in jobs[:3]:
        assert core.job_arrived(jb.submitted, jb) == []
    assert core.machine_ready(4.0, 0) == [Hold(0)]
    assert plain(core.machine_ready(4.0, 3)) == [Hold(3)]  # not enrolled: never gets work
    assert plain(core.machine_ready(4.5, 1)) == [Hold(1)]
    out = core.machine_ready(5.0, 2)
    assert plain(out) == [Assign(jobs[0], 0, 1, 0.0), Assign(jobs[1], 1, 2, 0.0), Assign(jobs[2], 2, 3, 0.0)]
    assert ready_ids(core) == [3]
    core.check_invariants()

    # iteration 2: three more jobs; members finish one by one and ask again
    for jb in jobs[3:]:
        assert core.job_arrived(6.0, jb) == []
    assert core.replica_done(7.0, 1, ready=True) == [JobCompleted(jobs[0], 1, 0), Hold(0)]
    assert core.replica_done(8.0, 3, ready=True) == [JobCompleted(jobs[2], 3, 2), Hold(2)]
    out = core.replica_done(9.0, 2, ready=True)
    assert plain(out) == [
        JobCompleted(jobs[1], 2, 1),
        Assign(jobs[3], 0, 4, 0.0), Assign(jobs[4], 1, 5, 0.0), Assign(jobs[5], 2, 6, 0.0),
    ]
    core.check_invariants()


def test_gang_waits_for_a_failed_member():
    policy = Gang((0, 1))
    core = make_core(policy, [[1.0, 1.0]])
    core.job_arrived(0.0, job(1))
    core.job_arrived(0.0, job(2))
    core.machine_ready(1.0, 0)
    core.machine_down(1.5, 1)
    assert core.machine_ready(2.0, 0) == [Hold(0)]
    out = core.machine_ready(3.0, 1)  # back, and asking
    assert len(assigns(out)) == 2


# ---------------------------------------------------------------- per-host statistics


def test_per_host_statistics_add_up():
    core = fcfs_core([[1.0, 1.0], [1.0, 1.0]])
    j1, j2, j3 = job(1, 0, 1.0), job(2, 1, 2.0), job(3, 0, 5.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0)]
    assert plain(core.job_arrived(2.0, j2)) == [Assign(j2, 1, 2, 0.0)]
    assert plain(core.replica_done(4.0, 1, ready=True)) == [JobCompleted(j1, 1, 0), Hold(0)]  # M0 busy 1..4
    assert plain(core.job_arrived(5.0, j3)) == [Assign(j3, 0, 3, 0.0)]
    assert plain(core.machine_down(6.0, 1)) == [JobRequeued(j2, 2, 1, "machine down")]  # M1 busy 2..6, up 0..6
    assert plain(core.machine_ready(7.0, 1)) == [Assign(j2, 1, 4, 0.0)]
    assert plain(core.replica_failed(9.0, 3)) == [JobRequeued(j3, 3, 0, "failed")]  # M0 busy 5..9
    assert plain(core.machine_ready(10.0, 0)) == [Assign(j3, 0, 5, 0.0)]
    assert core.replica_done(12.0, 4) == [JobCompleted(j2, 4, 1)]  # M1 busy 7..12
    assert core.replica_done(13.0, 5) == [JobCompleted(j3, 5, 0)]  # M0 busy 10..13
    core.close(15.0)
    with pytest.raises(RuntimeError, match="closed at 15"):  # (a second close would count busy time twice)
        core.close(15.0)

    s0, s1 = core.machines[0].stats, core.machines[1].stats
    assert (s0.completed, s0.lost, s0.cancelled, s0.failures) == (2, 1, 0, 0)
    assert (s1.completed, s1.lost, s1.cancelled, s1.failures) == (1, 1, 0, 1)
    assert s0.busy_time == 3.0 + 4.0 + 3.0
    assert s1.busy_time == 4.0 + 5.0
    assert s0.completed_by_class == [2, 0]
    assert s1.completed_by_class == [0, 1]
    assert s0.service_by_class == [3.0 + 3.0, 0.0]
    assert s1.service_by_class == [0.0, 5.0]
    assert s0.up_time == 15.0
    assert s1.up_time == 6.0 + 8.0
    done = [r for r in core.jobs.values() if r.status is JobStatus.DONE]
    assert len(done) == s0.completed + s1.completed == 3
    assert sum(r.attempts for r in core.jobs.values()) == 5 == s0.completed + s0.lost + s1.completed + s1.lost
    core.check_invariants()


def test_late_completion_counts_in_completed_by_class():
    core = fcfs_core()
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, job(1, t=1.0))
    core.replica_failed(2.0, 1, "timeout")
    core.replica_done(3.0, 1)  # it had finished after all
    st = core.machines[0].stats
    assert st.completed == 1
    assert sum(st.completed_by_class) == st.completed


# ---------------------------------------------------------------- capacity and hooks


class Probe(FCFS):
    """FCFS that logs its hook calls in order."""
    hooks = frozenset({"on_capacity_change", "choose"})

    name = "test-probe"

    def __init__(self):
        super().__init__()
        self.log: list[tuple] = []

    def on_capacity_change(self, view):
        self.log.append(("capacity", view.capacity_version, tuple(m.state for m in view.machines)))
        return ()

    def choose(self, view, machine):
        self.log.append(("choose", machine.index))
        return super().choose(view, machine)


def test_capacity_version_and_on_capacity_change_once_per_capacity_event_before_matching():
    policy = Probe()
    core = make_core(policy, ONE_BY_TWO, up=False)
    v0 = core.capacity_version
    core.job_arrived(0.5, job(1, t=0.5))
    assert core.capacity_version == v0 and policy.log == []

    # a DOWN machine that asks: up (one change), hook, then matching
    core.machine_ready(1.0, 0)
    assert core.capacity_version == v0 + 1
    assert policy.log == [
        ("capacity", v0 + 1, (MachineState.READY, MachineState.DOWN)),  # sees the new state...
        ("choose", 0),  # ...before any matching
    ]
    policy.log.clear()

    core.machine_up(2.0, 1)
    assert core.capacity_version == v0 + 2
    assert policy.log == [("capacity", v0 + 2, (MachineState.BUSY, MachineState.FREE))]
    policy.log.clear()

    core.machine_up(2.5, 1)  # already up: no change
    core.cpu_share_changed(3.0, 1, 1.0)  # same share: no change
    assert core.capacity_version == v0 + 2 and not [e for e in policy.log if e[0] == "capacity"]

    core.cpu_share_changed(3.5, 1, 0.5)
    assert core.capacity_version == v0 + 3 and core.machines[1].cpu_share == 0.5
    core.machine_down(4.0, 0)
    assert core.capacity_version == v0 + 4
    assert [e[:2] for e in policy.log if e[0] == "capacity"] == [("capacity", v0 + 3), ("capacity", v0 + 4)]
    policy.log.clear()

    # machine 0 asks again, with a new share: two changes in one event, one hook call
    core.machine_ready(5.0, 0, 0.25)
    assert core.capacity_version == v0 + 6
    assert [e[0] for e in policy.log] == ["capacity", "choose"]


def test_share_outside_zero_one_is_rejected():
    core = fcfs_core()
    with pytest.raises(ValueError, match="1.5"):
        core.cpu_share_changed(1.0, 0, 1.5)


class Listener(FCFS):
    hooks = frozenset({"on_event"})
    name = "test-listener"

    def __init__(self):
        super().__init__()
        self.events: list = []

    def on_event(self, view, event):
        self.events.append((view.now, event))
        return ()


def test_on_event_sees_every_event_as_an_event_object():
    policy = Listener()
    core = make_core(policy, ONE, up=False)
    j1 = job(1, t=1.0)
    core.machine_up(0.5, 0)
    core.machine_ready(0.5, 0)
    core.job_arrived(1.0, j1)
    core.replica_checkpoint(1.5, 1, 0.5)
    core.replica_done(2.0, 1, ready=True)
    core.machine_down(3.0, 0)
    assert policy.events == [
        (0.5, MachineUp(0, None)),
        (0.5, MachineReady(0, None)),
        (1.0, JobArrived(j1)),
        (1.5, ReplicaCheckpoint(1, 0.5)),
        (2.0, ReplicaDone(1, True)),
        (3.0, MachineDown(0)),
    ]


def test_on_event_is_not_called_unless_declared(monkeypatch):
    calls = []

    def spy(self, view, event):
        calls.append(event)
        return ()

    monkeypatch.setattr(PolicyHooks, "on_event", spy)  # the core's default: FCFS neither defines nor declares it
    core = make_core(FCFS(), ONE)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, job(1, t=1.0))
    core.replica_done(2.0, 1)
    assert calls == []


def test_assigning_a_class_to_a_machine_that_cannot_run_it_is_a_policy_error():
    core = make_core(Scripted(), [[1.0, 0.0]])
    core.machine_ready(0.0, 1)
    a = job(1, cls=0, t=0.0)
    core.job_arrived(0.0, a)
    core.policy.todo.append(Assign(a, 1))
    with pytest.raises(PolicyError, match="cannot run it"):
        core.cpu_share_changed(0.0, 0, 0.9)  # any event hands the todo list over


def test_an_arrival_older_than_the_queue_tail_keeps_submission_order():
    core = make_core(Scripted(), [[1.0]])
    for jid, t in ((1, 5.0), (2, 7.0), (3, 6.0)):  # a trace out of order
        core.job_arrived(t, job(jid, cls=0, t=t))
    assert queue_ids(core, 0) == [1, 3, 2]
    core.check_invariants()


# ---------------------------------------------------------------- choose_groups


class RunsWhatItCan(Policy):
    """The head of the first non-empty queue whose class the machine can run; counts its asks.

    Whether it refuses a machine depends only on which classes the machine can
    run: that is its choose_groups key.
    """
    hooks = frozenset({"choose", "choose_groups"})

    name = "test-runs-what-it-can"

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def choose_groups(self, view: Scheduler) -> list[Hashable]:
        return [tuple(r > 0.0 for r in m.rates) for m in view.machines]

    def choose(self, view: Scheduler, machine):
        self.asked.append(machine.index)
        for key in sorted(view.queues):
            head = view.queues[key].head
            if head is not None and machine.rates[key] > 0.0:
                return head
        return None


class AsksEach(RunsWhatItCan):
    """The same answers; overriding choose() alone makes the core ask machine by machine."""
    hooks = frozenset({"choose"})

    name = "test-asks-each"

    def choose(self, view: Scheduler, machine):
        return super().choose(view, machine)


# Class 0 runs everywhere; class 1 only on M3 and M4.
PICKY = [[1.0, 1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0, 1.0]]


@pytest.mark.parametrize(
    "policy_class, asked",
    [
        # M0 refuses the class-1 job: M1 and M2, of its group, are passed over unasked
        (RunsWhatItCan, [[0, 3], [4], [0]]),
        (AsksEach, [[0, 1, 2, 3], [4], [0, 1, 2]]),
    ],
)
def test_choose_groups_asks_one_machine_per_key_and_rotates_alike(policy_class, asked):
    policy = policy_class()
    core = make_core(policy, PICKY)
    for j in range(5):
        core.machine_ready(float(j), j)
    got = []
    for k, want_machine, want_ready in [(1, 3, [4, 0, 1, 2]), (2, 4, [0, 1, 2]), (3, None, [0, 1, 2])]:
        policy.asked.clear()
        j = job(k, 1, 10.0 + k)
        out = core.job_arrived(10.0 + k, j)
        assert [a.machine for a in assigns(out)] == ([] if want_machine is None else [want_machine])
        assert ready_ids(core) == want_ready  # passed over to the back; nobody taking it: unchanged
        got.append(list(policy.asked))
        core.check_invariants()
    assert got == asked
    assert queue_ids(core, 1) == [3]


class _LoggedKeys(Sequence):
    """Keys by machine index that note which machines' keys the core read."""

    def __init__(self, keys: list[Hashable]) -> None:
        self.keys = keys
        self.read: list[int] = []

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, j):
        self.read.append(j)
        return self.keys[j]


class KeysOnce(RunsWhatItCan):
    """RunsWhatItCan's keys, made once (as a policy whose keys do not change returns them)."""
    hooks = frozenset({"choose_groups"})

    name = "test-keys-once"

    def __init__(self, rates: list[list[float]]) -> None:
        super().__init__()
        self.logged = _LoggedKeys([tuple(row[j] > 0.0 for row in rates) for j in range(len(rates[0]))])

    def choose_groups(self, view: Scheduler) -> Sequence[Hashable]:
        return self.logged


def test_a_job_stops_being_offered_once_every_ready_key_refused():
    # 40 machines: M0-M2 and M36-M39 run class 0 only; M3-M35 both classes. A class-1 job
    # arrives while M3-M35 are busy: the ready key (class 0 only) refuses it once, and the core
    # asks no other machine, nor moves any. The keys were numbered when the policy first gave
    # them: a walk reads the ready queue's numbers, not the policy's sequence.
    rates = [[1.0] * 40, [0.0] * 3 + [1.0] * 33 + [0.0] * 4]
    policy = KeysOnce(rates)
    core = make_core(policy, rates)
    for j in range(40):
        core.machine_ready(float(j), j)
    for k in range(33):  # class-0 jobs fill M0-M32 ... then the both-class machines left
        core.job_arrived(50.0 + k, job(k, 0, 50.0 + k))
    assert ready_ids(core) == [33, 34, 35, 36, 37, 38, 39]
    for k in range(33, 36):  # three class-1 jobs take M33-M35
        core.job_arrived(100.0 + k, job(k, 1, 100.0 + k))
    assert ready_ids(core) == [36, 37, 38, 39]
    policy.logged.read.clear()
    policy.asked.clear()
    out = core.job_arrived(200.0, job(99, 1, 200.0))
    assert assigns(out) == []
    assert policy.asked == [36]
    assert policy.logged.read == []
    assert ready_ids(core) == [36, 37, 38, 39]
    core.check_invariants()


def test_choose_groups_is_used_only_with_the_choose_it_was_written_for():
    class OwnGroup(AsksEach):
        hooks = frozenset({"choose_groups"})
        def choose_groups(self, view: Scheduler) -> list[Hashable]:
            return [0] * len(view.machines)

    assert make_core(RunsWhatItCan(), PICKY).matcher.grouped
    assert not make_core(AsksEach(), PICKY).matcher.grouped  # choose overridden below the key
    assert make_core(OwnGroup(), PICKY).matcher.grouped  # a key declared again for the new choose
    assert not fcfs_core().matcher.grouped  # no key: every machine is asked
