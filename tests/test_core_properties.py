"""The scheduling core under random event sequences (hypothesis): its invariants, checked from outside."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from helpers import Gang, make_policy, new_core
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from mgst.core import (
    Assign,
    Cancel,
    CancelTimer,
    Hold,
    JobCompleted,
    JobQueue,
    JobRecord,
    JobRequeued,
    JobStatus,
    MachineState,
    Output,
    SetTimer,
)
from mgst.model import Job
from mgst.policies.base import Policy

# Two classes, three machines; class 1 cannot run on M1, class 0 cannot run on M2.
RATES = ((1.0, 2.0, 0.0), (0.5, 0.0, 1.0))
ALPHA = (0.4, 0.3)
N_CLASSES, N_MACHINES = len(RATES), len(RATES[0])

POLICIES: dict[str, Callable[[], Policy]] = {
    "fcfs": lambda: make_policy("fcfs"),
    "lpas_dg": lambda: make_policy("lpas_dg", {"resolve_period": 3.0}),  # timers too
    "random": lambda: make_policy("random", seed=1),
    "wqr_ft": lambda: make_policy("wqr_ft", {"replicas": 2}, seed=1),
    "gang": lambda: Gang((0, 1)),
}

# Policies whose matching is work-conserving: a ready machine never waits while a job
# it may run waits. (Gang holds machines on purpose.)
CONSERVING = {"fcfs", "lpas_dg", "random", "wqr_ft"}

SETTINGS = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

DT = st.sampled_from([0.0, 0.0, 0.25, 1.0, 3.0])  # time never goes back; ties are common
MACHINE = st.integers(0, N_MACHINES - 1)
SHARE = st.sampled_from([None, 0.25, 0.5, 1.0])
UNKNOWN_REPLICA = 10**6


class CoreMachine(RuleBasedStateMachine):
    """Drives a Scheduler like a driver would, and keeps its own account from the outputs."""

    def __init__(self, policy_name: str):
        super().__init__()
        self.policy_name = policy_name
        self.core = new_core(POLICIES[policy_name](), RATES, ALPHA)
        self.now = 0.0
        self.next_id = 1
        self.arrived: dict[int, Job] = {}
        self.on_machine: dict[int, int] = {}  # machine -> live replica, from the outputs
        self.replica_job: dict[int, int] = {}  # every replica id ever assigned -> job id
        self.replica_machine: dict[int, int] = {}  # ... -> machine
        self.completions: Counter[int] = Counter()
        self.timers: dict = {}  # from SetTimer/CancelTimer outputs
        self.absorb(self.core.start(0.0))

    # ------------------------------------------------------------ plumbing

    def tick(self, dt: float) -> float:
        self.now += dt
        return self.now

    def forget_machine(self, j: int) -> None:
        self.on_machine.pop(j, None)

    def forget_replica(self, rid: int) -> None:
        for j, r in list(self.on_machine.items()):
            if r == rid:
                del self.on_machine[j]

    def absorb(self, out: list[Output]) -> None:
        """Check each output against our own account, then update it."""
        for o in out:
            t = type(o)
            if t is Assign:
                assert o.replica not in self.replica_job, f"replica id {o.replica} reused"
                assert o.machine not in self.on_machine, f"{o} to a machine running replica {self.on_machine}"
                assert o.job.id in self.arrived
                assert self.completions[o.job.id] == 0, f"{o} of a completed job"
                assert 0.0 <= o.progress <= 1.0
                self.on_machine[o.machine] = o.replica
                self.replica_job[o.replica] = o.job.id
                self.replica_machine[o.replica] = o.machine
            elif t is Cancel:
                assert self.on_machine.get(o.machine) == o.replica, (o, self.on_machine)
                assert self.replica_job[o.replica] == o.job_id
                del self.on_machine[o.machine]
            elif t is JobCompleted:
                self.completions[o.job.id] += 1
                assert self.completions[o.job.id] == 1, f"job {o.job.id} completed twice"
                assert self.replica_job[o.replica] == o.job.id
            elif t is JobRequeued:
                assert o.replica not in self.on_machine.values()
                assert self.replica_job[o.replica] == o.job.id
            elif t is Hold:
                assert self.core.is_ready(o.machine)
            elif t is SetTimer:
                self.timers[o.key] = o.at
            elif t is CancelTimer:
                self.timers.pop(o.key, None)
            else:
                raise AssertionError(f"unexpected output {o!r}")

    # ------------------------------------------------------------ rules

    @rule(dt=DT, cls=st.integers(0, N_CLASSES - 1))
    def arrive(self, dt, cls):
        now = self.tick(dt)
        jb = Job(self.next_id, cls, now)
        self.next_id += 1
        self.arrived[jb.id] = jb
        self.absorb(self.core.job_arrived(now, jb))

    @precondition(lambda self: self.arrived)
    @rule(dt=DT, data=st.data())
    def arrive_again(self, dt, data):
        jid = data.draw(st.sampled_from(sorted(self.arrived)))
        stale = self.core.stale_events
        self.absorb(self.core.job_arrived(self.tick(dt), Job(jid, 0, self.now)))
        assert self.core.stale_events == stale + 1

    @rule(dt=DT, j=MACHINE, share=SHARE)
    def ready(self, dt, j, share):
        if self.core.machines[j].state is MachineState.BUSY:
            self.forget_machine(j)
        self.absorb(self.core.machine_ready(self.tick(dt), j, share))

    @precondition(lambda self: self.on_machine)
    @rule(dt=DT, data=st.data())
    def restart(self, dt, data):
        """A busy machine asks for work (its puller restarted): what it ran is lost."""
        j = data.draw(st.sampled_from(sorted(self.on_machine)))
        self.ready(dt, j, None)

    @precondition(lambda self: self.on_machine)
    @rule(dt=DT, data=st.data(), ready=st.booleans())
    def done(self, dt, data, ready):
        rid = data.draw(st.sampled_from(sorted(self.on_machine.values())))
        self.forget_replica(rid)
        self.absorb(self.core.replica_done(self.tick(dt), rid, ready))

    @precondition(lambda self: self.on_machine)
    @rule(dt=DT, data=st.data(), reason=st.sampled_from(["failed", "timeout"]))
    def failed(self, dt, data, reason):
        rid = data.draw(st.sampled_from(sorted(self.on_machine.values())))
        job = self.core.replica(rid).job
        timeouts = job.timeouts
        self.forget_replica(rid)
        self.absorb(self.core.replica_failed(self.tick(dt), rid, reason))
        assert job.timeouts == timeouts + (reason == "timeout")

    @precondition(lambda self: self.on_machine)
    @rule(dt=DT, data=st.data(), progress=st.floats(0.0, 1.0))
    def checkpoint(self, dt, data, progress):
        rid = data.draw(st.sampled_from(sorted(self.on_machine.values())))
        job = self.core.replica(rid).job
        best = job.best_progress
        out = self.core.replica_checkpoint(self.tick(dt), rid, progress)
        assert out == []
        assert job.best_progress == max(best, progress)

    @rule(dt=DT, j=MACHINE)
    def down(self, dt, j):
        self.forget_machine(j)
        self.absorb(self.core.machine_down(self.tick(dt), j))
        assert self.core.machines[j].state is MachineState.DOWN

    @rule(dt=DT, j=MACHINE, share=SHARE)
    def up(self, dt, j, share):
        self.absorb(self.core.machine_up(self.tick(dt), j, share))
        assert self.core.machines[j].is_up

    @rule(dt=DT, j=MACHINE, share=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    def share(self, dt, j, share):
        self.absorb(self.core.cpu_share_changed(self.tick(dt), j, share))

    @rule(dt=DT, data=st.data(), ready=st.booleans())
    def late_done(self, dt, data, ready):
        """A result for a replica that is not running (given up on, cancelled) or never was."""
        past = sorted(set(self.replica_job) - set(self.on_machine.values()))
        rid = data.draw(st.sampled_from(past + [UNKNOWN_REPLICA]))
        jid = self.replica_job.get(rid)
        was_done = jid is not None and self.core.jobs[jid].status is JobStatus.DONE
        stale = self.core.stale_events
        out = self.core.replica_done(self.tick(dt), rid, ready)
        self.absorb(out)
        completed = [o for o in out if type(o) is JobCompleted]
        if was_done or jid is None:
            assert completed == [] and self.core.stale_events == stale + 1
        else:  # a replica given up on while its job was not done: its result is taken
            assert completed == [JobCompleted(self.arrived[jid], rid, self.replica_machine[rid])]
            assert self.core.stale_events == stale

    @rule(dt=DT, data=st.data())
    def timer(self, dt, data):
        assert self.timers == self.core.timers
        if self.core.timers:
            key = data.draw(st.sampled_from(sorted(self.core.timers, key=repr)))
            self.now = max(self.now + dt, self.core.timers[key])
            self.timers.pop(key)
            self.absorb(self.core.timer_fired(self.now, key))
        else:
            stale = self.core.stale_events
            self.absorb(self.core.timer_fired(self.tick(dt), "no such timer"))
            assert self.core.stale_events == stale + 1

    # ------------------------------------------------------------ invariants

    @invariant()
    def consistent(self):
        core = self.core
        core.check_invariants()

        # every job that arrived is in exactly one of queued, running, done
        assert set(core.jobs) == set(self.arrived)
        queued = [r.id for q in core.queues.values() for r in q]
        assert len(queued) == len(set(queued)), "a job queued twice"
        running = set(core.running)
        done = {jid for jid, r in core.jobs.items() if r.status is JobStatus.DONE}
        assert not (set(queued) & running) and not (set(queued) & done) and not (running & done)
        assert set(queued) | running | done == set(self.arrived)
        for jid in queued:
            assert not core.jobs[jid].replicas and jid not in running
        # each queue in submission order (a requeued job keeps its place), head first
        for q in core.queues.values():
            recs = list(q)
            assert recs == sorted(recs, key=lambda r: (r.submitted, r.id))
            assert q.head is (recs[0] if recs else None)

        # one JobCompleted per done job, and none for the others
        assert set(self.completions) == done
        assert sum(self.completions.values()) == len(done)

        # our account of who runs what agrees with the core's
        assert self.on_machine == {m.index: m.replica.id for m in core.machines if m.replica is not None}
        for m in core.machines:
            if m.index in self.on_machine:
                assert m.state is MachineState.BUSY

        if self.policy_name == "lpas_dg":  # the plan follows capacity: only up machines with a share
            for i, row in enumerate(core.policy.eligible):
                for j, ok in enumerate(row):
                    m = core.machines[j]
                    assert not ok or (m.is_up and m.cpu_share > 0.0 and RATES[i][j] > 0.0), (i, j, m)

        if self.policy_name in CONSERVING:
            self.check_work_conserving()

    def check_work_conserving(self):
        core = self.core
        policy = core.policy
        if self.policy_name == "lpas_dg":
            may_run = lambda i, j: policy.eligible[i][j]  # noqa: E731
        else:
            may_run = lambda i, j: RATES[i][j] > 0.0  # noqa: E731
        for m in core.ready_machines():
            for key, q in core.queues.items():
                for rec in q:
                    assert not may_run(rec.job_class, m.index), f"{m} idles while {rec} waits in queue {key}"
            if self.policy_name == "wqr_ft":
                for rec in core.running.values():
                    assert not (rec.live_replicas < 2 and may_run(rec.job_class, m.index)), (
                        f"{m} idles while {rec} has one replica"
                    )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_core_state_machine(name):
    run_state_machine_as_test(lambda: CoreMachine(name), settings=SETTINGS)


# ---------------------------------------------------------------- JobQueue


def _rec(i: int, t: float) -> JobRecord:
    return JobRecord(Job(i, 0, t), 0, t)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "remove", "requeue"]), st.floats(0, 2), st.integers(0, 50))))
def test_job_queue_keeps_submission_order(ops):
    """Arrivals in time order, removals anywhere, requeues of removed jobs: always sorted by (submitted, id)."""
    q = JobQueue(0)
    now = 0.0
    inside: dict[int, JobRecord] = {}
    out: dict[int, JobRecord] = {}
    next_id = 0
    for op, dt, pick in ops:
        if op == "append":
            now += dt
            rec = _rec(next_id, now)
            next_id += 1
            q.append(rec)
            inside[rec.id] = rec
        elif op == "remove" and inside:
            rec = inside.pop(sorted(inside)[pick % len(inside)])
            q.remove(rec)
            out[rec.id] = rec
        elif op == "requeue" and out:
            rec = out.pop(sorted(out)[pick % len(out)])
            q.requeue(rec)
            inside[rec.id] = rec
        expected = sorted(inside.values(), key=lambda r: (r.submitted, r.id))
        assert list(q) == expected
        assert len(q) == len(expected) and bool(q) == bool(expected)
        assert q.head is (expected[0] if expected else None)
        for i in range(next_id):
            assert (i in q) == (i in inside)
