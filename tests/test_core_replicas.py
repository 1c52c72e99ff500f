"""The life of a replica in the scheduling core: how it ends, what is kept, what a machine counts,
policy-owned time-outs and suspected machines.

A real Scheduler driven by events; policies act through timers (``act``), as real policies do.
Every expected value is worked out by hand in the comments.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable

import pytest
from helpers import plain

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
    PolicyError,
    ReplicaRecord,
    ReplicaTimedOut,
    Scheduler,
    SetTimer,
    SuspectDown,
    TimeOut,
)
from mgst.core.stats import RECENT
from mgst.model import Job, JobClass, Machine
from mgst.policies.base import Decisions, Policy

ACT = "act"  # the timer through which a test makes the policy decide something


class Recorder(Policy):
    """Oldest queued job first; with ``max_replicas`` 2, then another replica of the oldest running job.

    It records every on_replica_start and on_replica_end call, and yields ``todo`` when the
    timer ACT fires (see ``act``), re-arming ACT at once so that a test may fire it at any time.
    """
    hooks = frozenset({"start", "on_replica_start", "on_replica_end", "on_timer", "choose"})

    name = "test-recorder"

    def __init__(self, max_replicas: int = 1, resume: bool = True) -> None:
        super().__init__()
        self.max_replicas = max_replicas
        self.resume_from_checkpoint = resume
        self.todo: list = []
        self.started: list[tuple[float, int, int]] = []  # (now, replica, live replicas then)
        self.ended: list[tuple[float, int, Outcome, bool]] = []  # (now, replica, outcome, late)

    def start(self, view: Scheduler) -> Decisions:
        return [SetTimer(ACT, 0.0)]

    def on_timer(self, view: Scheduler, key: Hashable) -> Decisions:
        todo, self.todo = self.todo, []
        return [*todo, SetTimer(ACT, view.now)]

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        waiting = [r for q in view.queues.values() for r in q if machine.rates[r.job_class] > 0]
        if waiting:
            return min(waiting, key=lambda r: (r.submitted, r.id))
        running = [r for r in view.running.values() if r.live_replicas < self.max_replicas]
        return min(running, key=lambda r: (r.submitted, r.id)) if running else None

    def on_replica_start(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        self.started.append((view.now, replica.id, sum(1 for _ in view.live_replicas())))
        return ()

    def on_replica_end(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        assert not replica.live and replica.outcome is not None
        self.ended.append((view.now, replica.id, replica.outcome, replica.late))
        return ()


class PerReplicaTimeOut(Recorder):
    """Gives up on every replica ``limit`` after it starts (MGST's T/O, as a policy piece)."""
    hooks = frozenset({"on_replica_start", "on_replica_end", "on_timer"})

    limit = 10.0

    def on_replica_start(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        return [SetTimer(("to", replica.id), view.now + self.limit)]

    def on_replica_end(self, view: Scheduler, replica: ReplicaRecord) -> Decisions:
        super().on_replica_end(view, replica)
        return [CancelTimer(("to", replica.id))]

    def on_timer(self, view: Scheduler, key: Hashable) -> Decisions:
        if key == ACT:
            return super().on_timer(view, key)
        _, rid = key  # type: ignore[misc]
        return [TimeOut(rid)] if view.replica(rid) is not None else []


def make(
    policy: Policy, n_machines: int = 1, n_classes: int = 1, slots: tuple[int, ...] | None = None
) -> Scheduler:
    """Machines M0.. at rate 1 for every class, all down; started at t=0."""
    slots = slots or (1,) * n_machines
    core = Scheduler(
        [JobClass(f"c{i}", 0.0) for i in range(n_classes)],
        [Machine(f"M{j}", (1.0,) * n_classes, slots=slots[j]) for j in range(n_machines)],
        policy,
        check=True,
    )
    core.start(0.0)
    return core


def act(core: Scheduler, now: float, *decisions) -> list:
    """Make the policy yield ``decisions`` at ``now`` (through its ACT timer); the outputs, re-arming left out."""
    core.policy.todo = list(decisions)  # type: ignore[attr-defined]
    return [o for o in core.timer_fired(now, ACT) if o != SetTimer(ACT, now)]


def history(core: Scheduler, job_id: int) -> list[tuple]:
    return [(r.id, r.machine, r.sent, r.ended, r.outcome) for r in core.jobs[job_id].history]


# ---------------------------------------------------------------- every way a replica ends


def _down(core: Scheduler, t: float) -> list:
    return core.machine_down(t, 0)


def _restart(core: Scheduler, t: float) -> list:
    return core.machine_ready(t, 0)  # a one-slot machine asking while it runs r1: r1 is gone


ENDS: dict[str, tuple[Callable[[Scheduler, float], list], Outcome, dict[str, int]]] = {
    "done": (lambda c, t: c.replica_done(t, 1), Outcome.DONE, {"completed": 1}),
    "machine down": (_down, Outcome.LOST, {"lost": 1, "failures": 1}),
    "machine restarted": (_restart, Outcome.LOST, {"lost": 1}),
    "suspected": (lambda c, t: act(c, t, SuspectDown(0)), Outcome.LOST, {"lost": 1, "suspicions": 1}),
    "policy time-out": (lambda c, t: act(c, t, TimeOut(1)), Outcome.TIMED_OUT, {"lost": 1, "timed_out": 1}),
    "driver time-out": (lambda c, t: c.replica_failed(t, 1, "timeout"), Outcome.TIMED_OUT, {"lost": 1, "timed_out": 1}),
    "failed": (lambda c, t: c.replica_failed(t, 1, "crashed"), Outcome.FAILED, {"lost": 1, "failed": 1}),
    "policy cancel": (lambda c, t: act(c, t, Cancel(1)), Outcome.CANCELLED, {"cancelled": 1}),
}
STATS = ("completed", "cancelled", "lost", "timed_out", "failed", "failures", "suspicions")


@pytest.mark.parametrize("how", sorted(ENDS))
def test_every_end_reaches_on_replica_end_with_its_record_and_outcome(how):
    end, outcome, counts = ENDS[how]
    policy = Recorder()
    core = make(policy)
    j1 = Job(1, 0, 1.0, 4.0)
    core.machine_ready(0.0, 0)
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0, False)]
    r = core.replica(1)
    assert policy.started == [(1.0, 1, 1)]

    end(core, 5.0)

    assert policy.ended == [(5.0, 1, outcome, False)]
    assert not r.live and r.outcome is outcome
    assert (r.machine, r.sent, r.ended, r.machine_time) == (0, 1.0, 5.0, 4.0)
    assert core.jobs[1].history[0] is r
    assert r.wasted is (outcome is not Outcome.DONE)  # it never checkpointed
    st = core.machines[0].stats
    assert {k: getattr(st, k) for k in STATS} == {k: counts.get(k, 0) for k in STATS}
    if how == "machine restarted":  # the machine that asked takes the requeued job again
        assert [r.id for r in core.jobs[1].history] == [1, 2] and core.replica(2).machine == 0
    else:
        assert len(core.jobs[1].history) == 1
        assert core.jobs[1].status is (JobStatus.DONE if outcome is Outcome.DONE else JobStatus.QUEUED)
    core.check_invariants()


def test_cancelled_sibling_reaches_on_replica_end_after_the_winner():
    policy = Recorder(max_replicas=2)
    core = make(policy, 2)
    j1 = Job(1, 0, 1.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0, False), Assign(j1, 1, 2, 0.0, False)]
    # on_replica_start runs after matching: both replicas already live at the first call
    assert policy.started == [(1.0, 1, 2), (1.0, 2, 2)]

    assert core.replica_done(4.0, 1) == [Cancel(2, 1, 1), JobCompleted(j1, 1, 0)]
    assert policy.ended == [(4.0, 1, Outcome.DONE, False), (4.0, 2, Outcome.CANCELLED, False)]
    assert history(core, 1) == [(1, 0, 1.0, 4.0, Outcome.DONE), (2, 1, 1.0, 4.0, Outcome.CANCELLED)]
    m1 = core.machines[1]
    assert m1.stats.cancelled == 1 and m1.stats.lost == 0 and m1.stats.error_rate == 0.0
    assert m1.state is MachineState.FREE and m1.asking == 0
    stale = core.stale_events
    assert core.replica_done(5.0, 2) == []  # the cancelled sibling reports anyway: its job is done
    assert core.stale_events == stale + 1
    assert not core.accepts_result(2)
    core.check_invariants()


def test_job_history_keeps_every_replica_in_order():
    policy = Recorder()
    core = make(policy, 2)
    j1 = Job(1, 0, 0.0)
    core.job_arrived(0.0, j1)
    assert plain(core.machine_ready(1.0, 0)) == [Assign(j1, 0, 1, 0.0, False)]
    core.machine_down(2.0, 0)  # r1 lost
    assert plain(core.machine_ready(3.0, 1)) == [Assign(j1, 1, 2, 0.0, False)]
    core.replica_failed(4.0, 2)  # r2 failed; M1 free, not asking
    assert plain(core.machine_ready(5.0, 1)) == [Assign(j1, 1, 3, 0.0, False)]
    assert plain(act(core, 6.0, TimeOut(3))) == [ReplicaTimedOut(3, 1, 1), JobRequeued(j1, 3, 1, "timeout")]
    assert plain(core.machine_ready(7.0, 0)) == [Assign(j1, 0, 4, 0.0, False)]
    assert core.replica_done(9.0, 4) == [JobCompleted(j1, 4, 0)]

    assert history(core, 1) == [
        (1, 0, 1.0, 2.0, Outcome.LOST),
        (2, 1, 3.0, 4.0, Outcome.FAILED),
        (3, 1, 5.0, 6.0, Outcome.TIMED_OUT),
        (4, 0, 7.0, 9.0, Outcome.DONE),
    ]
    assert [r.attempt for r in core.jobs[1].history] == [1, 2, 3, 4]
    assert policy.ended == [
        (2.0, 1, Outcome.LOST, False),
        (4.0, 2, Outcome.FAILED, False),
        (6.0, 3, Outcome.TIMED_OUT, False),
        (9.0, 4, Outcome.DONE, False),
    ]
    rec = core.jobs[1]
    assert (rec.attempts, rec.requeues, rec.timeouts) == (4, 3, 1)
    assert (rec.first_sent, rec.completed, rec.done_by, rec.done_on, rec.done_sent) == (1.0, 9.0, 4, 0, 7.0)
    # queued 0-1, 2-3, 4-5, 6-7: idle 4, and no more once done
    assert rec.idle(9.0) == 4.0 and rec.idle(100.0) == 4.0
    core.check_invariants()


def test_idle_grows_while_queued_and_stops_while_running():
    core = make(Recorder())
    core.job_arrived(0.0, Job(1, 0, 0.0))
    rec = core.jobs[1]
    assert rec.idle(1.5) == 1.5
    core.machine_ready(2.0, 0)  # running from 2
    assert rec.idle(4.0) == 2.0
    core.machine_down(5.0, 0)  # queued again from 5
    assert rec.idle(7.0) == 2.0 + 2.0


def test_idle_counts_the_wait_before_a_late_result():
    core = make(Recorder())
    core.job_arrived(0.0, Job(1, 0, 0.0))
    core.machine_ready(2.0, 0)  # r1 sent at 2: idle 0-2
    core.machine_down(5.0, 0)  # r1 given up on: queued (idle) again from 5
    rec = core.jobs[1]
    assert rec.idle(7.0) == 4.0
    core.replica_done(9.0, 1)  # r1's result after all
    assert rec.status is JobStatus.DONE
    assert rec.idle(9.0) == 2.0 + 4.0  # 0-2 and 5-9: no running replica as far as the core knew


# ---------------------------------------------------------------- best checkpoint, waste


def test_best_and_wasted_follow_the_checkpoints():
    core = make(Recorder(max_replicas=2), 2)
    j1 = Job(1, 0, 1.0, 8.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    core.job_arrived(1.0, j1)  # r1 on M0, r2 on M1
    core.replica_checkpoint(2.0, 1, 0.5)  # raises the job's best: 0 -> 0.5
    core.replica_checkpoint(3.0, 2, 0.25)  # below the best: r2 saved progress but raised nothing
    r1, r2 = core.replica(1), core.replica(2)
    assert (r1.best, r1.checkpoint, r2.best, r2.checkpoint) == (True, 0.5, False, 0.25)
    assert core.jobs[1].best_progress == 0.5

    core.machine_down(4.0, 0)  # r1 lost; the job still runs r2
    core.replica_failed(5.0, 2)  # r2 failed: requeued
    assert plain(core.machine_ready(6.0, 1)) == [Assign(j1, 1, 3, 0.5, False)]  # resumes from the best
    r3 = core.replica(3)
    assert (r3.progress, r3.checkpoint) == (0.5, 0.5)
    core.replica_checkpoint(7.0, 3, 0.5)  # equal to the best: raises nothing
    assert not r3.best
    core.machine_down(8.0, 1)  # r3 lost
    assert plain(core.machine_ready(9.0, 1)) == [Assign(j1, 1, 4, 0.5, False)]
    core.replica_done(10.0, 4)
    r4 = core.jobs[1].history[3]

    # seed 000: a replica is wasted if it ended without the result and never raised the best checkpoint
    assert [r.wasted for r in (r1, r2, r3, r4)] == [False, True, True, False]
    assert [r.best for r in (r1, r2, r3, r4)] == [True, False, False, False]
    # machine time: r1 1-4, r2 1-5, r3 6-8, r4 9-10; wasted r2 + r3 = 4 + 2 of 3 + 4 + 2 + 1
    assert [r.machine_time for r in core.jobs[1].history] == [3.0, 4.0, 2.0, 1.0]
    hist = core.jobs[1].history
    assert sum(r.machine_time for r in hist if r.wasted) == 6.0
    assert sum(r.machine_time for r in hist) == 10.0
    core.check_invariants()


def test_without_resuming_from_checkpoints_a_checkpoint_makes_no_replica_useful():
    """A policy that never resumes from checkpoints (checkpoints = false) may still have them taken (a
    checkpoint_interval): the best one is never used, so it cannot make a replica useful (Anglano & Canonico's RWT
    counts a replica as wasted unless it gave the result or 'a checkpoint better than the one stored', stored for a
    new replica to resume from). It made every such replica useful: an RWT of 0 where the same run without
    checkpoints had 0.5."""
    core = make(Recorder(max_replicas=2, resume=False), 2)
    j1 = Job(1, 0, 1.0, 8.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    core.job_arrived(1.0, j1)  # r1 on M0, r2 on M1
    core.replica_checkpoint(2.0, 1, 0.5)
    core.machine_down(4.0, 0)  # r1 lost
    assert plain(core.machine_ready(6.0, 0)) == [Assign(j1, 0, 3, 0.0, False)]  # from scratch: r3
    core.replica_done(7.0, 2)  # r2 wins; r3 cancelled
    r1, r2, r3 = core.jobs[1].history
    assert [r.best for r in (r1, r2, r3)] == [False, False, False]
    assert [r.wasted for r in (r1, r2, r3)] == [True, False, True]
    core.check_invariants()


def test_a_checkpoint_equal_but_for_rounding_is_not_better():
    """Seed 000: a replica is useless if it ends "without having ever produced a checkpoint better than
    the one stored". At equal power, a replica resumed from the best checkpoint reaches its sibling's
    next checkpoint with the same work, summed along another path of floats: one ulp higher, which a
    plain ``>`` took for better (RWT too low on homogeneous grids). Equal is not better."""
    size = 12537.0  # both machines run 10 units of work per second, and checkpoint every 600 s
    first = 1.0 - (size - 6000.0) / size  # r1's at 600, started from 0 at 0 (as the simulator works it out)
    second = 1.0 - (size - 12000.0) / size  # r1's at 1200: 12,000 units done
    resumed = 1.0 - ((1.0 - first) * size - 6000.0) / size  # r2's at 1300, resumed from ``first`` at 700
    assert 0.0 < resumed - second < 1e-15  # the same 12,000 units, one ulp apart: the case under test

    core = make(Recorder(max_replicas=2), 2)
    j1 = Job(1, 0, 0.0, size)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, j1)  # r1 on M0
    core.replica_checkpoint(600.0, 1, first)
    assert plain(core.machine_ready(700.0, 1)) == [Assign(j1, 1, 2, first, False)]  # r2 resumes from r1's checkpoint
    core.replica_checkpoint(1200.0, 1, second)  # r1 raises the best again
    core.replica_checkpoint(1300.0, 2, resumed)  # r2: equal work, one ulp more
    r1, r2 = core.replica(1), core.replica(2)
    assert r1.best and not r2.best
    assert core.jobs[1].best_progress == resumed  # the larger of the two is kept to resume from: harmless
    core.replica_done(1300.5, 1)  # r1 wins; r2 is cancelled without ever having bettered the stored checkpoint
    assert r2.outcome is Outcome.CANCELLED and r2.wasted and not r1.wasted
    core.check_invariants()


def test_a_checkpoint_better_by_a_small_real_step_is_better():
    """The tie tolerance (CHECKPOINT_TIE, 1e-9 of the job) must not swallow real progress: 1e-8 more counts."""
    core = make(Recorder(max_replicas=2), 2)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    core.job_arrived(0.0, Job(1, 0, 0.0, 8.0))  # r1 on M0, r2 on M1
    core.replica_checkpoint(1.0, 1, 0.5)
    core.replica_checkpoint(2.0, 2, 0.5 + 1e-8)
    assert core.replica(2).best and core.jobs[1].best_progress == 0.5 + 1e-8


def test_best_is_never_set_without_resume():
    """Without resuming, the stored checkpoint serves no replica: raising it makes none useful (the job's best is
    still noted, harmless)."""
    core = make(Recorder(resume=False))
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, Job(1, 0, 0.0))
    core.replica_checkpoint(1.0, 1, 0.5)
    core.machine_down(2.0, 0)
    assert plain(core.machine_ready(3.0, 0)) == [Assign(Job(1, 0, 0.0), 0, 2, 0.0, False)]  # from scratch
    core.replica_checkpoint(4.0, 2, 0.25)
    assert not core.replica(2).best
    core.replica_checkpoint(5.0, 2, 0.75)
    assert not core.replica(2).best and core.jobs[1].best_progress == 0.75


# ---------------------------------------------------------------- machine statistics


def test_machine_statistics_of_every_outcome():
    core = make(Recorder(), 1, 2)
    j1, j2, j3, j4 = Job(1, 0, 0.0), Job(2, 0, 2.0), Job(3, 1, 6.0), Job(4, 0, 7.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, j1)  # r1 sent 0
    assert core.replica_done(2.0, 1, ready=True) == [JobCompleted(j1, 1, 0), Hold(0)]  # service 2
    core.job_arrived(2.0, j2)  # r2 sent 2
    core.replica_done(6.0, 2, ready=True)  # service 4
    core.job_arrived(6.0, j3)  # r3 (class 1) sent 6
    core.replica_done(7.0, 3, ready=True)  # service 1
    core.job_arrived(7.0, j4)  # r4 sent 7
    core.machine_down(8.0, 0)  # lost
    assert plain(core.machine_ready(9.0, 0)) == [Assign(j4, 0, 5, 0.0, False)]
    core.replica_failed(10.0, 5)  # failed
    assert plain(core.machine_ready(11.0, 0)) == [Assign(j4, 0, 6, 0.0, False)]
    act(core, 12.0, TimeOut(6))  # timed out
    assert plain(core.machine_ready(13.0, 0)) == [Assign(j4, 0, 7, 0.0, False)]
    act(core, 14.0, Cancel(7))  # cancelled: not the machine's fault
    core.close(20.0)

    st = core.machines[0].stats
    assert (st.completed, st.cancelled, st.lost, st.timed_out, st.failed, st.failures) == (3, 1, 3, 1, 1, 1)
    assert st.errors == 3
    assert st.error_rate == 3 / 6
    assert list(st.recent) == [True, True, True, False, False, False]
    assert st.recent_successes == 3
    assert st.completed_by_class == [2, 1]
    assert st.mean_service(0) == (2.0 + 4.0) / 2 and st.mean_service(1) == 1.0
    assert st.busy_time == 2.0 + 4.0 + 1.0 + 1.0 + 1.0 + 1.0 + 1.0
    assert st.up_time == 8.0 + 11.0  # up 0-8 and 9-20
    core.check_invariants()


def test_mean_service_before_any_completion_is_none_and_error_rate_zero():
    core = make(Recorder(), 1, 2)
    st = core.machines[0].stats
    assert st.mean_service(0) is None and st.error_rate == 0.0 and st.recent_successes == 0


def test_recent_outcomes_keep_the_last_twenty():
    assert RECENT == 20
    core = make(Recorder())
    core.machine_ready(0.0, 0)
    t = 0.0
    for i in range(1, 26):  # 25 results
        core.job_arrived(t, Job(i, 0, t))
        t += 1.0
        core.replica_done(t, i, ready=True)
    core.job_arrived(t, Job(26, 0, t))  # replica 26
    for rid in (26, 27, 28):  # then 3 failures of job 26, each retried at once on M0
        t += 1.0
        core.replica_failed(t, rid)
        core.machine_ready(t, 0)
    st = core.machines[0].stats
    # 28 outcomes; the last 20: results of jobs 9..25 (17), then 3 failures
    assert list(st.recent) == [True] * 17 + [False] * 3
    assert st.recent_successes == 17
    assert (st.completed, st.lost, st.failed) == (25, 3, 3)
    assert st.error_rate == 3 / 28


# ---------------------------------------------------------------- policy time-outs


def test_policy_time_out_frees_the_slot_requeues_and_takes_the_late_result_once():
    policy = PerReplicaTimeOut()
    core = make(policy, 2)
    j1 = Job(1, 0, 1.0)
    assert plain(core.machine_ready(0.0, 0)) == [Hold(0)]
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1, 0.0, False), SetTimer(("to", 1), 11.0)]
    assert core.machine_ready(2.0, 1) == [Hold(1)]

    out = core.timer_fired(11.0, ("to", 1))
    assert plain(out) == [
        ReplicaTimedOut(1, 0, 1),
        JobRequeued(j1, 1, 0, "timeout"),
        Assign(j1, 1, 2, 0.0, False),  # the requeued job goes to the machine that asks
        SetTimer(("to", 2), 21.0),
    ]
    rec, m0 = core.jobs[1], core.machines[0]
    assert rec.timeouts == 1 and rec.requeues == 1
    assert m0.state is MachineState.FREE and m0.asking == 0 and not core.is_ready(0)
    assert (m0.stats.timed_out, m0.stats.lost) == (1, 1)
    assert policy.ended == [(11.0, 1, Outcome.TIMED_OUT, False)]
    assert core.accepts_result(1)
    core.check_invariants()

    # M0 delivers after all: its result is taken, the newer replica on M1 cancelled
    out = core.replica_done(12.0, 1)
    assert out == [Cancel(2, 1, 1), JobCompleted(j1, 1, 0), CancelTimer(("to", 2))]
    r1 = rec.history[0]
    assert (r1.outcome, r1.late, r1.ended) == (Outcome.DONE, True, 12.0)
    assert policy.ended[1:] == [(12.0, 1, Outcome.DONE, True), (12.0, 2, Outcome.CANCELLED, False)]
    assert rec.status is JobStatus.DONE and rec.done_by == 1 and rec.completed == 12.0
    assert not core.accepts_result(1)
    assert m0.state is MachineState.FREE
    core.check_invariants()

    stale = core.stale_events
    assert core.replica_done(13.0, 1) == []  # once only
    assert core.stale_events == stale + 1
    assert rec.completed == 12.0


def test_time_out_of_one_of_two_replicas_keeps_the_job_running():
    core = make(Recorder(max_replicas=2), 2)
    j1 = Job(1, 0, 1.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    core.job_arrived(1.0, j1)  # r1 on M0, r2 on M1
    assert act(core, 3.0, TimeOut(1)) == [ReplicaTimedOut(1, 0, 1)]
    rec = core.jobs[1]
    assert rec.status is JobStatus.RUNNING and list(rec.replicas) == [2] and rec.timeouts == 1
    assert rec.requeues == 0
    core.check_invariants()


@pytest.mark.parametrize("rid", [1, 99])
def test_time_out_of_a_replica_that_is_not_live_is_a_policy_error(rid):
    core = make(Recorder())
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, Job(1, 0, 0.0))
    core.replica_done(1.0, 1)
    with pytest.raises(PolicyError, match=f"time-out of replica {rid}"):
        act(core, 2.0, TimeOut(rid))


def test_time_out_twice_is_a_policy_error():
    core = make(Recorder())
    core.machine_ready(0.0, 0)
    core.job_arrived(0.0, Job(1, 0, 0.0))
    act(core, 1.0, TimeOut(1))
    with pytest.raises(PolicyError, match="time-out of replica 1"):
        act(core, 2.0, TimeOut(1))


# ---------------------------------------------------------------- suspected machines


def test_suspect_down_loses_every_replica_until_the_machine_asks_again():
    policy = Recorder()
    core = make(policy, 2, slots=(2, 1))
    j1, j2, j3 = Job(1, 0, 1.0), Job(2, 0, 1.0), Job(3, 0, 3.0)
    core.machine_ready(0.0, 0)  # M0 asks for its two slots
    core.job_arrived(1.0, j1)
    core.job_arrived(1.0, j2)
    assert plain(sorted(core.machines[0].replicas)) == [1, 2]
    core.machine_ready(2.0, 1)
    assert plain(core.job_arrived(3.0, j3)) == [Assign(j3, 1, 3, 0.0, False)]

    out = act(core, 4.0, SuspectDown(0))
    assert out == [JobRequeued(j1, 1, 0, "machine down"), JobRequeued(j2, 2, 0, "machine down"), MachineSuspected(0)]
    m0 = core.machines[0]
    assert m0.state is MachineState.DOWN and m0.suspected and not m0.replicas and m0.asking == 0
    assert (m0.stats.lost, m0.stats.failures, m0.stats.suspicions) == (2, 0, 1)
    assert policy.ended == [(4.0, 1, Outcome.LOST, False), (4.0, 2, Outcome.LOST, False)]
    assert core.queued_count == 2
    core.check_invariants()

    assert act(core, 4.5, SuspectDown(0)) == []  # already down: nothing more
    assert m0.stats.suspicions == 1

    assert core.replica_done(5.0, 1) == [JobCompleted(j1, 1, 0)]  # its late result is taken once
    assert m0.state is MachineState.DOWN and m0.suspected
    assert plain(core.replica_done(5.5, 1)) == []

    # back at its next request: two free slots, one job waits
    assert plain(core.machine_ready(6.0, 0)) == [Assign(j2, 0, 4, 0.0, False), Hold(0)]
    assert m0.state is MachineState.READY and not m0.suspected and m0.asking == 1
    core.check_invariants()


def test_suspicion_of_an_unknown_machine_is_a_policy_error():
    core = make(Recorder())
    with pytest.raises(PolicyError, match="unknown machine 5"):
        act(core, 1.0, SuspectDown(5))


class DecidesOnEvent(Recorder):
    """Yields ``todo`` from on_event (after the core applied an event, before matching)."""
    hooks = frozenset({"on_event"})

    def on_event(self, view: Scheduler, event: object) -> Decisions:
        todo, self.todo = self.todo, []
        return todo


def test_replica_ended_by_an_on_event_decision_reaches_on_replica_end_in_that_event():
    policy = DecidesOnEvent()
    core = make(policy, 2)
    j1 = Job(1, 0, 1.0)
    core.machine_ready(0.0, 0)
    core.job_arrived(1.0, j1)  # r1 on M0
    policy.todo = [Cancel(1)]
    out = core.machine_ready(2.0, 1)
    assert plain(out) == [Cancel(1, 0, 1), JobRequeued(j1, 1, 0, "cancelled"), Assign(j1, 1, 2, 0.0, False)]
    assert policy.ended == [(2.0, 1, Outcome.CANCELLED, False)]


class DecidesOnlyByTimer(Recorder):
    """Assigns nothing of its own: only what ``act`` makes it yield."""
    hooks = frozenset({"start", "on_timer", "dispatch"})

    def dispatch(self, view: Scheduler, new_job: object, asking: object) -> Decisions:
        return ()


def test_a_decision_s_index_may_be_any_integer_and_anything_else_is_the_policy_s_error_named():
    """A machine index from numpy (an argmin's np.int64) was a compiled cast's TypeError, blamed on mgst ("a bug of
    mgst's: please report it"), and ran in pure Python: now it is taken as the integer it is. A float, a string,
    None or a bool, and a job that is not a Job (a record, None), are the policy's errors, named."""
    import numpy as np  # noqa: PLC0415

    j1, j2 = Job(1, 0, 1.0), Job(2, 0, 1.0)

    def waiting() -> Scheduler:  # (a fresh core each time: one that raised stops there)
        core = make(DecidesOnlyByTimer(), 2)
        core.machine_ready(0.0, 0)
        core.machine_ready(0.0, 1)
        core.job_arrived(0.5, j1)
        core.job_arrived(0.5, j2)
        assert core.queued_count == 2
        return core

    core = waiting()
    assert plain(act(core, 1.0, Assign(j1, np.int64(1)))) == [Assign(j1, 1, 1, 0.0, False)]
    assert type(core.machines[1].replicas[1].machine) is int
    assert plain(act(core, 2.0, Assign(j2, np.int32(0)))) == [Assign(j2, 0, 2, 0.0, False)]
    assert plain(act(core, 3.0, Cancel(np.int64(2)))) == [Cancel(2, 0, 2), JobRequeued(j2, 2, 0, "cancelled")]
    for bad, shown in ((1.0, "1.0 (float)"), ("0", "0 (str)"), (None, "None (NoneType)"), (True, "True (bool)")):
        named = re.escape(shown)
        for decision, words in ((Assign(j2, bad), rf"^Assign of machine {named}: a machine is an integer index"),
                                (Hold(bad), rf"^Hold of machine {named}"),
                                (Cancel(bad), rf"^Cancel of replica {named}"),
                                (SuspectDown(bad), rf"^SuspectDown of machine {named}")):
            with pytest.raises(PolicyError, match=words):
                act(waiting(), 1.0, decision)
    with pytest.raises(PolicyError, match=r"^Assign of JobRecord .* \(a record: Assign takes its \.job\)"):
        core = waiting()
        act(core, 1.0, Assign(core.jobs[2], 0))
    with pytest.raises(PolicyError, match=r"^Assign of NoneType None: Assign's job must be a Job"):
        act(waiting(), 1.0, Assign(None, 0))
