"""The scheduling core under random event sequences (hypothesis): its invariants, checked from outside."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest
from helpers import Gang, make_policy, new_core, of
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from mgst.core import (
    Assign,
    BagArrived,
    BagCompleted,
    Cancel,
    CancelTimer,
    CpuShareChanged,
    Eta,
    Hold,
    JobCompleted,
    JobQueue,
    JobRecord,
    JobRequeued,
    JobStatus,
    MachineState,
    MachineSuspected,
    Outcome,
    Output,
    ReplicaComputing,
    ReplicaTimedOut,
    Scheduler,
    SetTimer,
    SuspectDown,
    TimeOut,
)
from mgst.model import Bag, Job, JobClass, Machine, StagingModel
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
            elif t is Eta:  # a replica's end moved (staging over, a share change), never into the past; it may be
                # one a driver already knows gone (a machine that asks while running it: lost in the same event)
                assert o.replica in self.replica_job, o
                assert o.at >= self.now, o
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



def test_job_queue_drops_the_jobs_that_left_its_front():
    """A long run of arrivals and departures from the front (some from the middle too): the queue keeps
    its order, and the jobs that left the front of its arrival-order list are at most half of it once
    the next job arrives (it drops them on an arrival, never on a removal: see the next test)."""
    q = JobQueue(0)
    waiting: list[JobRecord] = []
    for i in range(3000):
        rec = _rec(i, float(i))
        q.append(rec)
        assert q._first <= max(32, len(q._main) // 2)  # what left the front is dropped, not kept
        waiting.append(rec)
        if i % 3 == 2:  # two leave from the front for every three arrivals...
            for _ in range(2):
                q.remove(waiting.pop(0))
        if i % 7 == 6 and len(waiting) > 2:  # ...and now and then one from the middle
            q.remove(waiting.pop(len(waiting) // 2))
        assert q.head is waiting[0]
    assert list(q) == waiting and len(q) == len(waiting)
    while waiting:
        q.remove(waiting.pop(0))
        assert q.head is (waiting[0] if waiting else None)
    assert not q and list(q) == []



def test_a_job_queue_may_lose_the_jobs_it_is_iterating_over():
    """A dispatch that assigns the jobs it iterates over removes each from the queue as it goes: every
    waiting job still comes once, in order, however many left the front before (no list shifts)."""
    q = JobQueue(0)
    recs = [_rec(i, float(i)) for i in range(500)]
    for rec in recs[:100]:
        q.append(rec)
    for rec in recs[:90]:  # 90 left the front: the list keeps them until the next arrival
        q.remove(rec)
    for rec in recs[100:]:
        q.append(rec)
    seen = []
    for rec in q:
        seen.append(rec)
        q.remove(rec)
    assert seen == recs[90:] and not q and q.head is None


# ---------------------------------------------------------------- the opened core
#
# Bags (or single jobs: never both in one run), machines of 1-3 slots asking for random slot counts,
# work tracked through share changes (0 suspends), staging, policy time-outs and suspicions. The
# state machine keeps its own account of live replicas, remaining work, completions and bags, from
# the events it sends and the outputs it gets, and compares it with the core's after every step.

OPEN_RATES = ((1.0, 2.0, 0.0, 1.0), (0.5, 0.0, 1.0, 2.0))  # classes x machines
OPEN_SLOTS = (1, 2, 3, 1)
N_OPEN = len(OPEN_SLOTS)
TIME_LIMIT = 4.0  # the test policy gives up on a replica this long after it starts
SUSPECT_EVERY = 3  # ...and suspects its machine down at every third time-out there
STAGINGS = {
    "none": None,
    "resume": StagingModel(resume=(240.0, 720.0)),
    "start": StagingModel(start=(1.0, 2.0)),
    "both": StagingModel(resume=(240.0, 720.0), start=(1.0, 2.0)),
}
OPEN_SETTINGS = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
OPEN_MACHINE = st.integers(0, N_OPEN - 1)
SIZE = st.sampled_from([0.5, 1.0, 2.0, 4.0])
TASK = st.tuples(st.integers(0, N_CLASSES - 1), SIZE)


class TimingOut(Policy):
    """The oldest queued job the machine can run (then, replicating, the oldest running one);
    a per-replica time-out of TIME_LIMIT; the machine of every SUSPECT_EVERY-th time-out suspected down."""
    hooks = frozenset({"on_replica_start", "on_replica_end", "on_timer", "choose"})

    name = "test-timing-out"

    def __init__(self, max_replicas: int) -> None:
        super().__init__()
        self.max_replicas = max_replicas

    def choose(self, view, machine):
        rates = machine.rates
        waiting = [r for q in view.queues.values() for r in q if rates[r.job_class] > 0]
        if waiting:
            return min(waiting, key=lambda r: (r.submitted, r.id))
        if self.max_replicas > 1:
            running = [
                r for r in view.running.values() if r.live_replicas < self.max_replicas and rates[r.job_class] > 0
                and all(x.machine != machine.index for x in r.replicas.values())  # one replica per machine
            ]
            return min(running, key=lambda r: (r.submitted, r.id)) if running else None
        return None

    def on_replica_start(self, view, replica):
        return [SetTimer(("to", replica.id), view.now + TIME_LIMIT)]

    def on_replica_end(self, view, replica):
        return [CancelTimer(("to", replica.id))]

    def on_timer(self, view, key):
        _, rid = key
        r = view.replica(rid)
        if r is None:
            return
        yield TimeOut(rid)
        m = view.machines[r.machine]
        if m.is_up and m.stats.timed_out % SUSPECT_EVERY == 0:
            yield SuspectDown(m.index)


class OpenCoreMachine(RuleBasedStateMachine):
    """Drives the opened core as a driver would; ``bags``: work arrives as bags, else as single jobs."""

    def __init__(self, bags: bool):
        super().__init__()
        self.bags = bags
        self.core: Scheduler | None = None
        self.now = 0.0
        self.next_id = 1
        self.next_bag = 0
        self.arrived: dict[int, Job] = {}
        self.bag_tasks: dict[int, list[int]] = {}
        self.bag_done_at: dict[int, float] = {}
        self.completed_at: dict[int, float] = {}
        self.live: dict[int, int] = {}  # live replica -> machine
        self.replica_job: dict[int, int] = {}  # every replica ever assigned -> job id
        self.replica_machine: dict[int, int] = {}
        self.given_up: set[int] = set()  # replicas lost, failed or timed out whose result may still count
        self.best: dict[int, float] = {}  # job -> best checkpoint sent for a live replica
        self.share = [1.0] * N_OPEN  # the last share reported for each machine
        self.work: dict[int, list] = {}  # live replica -> [left, rate, staging, at]
        self.timers: dict = {}
        self.arriving_bag: int | None = None

    @initialize(staging=st.sampled_from(sorted(STAGINGS)), replicas=st.sampled_from([1, 2]))
    def build(self, staging, replicas):
        self.staging = staging
        classes = [JobClass(f"c{i}", 0.0) for i in range(N_CLASSES)]
        machines = [
            Machine(f"M{j}", tuple(row[j] for row in OPEN_RATES), 1.0, OPEN_SLOTS[j]) for j in range(N_OPEN)
        ]
        self.core = Scheduler(classes, machines, TimingOut(replicas), staging=STAGINGS[staging], check=True)
        self.absorb(self.core.start(0.0))
        for j in range(N_OPEN):  # every machine asks for all its slots
            self.ask(0.0, j, None, None)

    # ------------------------------------------------------------ plumbing

    def tick(self, dt: float) -> float:
        """Move time on; the work of every live replica advances at its rate."""
        now = self.now + dt
        for w in self.work.values():
            w[0] = max(0.0, w[0] - w[1] * (now - w[3]))
            w[3] = now
        self.now = now
        return now

    def rate(self, rid: int) -> float:
        job = self.arrived[self.replica_job[rid]]
        j = self.replica_machine[rid]
        return OPEN_RATES[job.job_class][j] * self.share[j]

    def set_share(self, j: int, share: float | None) -> None:
        if share is None:
            return
        self.share[j] = share
        for rid, w in self.work.items():
            if self.live[rid] == j and not w[2]:
                w[1] = self.rate(rid)

    def end(self, rid: int, given_up: bool) -> None:
        del self.live[rid]
        del self.work[rid]
        if given_up:
            self.given_up.add(rid)

    def end_all_on(self, j: int) -> None:
        for rid in [rid for rid, m in self.live.items() if m == j]:
            self.end(rid, True)

    def on(self, j: int) -> int:
        return sum(1 for m in self.live.values() if m == j)

    def absorb(self, out: list[Output]) -> None:
        """Check each output against our own account, then update it."""
        completed_now: list[int] = []
        cancelled: list[int] = []  # jobs of cancelled replicas: the policy cancels nothing, the core siblings
        for o in out:
            t = type(o)
            if t is Assign:
                rid, j, jid = o.replica, o.machine, o.job.id
                assert rid not in self.replica_job, f"replica id {rid} reused"
                assert jid in self.arrived and jid not in self.completed_at, o
                assert self.on(j) < OPEN_SLOTS[j], f"{o}: machine {j} already runs {self.on(j)} replicas"
                assert o.progress == self.best.get(jid, 0.0), (o, self.best.get(jid))
                expected_staging = {
                    "none": False, "resume": o.progress > 0.0, "start": True, "both": True,
                }[self.staging]
                assert o.staging == expected_staging, (o, self.staging)
                self.live[rid] = j
                self.replica_job[rid] = jid
                self.replica_machine[rid] = j
                size = self.arrived[jid].size
                self.work[rid] = [(1.0 - o.progress) * size, 0.0 if o.staging else self.rate(rid), o.staging, self.now]
            elif t is Cancel:
                assert self.live.get(o.replica) == o.machine, (o, self.live)
                assert self.replica_job[o.replica] == o.job_id
                cancelled.append(o.job_id)
                self.end(o.replica, False)
            elif t is ReplicaTimedOut:
                assert self.live.get(o.replica) == o.machine, (o, self.live)
                assert self.replica_job[o.replica] == o.job_id
                self.end(o.replica, True)
            elif t is MachineSuspected:
                self.end_all_on(o.machine)
            elif t is JobCompleted:
                jid = o.job.id
                assert jid not in self.completed_at, f"job {jid} completed twice"
                assert self.replica_job[o.replica] == jid and self.replica_machine[o.replica] == o.machine
                self.completed_at[jid] = self.now
                completed_now.append(jid)
                if o.replica in self.live:
                    self.end(o.replica, False)
                else:
                    assert o.replica in self.given_up, o
                    self.given_up.discard(o.replica)
            elif t is JobRequeued:
                assert self.replica_job[o.replica] == o.job.id
            elif t is BagCompleted:
                b = o.bag
                assert b in self.bag_tasks and b not in self.bag_done_at, o
                tasks = self.bag_tasks[b]
                assert all(tid in self.completed_at for tid in tasks), (o, tasks)
                if tasks:  # at the instant of its last task, in the outputs of the event that completed it
                    assert max(self.completed_at[tid] for tid in tasks) == self.now
                    assert any(tid in completed_now for tid in tasks), (o, completed_now)
                else:
                    assert self.arriving_bag == b, o
                self.bag_done_at[b] = self.now
            elif t is Hold:
                assert self.core.is_ready(o.machine)
            elif t is SetTimer:
                _, rid = o.key
                assert rid in self.live and o.at == self.now + TIME_LIMIT, o
                self.timers[o.key] = o.at
            elif t is CancelTimer:
                self.timers.pop(o.key, None)
            elif t is Eta:  # a replica's end moved (staging over, a share change), never into the past; it may be
                # one a driver already knows gone (a machine that asks while running it: lost in the same event)
                assert o.replica in self.replica_job, o
                assert o.at >= self.now, o
            else:
                raise AssertionError(f"unexpected output {o!r}")
        assert set(cancelled) <= set(completed_now), (cancelled, completed_now)
        # no live replica survives its job
        assert not any(self.replica_job[rid] in self.completed_at for rid in self.live)

    # ------------------------------------------------------------ arrivals

    @precondition(lambda self: self.bags)
    @rule(dt=DT, n=st.integers(0, 5), data=st.data())
    def bag_arrives(self, dt, n, data):
        tasks = data.draw(st.lists(TASK, min_size=n, max_size=n))
        now = self.tick(dt)
        b = self.next_bag
        self.next_bag += 1
        jobs = []
        for cls, size in tasks:
            jobs.append(Job(self.next_id, cls, now, size, b))
            self.next_id += 1
        for jb in jobs:
            self.arrived[jb.id] = jb
        self.bag_tasks[b] = [jb.id for jb in jobs]
        self.arriving_bag = b
        out = self.core.handle(now, BagArrived(Bag(b, now, tuple(jobs))))
        self.absorb(out)
        self.arriving_bag = None
        assert (BagCompleted(b) in out) == (not jobs)
        rec = self.core.all_bags[b]
        assert self.core.last_bag is rec and rec.submitted == now
        assert rec.first_dispatch == (now if any(type(o) is Assign for o in out) else None)

    @precondition(lambda self: not self.bags)
    @rule(dt=DT, cls=st.integers(0, N_CLASSES - 1), size=SIZE)
    def job_arrives(self, dt, cls, size):
        now = self.tick(dt)
        jb = Job(self.next_id, cls, now, size)
        self.next_id += 1
        self.arrived[jb.id] = jb
        self.absorb(self.core.job_arrived(now, jb))

    # ------------------------------------------------------------ machines

    def ask(self, now: float, j: int, slots: int | None, share: float | None) -> None:
        m = self.core.machines[j]
        restart = m.is_up and m.slots == 1 and bool(m.replicas) and (slots is None or slots > 0)
        free = m.slots - len(m.replicas) + restart
        want = free if slots is None or slots > free else slots
        if (share if share is not None else self.share[j]) <= 0.0:  # no CPU to give: it asks for nothing
            want = 0
        stale = self.core.stale_events
        if restart:  # a one-slot machine asking while it runs a replica: that replica is gone
            self.end_all_on(j)
        self.set_share(j, share)
        out = self.core.machine_ready(now, j, share, slots)
        self.absorb(out)
        assert self.core.stale_events == stale + (not restart and slots is not None and slots > free)
        assert m.is_up and not m.suspected
        assert m.asking + sum(1 for o in out if type(o) is Assign and o.machine == j) == want, (m, out)
        assert (Hold(j) in out) == (m.asking > 0)

    @rule(dt=DT, j=OPEN_MACHINE, slots=st.sampled_from([None, None, 0, 1, 2, 3]), share=SHARE)
    def ready(self, dt, j, slots, share):
        self.ask(self.tick(dt), j, slots, share)

    @rule(dt=DT, j=OPEN_MACHINE, up=st.booleans(), share=SHARE)
    def down_or_up(self, dt, j, up, share):
        now = self.tick(dt)
        m = self.core.machines[j]
        if up:
            self.set_share(j, share)
            self.absorb(self.core.machine_up(now, j, share))
            assert m.is_up and not m.suspected
            return
        was_down = not m.is_up
        stale = self.core.stale_events
        self.end_all_on(j)
        self.absorb(self.core.machine_down(now, j))
        assert m.state is MachineState.DOWN and not m.replicas and m.asking == 0
        assert self.core.stale_events == stale + was_down

    @rule(dt=DT, j=OPEN_MACHINE, share=st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0]))
    def share_changes(self, dt, j, share):
        now = self.tick(dt)
        self.set_share(j, share)
        self.absorb(self.core.handle(now, CpuShareChanged(j, share)))
        assert self.core.machines[j].cpu_share == share
        if share <= 0.0:  # a machine with no CPU to give keeps no place in the ready queue
            assert not self.core.machines[j].asking and not self.core.is_ready(j)

    # ------------------------------------------------------------ replicas

    @precondition(lambda self: self.live)
    @rule(dt=DT, data=st.data(), ready=st.booleans())
    def done(self, dt, data, ready):
        self.finish(data.draw(st.sampled_from(sorted(self.live))), dt, ready)

    @precondition(lambda self: self.live)
    @rule(dt=DT, ready=st.booleans())
    def first_done(self, dt, ready):
        """The replica due first completes, at its eta (if it has one: not staging, not suspended)."""
        rid = min(self.live, key=lambda rid: (self.core.replica(rid).eta(self.now), rid))
        eta = self.core.replica(rid).eta(self.now)
        self.finish(rid, max(dt, eta - self.now) if eta < math.inf else dt, ready)

    def finish(self, rid: int, dt: float, ready: bool) -> None:
        now = self.tick(dt)
        jid = self.replica_job[rid]
        out = self.core.replica_done(now, rid, ready)
        self.absorb(out)
        assert of(out, JobCompleted) == [JobCompleted(self.arrived[jid], rid, self.replica_machine[rid])]

    @precondition(lambda self: self.live)
    @rule(dt=DT, data=st.data(), reason=st.sampled_from(["failed", "timeout"]))
    def failed(self, dt, data, reason):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        now = self.tick(dt)
        job = self.core.jobs[self.replica_job[rid]]
        timeouts = job.timeouts
        self.end(rid, True)
        out = self.core.replica_failed(now, rid, reason)
        self.absorb(out)
        assert job.timeouts == timeouts + (reason == "timeout")
        assert of(out, ReplicaTimedOut) == []  # the driver decided it: no notice
        r = next(r for r in job.history if r.id == rid)
        assert r.outcome is (Outcome.TIMED_OUT if reason == "timeout" else Outcome.FAILED) and r.ended == now

    @precondition(lambda self: any(w[2] for w in self.work.values()))
    @rule(dt=DT, data=st.data())
    def computing(self, dt, data):
        rid = data.draw(st.sampled_from(sorted(rid for rid, w in self.work.items() if w[2])))
        now = self.tick(dt)
        stale = self.core.stale_events
        self.absorb(self.core.handle(now, ReplicaComputing(rid)))
        w = self.work[rid]
        w[1], w[2] = self.rate(rid), False
        assert self.core.replica(rid).phase == "computing" and self.core.stale_events == stale

    @precondition(lambda self: self.live)
    @rule(dt=DT, data=st.data(), progress=st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    def checkpoint(self, dt, data, progress):
        rid = data.draw(st.sampled_from(sorted(self.live)))
        now = self.tick(dt)
        self.absorb(self.core.replica_checkpoint(now, rid, progress))
        jid = self.replica_job[rid]
        raised = progress > self.best.get(jid, 0.0)
        self.best[jid] = max(self.best.get(jid, 0.0), progress)
        assert self.core.jobs[jid].best_progress == self.best[jid]
        assert not raised or self.core.replica(rid).best

    @precondition(lambda self: len(self.replica_job) > len(self.live))
    @rule(dt=DT, data=st.data(), ready=st.booleans())
    def late_done(self, dt, data, ready):
        """A result for a replica that is not live: given up on (taken once, while its job is not done) or not."""
        rid = data.draw(st.sampled_from(sorted(set(self.replica_job) - set(self.live))))
        jid = self.replica_job[rid]
        accepted = rid in self.given_up and jid not in self.completed_at
        assert self.core.accepts_result(rid) == accepted
        now = self.tick(dt)
        stale = self.core.stale_events
        out = self.core.replica_done(now, rid, ready)
        self.absorb(out)
        completed = of(out, JobCompleted)
        if accepted:
            assert completed == [JobCompleted(self.arrived[jid], rid, self.replica_machine[rid])]
            assert self.core.stale_events == stale
            r = next(r for r in self.core.jobs[jid].history if r.id == rid)
            assert r.late and r.outcome is Outcome.DONE and r.ended == now
        else:
            assert completed == [] and self.core.stale_events == stale + 1

    @precondition(lambda self: self.timers)
    @rule(dt=DT, data=st.data())
    def timer(self, dt, data):
        """A per-replica time-out fires, when due (time jumps to it if need be)."""
        assert self.timers == self.core.timers
        key = data.draw(st.sampled_from(sorted(self.timers)))
        at = self.timers.pop(key)
        now = self.tick(max(dt, at - self.now))
        _, rid = key
        j, job = self.live[rid], self.core.jobs[self.replica_job[rid]]
        timeouts = job.timeouts
        out = self.core.timer_fired(now, key)
        self.absorb(out)
        assert ReplicaTimedOut(rid, j, job.id) in out and job.timeouts == timeouts + 1
        m = self.core.machines[j]
        assert (MachineSuspected(j) in out) == (m.stats.timed_out % SUSPECT_EVERY == 0)
        assert m.suspected == (MachineSuspected(j) in out)

    @rule(dt=DT, kind=st.sampled_from(["computing", "checkpoint", "timer", "arrival"]), data=st.data())
    def stale(self, dt, kind, data):
        """An event about something over or unknown: counted stale, and nothing changes."""
        over = sorted(set(self.replica_job) - set(self.live)) + [UNKNOWN_REPLICA]
        now = self.tick(dt)
        stale = self.core.stale_events
        if kind == "computing":
            out = self.core.replica_computing(now, data.draw(st.sampled_from(over)))
        elif kind == "checkpoint":
            out = self.core.replica_checkpoint(now, data.draw(st.sampled_from(over)), 0.5)
        elif kind == "timer":
            out = self.core.timer_fired(now, ("to", data.draw(st.sampled_from(over))))
        elif self.bags and self.bag_tasks:
            b = data.draw(st.sampled_from(sorted(self.bag_tasks)))
            out = self.core.bag_arrived(now, Bag(b, now, (Job(UNKNOWN_REPLICA, 0, now, 1.0, b),)))
        elif self.arrived:
            out = self.core.job_arrived(now, self.arrived[data.draw(st.sampled_from(sorted(self.arrived)))])
        else:
            return
        assert out == [] and self.core.stale_events == stale + 1

    # ------------------------------------------------------------ invariants

    @invariant()
    def consistent(self):
        core = self.core
        if core is None:  # before build
            return
        core.check_invariants()
        now = self.now

        # no job lost: every job that arrived is queued, running or done, exactly one of them
        assert set(core.jobs) == set(self.arrived)
        queued = [r.id for q in core.queues.values() for r in q]
        assert len(queued) == len(set(queued)), "a job queued twice"
        running = set(core.running)
        done = {jid for jid, r in core.jobs.items() if r.status is JobStatus.DONE}
        assert not (set(queued) & running) and not (set(queued) & done) and not (running & done)
        assert set(queued) | running | done == set(self.arrived)
        assert done == set(self.completed_at)  # completed once each (absorb counts), and only those
        for jid, t in self.completed_at.items():
            assert core.jobs[jid].completed == t

        # live replicas: ours are the core's, and no machine runs more than its slots
        assert self.live == {r.id: r.machine for r in core.live_replicas()}
        for m in core.machines:
            assert len(m.replicas) <= m.slots == OPEN_SLOTS[m.index]
            assert self.on(m.index) == len(m.replicas)

        # work: remaining, rate and eta as worked out from the events alone
        for rid, (left, rate, staging, _) in self.work.items():
            r = core.replica(rid)
            assert r.phase == ("staging" if staging else "computing")
            assert math.isclose(r.rate, rate, rel_tol=1e-12, abs_tol=1e-12), (r, r.rate, rate)
            assert math.isclose(r.remaining(now), left, rel_tol=1e-9, abs_tol=1e-9), (r, r.remaining(now), left)
            if rate == 0.0:
                assert r.eta(now) == math.inf
            elif left > 1e-9:
                assert math.isclose(r.eta(now), now + left / rate, rel_tol=1e-9, abs_tol=1e-9)
            else:  # overdue: its result just has not come yet
                assert r.eta(now) <= now + 1e-9

        # bags: complete exactly when every task is; a complete bag leaves bags and queues
        if self.bags:
            assert not any(type(k) is not int for k in core.queues)  # tasks wait in bag queues only
        for b, tasks in self.bag_tasks.items():
            rec = core.all_bags[b]
            all_done = all(tid in self.completed_at for tid in tasks)
            assert (b in self.bag_done_at) == all_done
            assert rec.completed == self.bag_done_at.get(b)
            assert (b in core.bags) == (b in core.queues) == (not all_done)
            assert rec.size == len(tasks) and rec.done == sum(tid in self.completed_at for tid in tasks)

        # timers: ours are the core's, one per live replica at most, each for a live replica
        assert self.timers == core.timers
        for key in core.timers:
            assert key[1] in self.live, key


@pytest.mark.parametrize("bags", [True, False], ids=["bags", "jobs"])
def test_open_core_state_machine(bags):
    run_state_machine_as_test(lambda: OpenCoreMachine(bags), settings=OPEN_SETTINGS)
