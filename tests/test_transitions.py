"""The transition table (mgst.core.transitions), walked row by row: the core is driven into each row's
state, the row's event happens, and the record must then be in the row's new state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from mgst.core import Assign, Cancel, JobRecord, MachineRecord, PolicyError, ReplicaRecord, Scheduler, TimeOut
from mgst.core.decisions import SuspectDown
from mgst.core.transitions import (
    BUSY,
    CANCELLED,
    COMPUTING,
    DONE,
    DOWN,
    FAILED,
    FREE,
    GIVEN_UP,
    JOB,
    JOB_DONE,
    LIVE,
    LOST,
    MACHINE,
    NEW,
    QUEUED,
    READY,
    REPLICA,
    RUNNING,
    STAGING,
    TABLE,
    TIMED_OUT,
    UP,
    WAITING,
    events,
    state_of,
    states,
)
from mgst.model import Availability, Job, JobClass, Machine, StagingModel
from mgst.policies.base import Policy

# M0 has one slot; M1 three: a machine that asks while it runs, and releases one replica of several; M2 two
# slots and one cpu: its second replica waits on the host.
MACHINES = (Machine("M0", (1.0,)), Machine("M1", (1.0,), slots=3), Machine("M2", (1.0,), slots=2, cpus=1))
SIZE = 100.0  # long enough that no replica is due during a walk


class Walker(Policy):
    """Decides only what the test hands it (after the next event); a job may run three replicas at once."""

    name = "test-walker"
    hooks = frozenset({"on_event"})
    max_replicas = 3

    def __init__(self) -> None:
        super().__init__()
        self.todo: list = []

    def on_event(self, view: Any, event: Any) -> list:
        todo, self.todo = self.todo, []
        return todo


class RunOnWalker(Walker):
    """The Walker, letting a job's other replicas run on when one completes it."""

    name = "test-walker-run-on"
    cancel_losers = False


class Walk:
    """A started core in check mode, and the steps that drive it (each event one time unit later)."""

    def __init__(self, staging: StagingModel | None = None, run_on: bool = False):
        self.core = Scheduler([JobClass("c", 1.0)], MACHINES, RunOnWalker() if run_on else Walker(), staging,
                              check=True)
        self.core.start(0.0)
        self.now = 0.0
        self.next_id = 1

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def decide(self, *decisions: Any) -> None:
        """The policy decides, after the next event (a timer that is not due: counted stale)."""
        self.core.policy.todo.extend(decisions)
        self.core.timer_fired(self.tick(), "nothing")

    def arrive(self) -> JobRecord:
        job = Job(self.next_id, 0, self.now, SIZE)
        self.next_id += 1
        self.core.job_arrived(self.tick(), job)
        return self.core.jobs[job.id]

    def up(self, j: int) -> MachineRecord:
        self.core.machine_up(self.tick(), j)
        return self.core.machines[j]

    def ask(self, j: int, slots: int | None = None) -> None:
        self.core.machine_ready(self.tick(), j, None, slots)

    def run(self, j: int, rec: JobRecord | None = None, asked: int | None = 1) -> ReplicaRecord:
        """A replica of ``rec`` (a new job) on machine ``j``, up and asking for ``asked`` slots first."""
        if not self.core.machines[j].is_up:
            self.up(j)
        if not self.core.machines[j].asking:
            self.ask(j, asked)
        rec = rec if rec is not None else self.arrive()
        self.decide(Assign(rec.job, j))
        return rec.history[-1]

    def machine_in(self, state: Any, j: int = 0) -> MachineRecord:
        m = self.core.machines[j]
        if state is not DOWN:
            self.up(j)
        if state is READY:
            self.ask(j)
        elif state is BUSY:
            self.run(j)
        return m

    def replica_in(self, state: Any) -> ReplicaRecord:
        """A replica of a job that runs no other, on M0, in ``state`` (a live phase or how it ended)."""
        if state == WAITING:  # the second of two replicas on M2, whose one cpu the first holds
            self.up(2)
            self.ask(2, 2)
            first = self.run(2, asked=None)
            if first.phase == STAGING:
                self.core.replica_computing(self.tick(), first.id)
            r = self.run(2, asked=None)
            if r.phase == STAGING:
                self.core.replica_computing(self.tick(), r.id)
            assert r.phase == WAITING, r
            return r
        r = self.run(0)
        if state is COMPUTING and r.phase == STAGING:
            self.core.replica_computing(self.tick(), r.id)
        elif state in GIVEN_UP:
            END[state](self, r)
        return r


STAGED = StagingModel(start=(1.0, 2.0))  # every replica stages first

# How a live replica is made to end, by its outcome (the row's event).
END: dict[Any, Callable[[Walk, ReplicaRecord], None]] = {
    CANCELLED: lambda w, r: w.decide(Cancel(r.id)),
    LOST: lambda w, r: w.core.machine_down(w.tick(), r.machine),
    FAILED: lambda w, r: w.core.replica_failed(w.tick(), r.id),
    TIMED_OUT: lambda w, r: w.decide(TimeOut(r.id)),
}

# A scenario drives a fresh Walk into the row's state and returns (the record, or a getter of it while the
# core holds none yet: NEW; the event).
Scenario = Callable[[], tuple[Callable[[], Any], Walk, Callable[[], Any]]]
SCENARIOS: dict[tuple[str, Any, str], Scenario] = {}


def scenario(kind: str, state: Any, event: str, staging: StagingModel | None = None, run_on: bool = False):
    def register(make: Callable[[Walk], tuple[Callable[[], Any], Callable[[], Any]]]):
        def run() -> tuple[Callable[[], Any], Walk, Callable[[], Any]]:
            w = Walk(staging, run_on)
            get, fire = make(w)
            return get, w, fire

        SCENARIOS[(kind, state, event)] = run
        return make

    return register


def _fixed(record: Any) -> Callable[[], Any]:
    return lambda: record


# ------------------------------------------------------------------ jobs


@scenario(JOB, NEW, "arrive")
def _(w):
    job = Job(1, 0, 0.0, SIZE)
    return (lambda: w.core.jobs.get(1)), (lambda: w.core.job_arrived(w.tick(), job))


@scenario(JOB, QUEUED, "start")
def _(w):
    w.up(0)
    w.ask(0)
    rec = w.arrive()
    return _fixed(rec), lambda: w.decide(Assign(rec.job, 0))


@scenario(JOB, RUNNING, "start")
def _(w):
    r = w.run(0)
    w.up(1)
    w.ask(1)
    return _fixed(r.job), lambda: w.decide(Assign(r.job.job, 1))


@scenario(JOB, RUNNING, "result")
def _(w):
    r = w.run(0)
    return _fixed(r.job), lambda: w.core.replica_done(w.tick(), r.id)


@scenario(JOB, QUEUED, "result")
def _(w):
    r = w.run(0)
    w.core.machine_down(w.tick(), 0)  # requeued; its replica is lost, and its result would still count
    return _fixed(r.job), lambda: w.core.replica_done(w.tick(), r.id)


@scenario(JOB, RUNNING, "replica_ended")
def _(w):
    r = w.run(0)
    w.run(1, r.job)
    return _fixed(r.job), lambda: w.core.replica_failed(w.tick(), r.id)


@scenario(JOB, JOB_DONE, "loser_ended", run_on=True)
def _(w):
    r = w.run(0)
    loser = w.run(1, r.job)
    w.core.replica_done(w.tick(), r.id)  # the job is done; its replica on M1 runs on
    return _fixed(r.job), lambda: w.core.replica_done(w.tick(), loser.id)


@scenario(JOB, RUNNING, "last_replica_ended")
def _(w):
    r = w.run(0)
    return _fixed(r.job), lambda: w.core.replica_failed(w.tick(), r.id)


# ------------------------------------------------------------------ replicas


def _new_replica(w: Walk) -> tuple[Callable[[], Any], Callable[[], Any]]:
    w.up(0)
    w.ask(0)
    rec = w.arrive()
    return (lambda: rec.history[-1] if rec.history else None), lambda: w.decide(Assign(rec.job, 0))


scenario(REPLICA, NEW, "start")(_new_replica)
scenario(REPLICA, NEW, "start_staging", STAGED)(_new_replica)


@scenario(REPLICA, NEW, "start_waiting")
def _(w):
    w.up(2)
    w.ask(2, 2)
    w.run(2, asked=None)  # holds M2's one cpu
    rec = w.arrive()
    return (lambda: rec.history[-1] if rec.history else None), lambda: w.decide(Assign(rec.job, 2))


@scenario(REPLICA, STAGING, "computing_no_cpu", STAGED)
def _(w):
    w.up(2)
    w.ask(2, 2)
    first, second = w.run(2, asked=None), w.run(2, asked=None)
    w.core.replica_computing(w.tick(), first.id)  # takes M2's one cpu
    return _fixed(second), lambda: w.core.replica_computing(w.tick(), second.id)


@scenario(REPLICA, WAITING, "cpu_free")
def _(w):
    r = w.replica_in(WAITING)
    first = next(x for x in w.core.machines[2].replicas.values() if x is not r)
    return _fixed(r), lambda: w.core.replica_done(w.tick(), first.id)


def _live(state: Any, event: str, fire: Callable[[Walk, ReplicaRecord], Any]) -> None:
    @scenario(REPLICA, state, event, STAGED if state == STAGING else None)
    def _(w):
        r = w.replica_in(state)
        return _fixed(r), lambda: fire(w, r)


for _state in LIVE:
    _live(_state, "computing", lambda w, r: w.core.replica_computing(w.tick(), r.id))
    _live(_state, "share", lambda w, r: w.core.cpu_share_changed(w.tick(), r.machine, 0.5))
    _live(_state, "checkpoint", lambda w, r: w.core.replica_checkpoint(w.tick(), r.id, 0.5))
    _live(_state, "result", lambda w, r: w.core.replica_done(w.tick(), r.id))
    for _outcome, _event in ((CANCELLED, "cancel"), (LOST, "lose"), (FAILED, "fail"), (TIMED_OUT, "time_out")):
        _live(_state, _event, END[_outcome])
for _state in GIVEN_UP:
    _live(_state, "result", lambda w, r: w.core.replica_done(w.tick(), r.id))


def _loser(state: Any) -> None:
    """A replica in ``state`` whose job a sibling on M1 has done, the policy letting it run on: it delivers."""

    @scenario(REPLICA, state, "discard", STAGED if state == STAGING else None, run_on=True)
    def _(w):
        r = w.replica_in(state)
        sibling = w.run(1, r.job)
        w.core.replica_done(w.tick(), sibling.id)
        assert r.live and r.discarded
        return _fixed(r), lambda: w.core.replica_done(w.tick(), r.id)


for _state in LIVE:
    _loser(_state)


# ------------------------------------------------------------------ machines


def _machine(state: Any, event: str, fire: Callable[[Walk, MachineRecord], Any], j: int = 0) -> None:
    @scenario(MACHINE, state, event)
    def _(w):
        m = w.machine_in(state, j)
        return _fixed(m), lambda: fire(w, m)


for _state in (DOWN, *UP):
    _machine(_state, "up", lambda w, m: w.core.machine_up(w.tick(), m.index))
    _machine(_state, "share", lambda w, m: w.core.cpu_share_changed(w.tick(), m.index, 0.5))
    _machine(_state, "suspect", lambda w, m: w.decide(SuspectDown(m.index)))
for _state in UP:
    _machine(_state, "down", lambda w, m: w.core.machine_down(w.tick(), m.index))
RECLAIMED_STATE, UP_STATE = Availability.RECLAIMED, Availability.UP
for _state in (DOWN, FREE, BUSY):
    _machine(_state, "reclaim", lambda w, m: w.core.machine_availability(w.tick(), m.index, RECLAIMED_STATE, 0.5))

    @scenario(MACHINE, _state, "give_back")
    def _(w, state=_state):
        m = w.machine_in(state)
        w.core.machine_availability(w.tick(), m.index, RECLAIMED_STATE, 0.5)
        return _fixed(m), lambda: w.core.machine_availability(w.tick(), m.index, UP_STATE, 0.5)


_machine(FREE, "ask", lambda w, m: w.ask(m.index))
_machine(READY, "ask", lambda w, m: w.ask(m.index))
_machine(FREE, "ask_none", lambda w, m: w.ask(m.index, 0))
_machine(BUSY, "ask_none", lambda w, m: w.ask(m.index, 0))  # a one-slot machine asking for 0 keeps its replica
_machine(READY, "withdraw_idle", lambda w, m: w.ask(m.index, 0))
_machine(READY, "fill_last", lambda w, m: w.decide(Assign(w.arrive().job, m.index)))
_machine(BUSY, "release_last", lambda w, m: w.core.replica_done(w.tick(), m.replica.id))


def _three_slots(event: str, replicas: int, asked: int, fire: Callable[[Walk, MachineRecord, list], Any]) -> None:
    """M1 (three slots) running ``replicas`` replicas and asking for ``asked`` more slots."""

    @scenario(MACHINE, READY if asked else BUSY, event)
    def _(w):
        m = w.up(1)
        w.ask(1, replicas)
        runs = [w.run(1) for _ in range(replicas)]
        if asked:
            w.ask(1, asked)
        return _fixed(m), lambda: fire(w, m, runs)


_three_slots("ask", 1, 0, lambda w, m, runs: w.ask(1, 1))
_three_slots("withdraw_busy", 1, 1, lambda w, m, runs: w.ask(1, 0))
_three_slots("release", 2, 0, lambda w, m, runs: w.core.replica_done(w.tick(), runs[0].id))
_three_slots("release", 2, 1, lambda w, m, runs: w.core.replica_done(w.tick(), runs[0].id))
_three_slots("release_last", 1, 1, lambda w, m, runs: w.core.replica_done(w.tick(), runs[0].id))
_three_slots("fill", 0, 2, lambda w, m, runs: w.decide(Assign(w.arrive().job, 1)))


def _name(row: tuple[str, Any, str]) -> str:
    kind, state, event = row
    return f"{kind}-{state if isinstance(state, str) else state.name}-{event}"


def test_every_row_has_a_walk_and_every_walk_a_row():
    assert set(SCENARIOS) == set(TABLE)


@pytest.mark.parametrize("row", sorted(TABLE, key=_name), ids=_name)
def test_each_row_of_the_table_is_what_the_core_does(row):
    """Into the row's state, then its event: the record ends in the row's new state (check mode also looks
    up every transition the core makes on the way, and check_invariants each record's last one)."""
    kind, state, _ = row
    get, w, fire = SCENARIOS[row]()
    record = get()
    assert (NEW if record is None else state_of(kind, record)) == state, "the walk did not reach the row's state"
    w.core.check_invariants()
    fire()
    record = get()
    assert record is not None and state_of(kind, record) == TABLE[row][0]
    w.core.check_invariants()


# ------------------------------------------------------------------ what is not a row does not happen


def _done_job(w: Walk) -> ReplicaRecord:
    r = w.run(0)
    w.core.replica_done(w.tick(), r.id)
    return r


REFUSED: dict[tuple[str, Any, str], Callable[[Walk], tuple[Any, Callable[[], Any]]]] = {
    # a policy's decision that is not a row is a PolicyError
    (JOB, JOB_DONE, "start"): lambda w: (
        (r := _done_job(w)).job, lambda: (w.ask(0), w.decide(Assign(r.job.job, 0)))
    ),
    (MACHINE, FREE, "fill_last"): lambda w: (w.machine_in(FREE), lambda: w.decide(Assign(w.arrive().job, 0))),
    (REPLICA, CANCELLED, "cancel"): lambda w: ((r := w.replica_in(CANCELLED)), lambda: w.decide(Cancel(r.id))),
    (REPLICA, LOST, "time_out"): lambda w: ((r := w.replica_in(LOST)), lambda: w.decide(TimeOut(r.id))),
}
STALE: dict[tuple[str, Any, str], Callable[[Walk], tuple[Any, Callable[[], Any]]]] = {
    # a driver's event that is not a row is counted stale
    (REPLICA, DONE, "result"): lambda w: (
        (r := _done_job(w)), lambda: w.core.replica_done(w.tick(), r.id)
    ),
    (MACHINE, DOWN, "down"): lambda w: (w.core.machines[0], lambda: w.core.machine_down(w.tick(), 0)),
    (REPLICA, LOST, "computing"): lambda w: (
        (r := w.replica_in(LOST)), lambda: w.core.replica_computing(w.tick(), r.id)
    ),
    (REPLICA, FAILED, "checkpoint"): lambda w: (
        (r := w.replica_in(FAILED)), lambda: w.core.replica_checkpoint(w.tick(), r.id, 0.5)
    ),
}


@pytest.mark.parametrize("row", sorted(REFUSED, key=_name), ids=_name)
def test_a_decision_that_is_not_a_row_is_refused(row):
    kind, state, event = row
    assert row not in TABLE and event in events(kind) and state in states(kind)
    w = Walk()
    record, fire = REFUSED[row](w)
    assert state_of(kind, record) == state
    with pytest.raises(PolicyError):
        fire()
    assert state_of(kind, record) == state


@pytest.mark.parametrize("row", sorted(STALE, key=_name), ids=_name)
def test_an_event_that_is_not_a_row_is_stale_and_changes_nothing(row):
    kind, state, event = row
    assert row not in TABLE and event in events(kind) and state in states(kind)
    w = Walk()
    record, fire = STALE[row](w)
    assert state_of(kind, record) == state
    stale = w.core.stale_events
    fire()
    assert state_of(kind, record) == state and w.core.stale_events == stale + 1
    w.core.check_invariants()


def test_check_mode_stops_a_transition_the_table_lacks_where_it_is_made(monkeypatch):
    """Without the row, the core in check mode fails at the transition itself, not later."""
    monkeypatch.delitem(TABLE, (MACHINE, BUSY, "release_last"))
    get, w, fire = SCENARIOS[(MACHINE, BUSY, "release_last")]()
    with pytest.raises(AssertionError, match="machine BUSY --release_last--> FREE: no such transition"):
        fire()


def test_check_invariants_finds_a_state_changed_by_no_transition():
    w = Walk()
    r = w.replica_in(COMPUTING)
    r.phase = STAGING  # as a bug in the core would: not through the Lifecycle
    with pytest.raises(AssertionError, match="last transition left it COMPUTING|last transition left it computing"):
        w.core.check_invariants()
