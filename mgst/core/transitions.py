"""The life of jobs, replicas and machines as data: (kind, state, event) -> (new state, effect).

Conventions (as h11's _state.py keeps HTTP's):

- Three kinds of record change state. A JOB's state is its :class:`JobStatus`. A REPLICA's is its
  phase while it is live (STAGING: no work done yet; WAITING: on its host for one of the machine's
  ``cpus``, no work done, none charged; COMPUTING: at rate mu'_ij * a_j, which is 0, suspended, at a
  CPU share of 0; mgst.core.progress sets the rates) and its :class:`Outcome` once it has ended. A MACHINE's is its
  :class:`MachineState`; whether it is ``suspected`` or ``silent`` are flags, not states. NEW is
  the state of a job or a replica before the core holds it. A bag has no state of its own: its
  counters follow its tasks', and its last task DONE completes it.
- An event here is what happens to one record (a replica of the job starts, the machine's last
  asked slot is filled), not a driver's event: one driver event makes several transitions (a
  machine down loses each of its replicas, which may requeue their jobs). Where the new state
  depends on more than the state, the event's name says on what (``release_last``: the machine's
  last replica ended).
- Each row gives the new state, and in words the effect the core carries out with it.
- A (kind, state, event) that is not a row does not happen: the core refuses it (PolicyError for a
  policy's decision, ValueError for a driver's input) or counts it stale and changes nothing.
  Rows that keep the state are listed too: they say what the core accepts without a change.

mgst.core.lifecycle and mgst.core.arrivals make these transitions. In check mode (``Scheduler(...,
check=True)``, which the tests use) they look up every transition they make here, at the line that
makes it (:class:`Checker`), and ``Scheduler.check_invariants`` checks that every record is in the
state its last transition left it in. tests/test_transitions.py walks every row.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from mgst.core.state import COMPUTING, STAGING, WAITING, JobStatus, MachineState, Outcome

JOB: Final = "job"
REPLICA: Final = "replica"
MACHINE: Final = "machine"
NEW: Final = "new"

State = JobStatus | MachineState | Outcome | str

QUEUED, RUNNING, JOB_DONE = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.DONE
DOWN, FREE, READY, BUSY = MachineState.DOWN, MachineState.FREE, MachineState.READY, MachineState.BUSY
DONE, CANCELLED, LOST, FAILED, TIMED_OUT, DISCARDED = (
    Outcome.DONE, Outcome.CANCELLED, Outcome.LOST, Outcome.FAILED, Outcome.TIMED_OUT, Outcome.DISCARDED,
)
LIVE: Final = (STAGING, WAITING, COMPUTING)
GIVEN_UP: Final = (CANCELLED, LOST, FAILED, TIMED_OUT)  # ended without a result; a late one may still count
UP: Final = (FREE, READY, BUSY)

# How a live replica ended -> the event of its ending.
END_EVENT: Final = {
    DONE: "result", CANCELLED: "cancel", LOST: "lose", FAILED: "fail", TIMED_OUT: "time_out", DISCARDED: "discard",
}

TABLE: Final[dict[tuple[str, State, str], tuple[State, str]]] = {
    # ---- jobs
    (JOB, NEW, "arrive"): (QUEUED, "enters its queue, at the back (its bag counts it queued)"),
    (JOB, QUEUED, "start"): (
        RUNNING, "leaves its queue, its idle time stops, joins running (its bag's too: first dispatch)"
    ),
    (JOB, RUNNING, "start"): (RUNNING, "another replica: at most max_replicas, never two on one machine"),
    (JOB, RUNNING, "result"): (
        JOB_DONE, "its live siblings are cancelled (or run on as losers, if the policy says so); leaves running; its "
                  "bag counts it done (the last completes it)"
    ),
    (JOB, JOB_DONE, "loser_ended"): (JOB_DONE, "a replica that ran on after the job was done ended: nothing changes"),
    (JOB, QUEUED, "result"): (JOB_DONE, "a replica given up on delivered after all: leaves its queue"),
    (JOB, RUNNING, "replica_ended"): (RUNNING, "a replica ended without a result; another still runs"),
    (JOB, RUNNING, "last_replica_ended"): (
        QUEUED, "its last live replica ended without a result: requeued in submission order (JobRequeued)"
    ),
    # ---- replicas
    (REPLICA, NEW, "start"): (
        COMPUTING, "in a slot its machine asked to fill, from the job's best checkpoint if the policy resumes"
    ),
    (REPLICA, NEW, "start_staging"): (STAGING, "as start, but it stages first (the staging model): no work yet"),
    (REPLICA, NEW, "start_waiting"): (
        WAITING, "as start, but every one of its machine's cpus computes another replica: it waits on the host"
    ),
    (REPLICA, STAGING, "computing"): (COMPUTING, "staging is over: it computes at mu'_ij * a_j (Eta)"),
    (REPLICA, STAGING, "computing_no_cpu"): (WAITING, "staging is over, every cpu is taken: it waits (Eta, pace 0)"),
    (REPLICA, WAITING, "cpu_free"): (
        COMPUTING, "a cpu of its machine freed: the replica that waited longest computes from now (Eta)"
    ),
    (REPLICA, COMPUTING, "computing"): (COMPUTING, "nothing: it computes already"),
    (REPLICA, WAITING, "computing"): (WAITING, "nothing: it staged already and waits for a cpu"),
    (REPLICA, STAGING, "share"): (STAGING, "nothing: staging does no work"),
    (REPLICA, WAITING, "share"): (WAITING, "nothing: waiting does no work"),
    (REPLICA, COMPUTING, "share"): (COMPUTING, "re-marked at the new rate: its eta moves (Eta; share 0 suspends it)"),
    (REPLICA, STAGING, "checkpoint"): (STAGING, "its checkpoint and the job's best noted"),
    (REPLICA, WAITING, "checkpoint"): (WAITING, "its checkpoint and the job's best noted"),
    (REPLICA, COMPUTING, "checkpoint"): (COMPUTING, "its checkpoint and the job's best noted"),
    **{
        (REPLICA, live, event): (outcome, "frees its slot; " + effect)
        for live in LIVE
        for outcome, event, effect in (
            (DONE, "result", "its job is done"),
            (CANCELLED, "cancel", "Cancel to the driver; kept for a late result while its job runs"),
            (LOST, "lose", "its machine went down, was suspected or asked for work while running it; kept"),
            (FAILED, "fail", "it ended without a result, its machine up; kept for a late result"),
            (TIMED_OUT, "time_out", "given up on (T/O); kept for a late result"),
        )
    },
    **{
        (REPLICA, given_up, "result"): (DONE, "a late result: taken once, while its job is not done (else stale)")
        for given_up in GIVEN_UP
    },
    **{
        (REPLICA, live, "discard"): (
            DISCARDED, "a loser that ran on delivered after its job was done: frees its slot; its result is "
                       "recorded, not used; its machine time is waste"
        )
        for live in LIVE
    },
    # ---- machines
    (MACHINE, DOWN, "up"): (FREE, "capacity changes; no longer suspected; up time counts"),
    **{(MACHINE, s, "up"): (s, "its CPU share noted") for s in UP},
    **{(MACHINE, s, "share"): (s, "its CPU share noted; capacity changes") for s in (DOWN, *UP)},
    **{(MACHINE, s, "down"): (DOWN, "every live replica lost; its request withdrawn; capacity changes") for s in UP},
    **{
        (MACHINE, s, "suspect"): (DOWN, "as down, counted as a suspicion; up again at its next request")
        for s in UP
    },
    (MACHINE, DOWN, "suspect"): (DOWN, "nothing: it is down already"),
    **{
        (MACHINE, s, "reclaim"): (s, "its owner took it back: it asks for nothing until UP with a share")
        for s in (DOWN, FREE, BUSY)  # (a READY one withdraws its request first)
    },
    **{
        (MACHINE, s, "give_back"): (s, "UP again: it asks for work at its next request")
        for s in (DOWN, FREE, BUSY)  # (a reclaimed machine is never READY)
    },
    (MACHINE, FREE, "ask"): (READY, "asks for n <= free slots: at the back of the ready queue"),
    (MACHINE, BUSY, "ask"): (READY, "asks for n <= its free slots: at the back of the ready queue"),
    (MACHINE, READY, "ask"): (READY, "asks for a new number of slots; keeps its place in the queue"),
    (MACHINE, FREE, "ask_none"): (FREE, "nothing: it asks for no slot it has free, or has no CPU to give"),
    (MACHINE, BUSY, "ask_none"): (BUSY, "nothing: it asks for no slot it has free, or has no CPU to give"),
    (MACHINE, READY, "withdraw_idle"): (
        FREE, "its request withdrawn (it asks for none, fell silent, or has no CPU to give: reclaimed or share 0)"
    ),
    (MACHINE, READY, "withdraw_busy"): (BUSY, "its request withdrawn; its replicas run on"),
    (MACHINE, READY, "fill"): (READY, "a replica starts in an asked slot; it asks for more"),
    (MACHINE, READY, "fill_last"): (BUSY, "a replica starts in its last asked slot: it leaves the ready queue"),
    (MACHINE, BUSY, "release"): (BUSY, "a replica ended; others run"),
    (MACHINE, BUSY, "release_last"): (FREE, "its last replica ended; it does not ask until it says so"),
    (MACHINE, READY, "release"): (READY, "a replica ended; it still asks"),
    (MACHINE, READY, "release_last"): (READY, "its last replica ended; it still asks"),
}


def states(kind: str) -> frozenset[State]:
    """Every state a record of ``kind`` can be in, by the table (NEW, before the core holds it, included)."""
    found: set[State] = set()
    for (k, old, _), (new, _) in TABLE.items():
        if k == kind:
            found.add(old)
            found.add(new)
    return frozenset(found)


def events(kind: str) -> frozenset[str]:
    """Every event of ``kind`` in the table."""
    return frozenset(event for k, _, event in TABLE if k == kind)


def check(kind: str, old: State, event: str, new: State) -> None:
    """AssertionError unless (kind, old, event) -> new is a row of the table."""
    row = TABLE.get((kind, old, event))
    if row is None:
        raise AssertionError(f"{kind} {_name(old)} --{event}--> {_name(new)}: no such transition in the table")
    if row[0] != new:
        raise AssertionError(f"{kind} {_name(old)} --{event}--> {_name(new)}: the table says {_name(row[0])}")


def state_of(kind: str, record: object) -> State:
    """The state of a job, replica or machine record, as the table names it."""
    if kind == JOB:
        return record.status  # type: ignore[attr-defined,no-any-return]
    if kind == MACHINE:
        return record.state  # type: ignore[attr-defined,no-any-return]
    if record.live:  # type: ignore[attr-defined]
        return record.phase  # type: ignore[attr-defined,no-any-return]
    return record.outcome  # type: ignore[attr-defined,no-any-return]


class Checker:
    """Check mode: every transition the core makes must be a row, made from the state the record's last
    transition left it in (so a change of state made by no transition is found at the next one)."""

    def __init__(self, machines: Iterable[object]):
        self.last_state: dict[object, State] = {m: state_of(MACHINE, m) for m in machines}  # machines begin DOWN

    def moved(self, kind: str, record: object, old: State, event: str, new: State) -> None:
        check(kind, old, event, new)
        last = self.last_state.get(record, NEW)
        if last != old:
            raise AssertionError(f"{record!r} went from {_name(last)} to {_name(old)} by no transition of the table")
        self.last_state[record] = new

    def check_states(self, records: Iterable[tuple[str, object]]) -> None:
        """Every record is in the state its last transition left it in."""
        for kind, record in records:
            state = state_of(kind, record)
            last = self.last_state.get(record, NEW)
            assert state == last, f"{record!r} is {_name(state)} but its last transition left it {_name(last)}"


def _name(state: State) -> str:
    return state if isinstance(state, str) else state.name
