"""The core's records of jobs, replicas, machines and queues.

Policies receive these objects through the scheduler's view and must treat them
as read-only: only the core changes them, so that every invariant is kept in one place.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import itertools
import math
from collections.abc import Hashable, Iterator
from typing import Any, Final

from mgst.core.progress import Activity
from mgst.core.stats import MachineHistory, MachineStats
from mgst.model import Job


class JobStatus(enum.Enum):
    QUEUED = "Queued"
    RUNNING = "Running"
    DONE = "Done"


class MachineState(enum.Enum):
    DOWN = "down"
    FREE = "free"  # up, running nothing, not asking for work
    READY = "ready"  # up and asking for work for ``asking`` slots: held in the ready queue
    BUSY = "busy"  # up, running replicas, not asking


class Outcome(enum.Enum):
    """How a replica ended."""

    DONE = "done"  # it produced the job's result
    CANCELLED = "cancelled"  # stopped by the core or the policy (a sibling won, ...)
    LOST = "lost"  # its machine went down, or was suspected down
    TIMED_OUT = "timed out"  # the policy gave up on it (it may still deliver, once)
    FAILED = "failed"  # it ended without a result while its machine stayed up
    DISCARDED = "discarded"  # it ran on after a sibling had done its job (the policy lets losers run) and delivered:
    # its result is recorded, not used (GridBot's waste)


STAGING: Final = "staging"  # fetching a checkpoint, a program or data: no work is done
WAITING: Final = "waiting"  # on its host, for one of the machine's cpus: no work is done, no CPU is charged
COMPUTING: Final = "computing"

# A checkpoint raises its job's best (and so makes its replica useful, Anglano & Canonico's RWT) only when it
# is better than the stored one by more than this fraction of the job. Progress is a fraction worked
# out in floating point: a replica resumed from the best checkpoint and its sibling, at equal power,
# reach the same work along different sums, and differ by a few ulps (1e-16 measured; at most about
# 1e-11 from a model time of 2e6 s); a real step between two checkpoints is a whole checkpoint
# interval of work (1e-4 and more in Anglano & Canonico's cells). Equal is not better.
CHECKPOINT_TIE: Final = 1e-9


class ReplicaRecord(Activity):
    """One attempt at running a job on a machine, live or ended (ended records are kept).

    Its execution is an :class:`~mgst.core.progress.Activity`: ``left`` units of work remained at
    model time ``mark`` and it does ``rate`` units per time unit since (0 while staging, waiting on
    its host for a CPU, or at CPU share 0). Only the core sets the rate (mgst.core.progress's rules),
    so :meth:`eta` moves exactly, and the core reports each move (an Eta decision).
    """

    __slots__ = (
        "id", "id_key", "job", "machine", "attempt", "sent", "progress", "checkpoint", "live", "phase",
        "outcome", "ended", "best", "late", "computing_since", "computed", "discarded", "waited", "wait_from",
    )

    def __init__(
        self, id: int, job: JobRecord, machine: int, attempt: int, sent: float, progress: float,
        rate: float = 0.0, staging: bool = False, waiting: bool = False,
    ):
        held = staging or waiting
        super().__init__((1.0 - progress) * job.job.size, sent, 0.0 if held else rate)
        self.id = id
        # The id as one int object, the key of the core's dicts by replica id: compiled code makes a new
        # int object from ``id`` at every dict operation (and the dict then compares it by value).
        self.id_key: Any = id
        self.job = job
        self.machine = machine
        self.attempt = attempt  # 1 for the job's first replica, 2 for the next...
        self.sent = sent  # model time of the Assign
        self.progress = progress  # fraction of work done when this replica started
        self.checkpoint = progress  # latest checkpointed fraction
        self.live = True
        self.phase = STAGING if staging else WAITING if waiting else COMPUTING
        self.outcome: Outcome | None = None
        self.ended: float | None = None
        self.best = False  # it raised its job's best checkpoint at least once (by more than CHECKPOINT_TIE)
        self.late = False  # its result came after the core had given up on it
        # When it started computing (None while staging or waiting), and, once it delivered, how long it computed:
        # as the driver measured it (ReplicaDone.computed: the testbed's t5 - t4), else result - computing_since.
        self.computing_since: float | None = None if held else sent
        self.computed: float | None = None
        # It ran on after a sibling completed the job (the policy lets losers run on) and its result, done or
        # not, was not used: the paper's waste (GridBot). Its outcome still says how it ended.
        self.discarded = False
        # Time it waited on its host for a CPU (not charged to the machine), and since when it waits (None: not).
        self.waited = 0.0
        self.wait_from: float | None = sent if waiting else None

    def remaining(self, now: float) -> float:
        """Work left at ``now`` (the job's size is in work units at unit rate); frozen once ended."""
        ended = self.ended
        if ended is not None and now > ended:
            now = ended
        return super().remaining(now)

    def progress_at(self, now: float) -> float:
        """Fraction of the job's work done at ``now``."""
        size = self.job.job.size
        return 1.0 - self.remaining(now) / size if size > 0.0 else 1.0

    def eta(self, now: float) -> float:
        """When it completes if nothing changes (inf while staging, waiting, suspended, or once ended)."""
        if not self.live:
            return math.inf
        return self.finish_time()

    @property
    def suspended(self) -> bool:
        return self.live and self.phase == COMPUTING and self.rate <= 0.0

    @property
    def machine_time(self) -> float:
        """Model time it held its slot (sent to end), for an ended replica."""
        return (self.ended if self.ended is not None else self.sent) - self.sent

    @property
    def charged_time(self) -> float:
        """The machine time charged to its host, for an ended replica: ``machine_time`` less its wait for a CPU
        (busy time; a loser's, its waste)."""
        return (self.ended if self.ended is not None else self.sent) - self.sent - self.waited

    def charged_until(self, now: float) -> float:
        """The machine time charged to its host up to ``now`` (to its end, once ended): from its send, less its waits
        on the host for a CPU (one under way included)."""
        ended = self.ended
        if ended is not None:
            return ended - self.sent - self.waited
        waiting = now - self.wait_from if self.wait_from is not None else 0.0
        return now - self.sent - self.waited - waiting

    @property
    def wasted(self) -> bool:
        """Ended without the job's result and without ever raising its best checkpoint (Anglano & Canonico)."""
        return self.outcome is not None and self.outcome is not Outcome.DONE and not self.best

    def __repr__(self) -> str:
        state = self.phase if self.live else (self.outcome.value if self.outcome else "ended")
        return f"ReplicaRecord({self.id}, job={self.job.job.id}, machine={self.machine}, {state})"


class BagRecord:
    """A Bag of Tasks in the core: its queue of waiting tasks, its running tasks, its counters."""

    __slots__ = (
        "id", "submitted", "size", "attributes", "key", "queue", "running", "queued", "done",
        "first_dispatch", "completed", "tasks", "retired", "replica_totals",
    )

    def __init__(self, id: int, submitted: float, key: Hashable, attributes: dict[str, Any]):
        self.id = id
        self.submitted = submitted
        self.size = 0  # tasks
        self.attributes = attributes
        self.key = key  # its queue's key
        self.queue = JobQueue(key)  # tasks with no live replica, oldest first
        self.running: dict[int, JobRecord] = {}  # tasks with a live replica, by job id
        self.queued = 0
        self.done = 0
        self.first_dispatch: float | None = None
        self.completed: float | None = None
        self.tasks: list[JobRecord] = []
        # A driver that keeps no records (Scheduler.retire): its tasks retired so far, and once the bag is complete
        # and all of them are, its replicas' totals (started, wasted, wasted time, machine time), its tasks dropped.
        self.retired = 0
        self.replica_totals: tuple[int, int, float, float] | None = None

    @property
    def running_count(self) -> int:
        return len(self.running)

    @property
    def is_complete(self) -> bool:
        return self.completed is not None

    def __repr__(self) -> str:
        return f"BagRecord({self.id}, {self.queued} queued, {len(self.running)} running, {self.done}/{self.size} done)"


class JobRecord:
    """A job's state and history in the core."""

    __slots__ = (
        "job", "id_key", "queue_key", "status", "replicas", "attempts", "requeues", "best_progress",
        "first_sent", "completed", "done_by", "done_on", "done_sent", "queued_since", "idle_time",
        "timeouts", "history", "bag", "qtoken",
    )

    def __init__(self, job: Job, queue_key: Hashable, now: float, bag: BagRecord | None = None):
        self.job = job
        fields: tuple[Any, ...] = job  # the Job's own id object (compiled, job.id would be unboxed, then boxed anew)
        self.id_key: Any = fields[0]  # the id as one int object, the key of the core's dicts by job id (as above)
        self.queue_key = queue_key
        self.status = JobStatus.QUEUED
        self.replicas: dict[int, ReplicaRecord] = {}  # live replicas by id
        self.history: list[ReplicaRecord] = []  # every replica ever started, in order
        self.attempts = 0  # replicas started so far
        self.requeues = 0  # times the job went back to its queue after losing every replica
        self.best_progress = 0.0  # best checkpoint of any replica: where a new one resumes
        self.first_sent: float | None = None
        self.completed: float | None = None
        self.done_by: int | None = None  # replica id that finished it
        self.done_on: int | None = None  # machine that finished it
        self.done_sent: float | None = None  # when the finishing replica was sent
        self.queued_since = now  # when it last lost its last running replica (or arrived)
        self.idle_time = 0.0  # accumulated time with no running replica, until queued_since (LongIdle)
        self.timeouts = 0  # replicas given up on after a time-out (the T/O column)
        self.bag = bag
        self.qtoken = 0  # where it waits in its JobQueue: 0 nowhere, 1 in arrival order, else a requeue's token

    @property
    def id(self) -> int:
        return self.job.id

    @property
    def job_class(self) -> int:
        return self.job.job_class

    @property
    def submitted(self) -> float:
        return self.job.submitted

    @property
    def live_replicas(self) -> int:
        return len(self.replicas)

    def idle(self, now: float) -> float:
        """Total time with no running replica, up to ``now``."""
        if self.status is JobStatus.QUEUED:
            return self.idle_time + (now - self.queued_since)
        return self.idle_time

    def __repr__(self) -> str:
        return f"JobRecord({self.job.id}, class={self.job.job_class}, {self.status.name})"


class MachineRecord:
    __slots__ = (
        "index", "name", "rates", "availability", "cpu_share", "state", "replicas", "slots", "cpus", "computing",
        "waiting", "asking", "attributes", "suspected", "silent", "reclaimed", "up_since", "stats", "history",
    )

    def __init__(
        self, index: int, name: str, rates: tuple[float, ...], availability: float, slots: int = 1,
        attributes: dict[str, Any] | None = None, cpus: int | None = None,
    ):
        self.index = index
        self.name = name
        self.rates = rates  # nominal mu'_ij by class
        self.availability = availability  # nominal a_j from the experiment
        self.cpu_share = availability  # current a_j as last reported
        self.state = MachineState.DOWN
        self.replicas: dict[int, ReplicaRecord] = {}  # live replicas by id
        self.slots = slots
        # How many of its replicas compute at once (the others wait on the host, mgst.core.progress); the
        # live replicas now computing (or staging: a transfer is not the CPU's), and those waiting, in order.
        self.cpus = slots if cpus is None else cpus
        self.computing = 0
        self.waiting: list[ReplicaRecord] = []
        self.asking = 0  # slots for which it asks for work (0 unless READY)
        self.attributes = attributes if attributes is not None else {}
        self.suspected = False  # the policy declared it suspected down
        self.silent = False  # the driver has not heard from it for a while; not (yet) declared down
        self.reclaimed = False  # its owner took it back (RECLAIMED): it asks for no work until UP again
        self.up_since: float | None = None
        self.stats = MachineStats(len(rates))
        self.history = MachineHistory(self.stats, availability)  # kept by the core, for policies (docs/policies.md)

    @property
    def is_up(self) -> bool:
        return self.state is not MachineState.DOWN

    @property
    def may_ask(self) -> bool:
        """It has CPU to give the grid: up, not reclaimed, at a share above 0 (else it asks for no work)."""
        return self.cpu_share > 0.0 and not self.reclaimed and self.state is not MachineState.DOWN

    @property
    def free_slots(self) -> int:
        return self.slots - len(self.replicas)

    @property
    def replica(self) -> ReplicaRecord | None:
        """The replica it runs (the first, for a machine with several slots), or None."""
        for r in self.replicas.values():
            return r
        return None

    def __repr__(self) -> str:
        return f"MachineRecord({self.index}, {self.name!r}, {self.state.name})"


# JobRecord.qtoken of a job waiting in its queue's arrival-order part.
_IN_MAIN: Final = 1


class JobQueue:
    """Jobs waiting to run, in order of submission time (then id).

    New arrivals append in O(1) to a list in arrival order, read from a start index that moves
    past the jobs that left the front (an arrival drops them from the list once they are half of
    it, so that removals never shift it: a list, not a deque, because compiled its operations are
    native where a deque's are method calls). A job that comes back
    after a failure keeps its submission time, so it goes back near the head (our
    reading of the paper's "resubmitted"); such jobs are few and live in a small
    sorted side list, as does an arrival older than the newest one (only an
    out-of-order trace does that). Removal is O(1) and lazy: the job's
    ``qtoken`` says where it waits (0: nowhere), and entries whose job has left
    are dropped when they reach the front. ``head`` (the job that has waited
    longest, or None) is kept up to date, so reading it costs an attribute access.
    """

    __slots__ = (
        "key", "head", "_main", "_first", "_front", "_last_submitted", "_last_id", "_len", "_nfront", "_tokens",
    )

    def __init__(self, key: Hashable):
        self.key = key
        self.head: JobRecord | None = None
        self._main: list[JobRecord] = []  # arrival order == submission order, from index _first on
        self._first = 0  # _main[:_first] have left the front
        # (submitted, id, token, job): requeued (or late), sorted; an entry counts while job.qtoken == token
        self._front: list[tuple[float, int, int, JobRecord]] = []
        # the newest (submitted, id) in _main, as two fields: no tuple made per arrival
        self._last_submitted = -math.inf
        self._last_id = -1
        self._len = 0
        self._nfront = 0  # entries of _front that count
        self._tokens = _IN_MAIN

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self.head is not None

    def __contains__(self, job_id: int) -> bool:
        return any(r.job.id == job_id for r in self)

    def _live_front(self) -> list[tuple[float, int, int, JobRecord]]:
        return [e for e in self._front if e[3].qtoken == e[2]]

    def __iter__(self) -> Iterator[JobRecord]:
        """Waiting jobs, oldest first, lazily (a caller that stops early pays for what it read).

        The queue must not change while an iteration is under way, but for jobs leaving it (a
        dispatch that assigns the jobs it reads): they are skipped if not read yet.
        """
        # filter and map, not generator expressions: mypyc would build those as lists (this stays lazy
        # compiled too)
        main = filter(lambda r: r.qtoken == _IN_MAIN, itertools.islice(self._main, self._first, None))
        if not self._nfront:
            return main
        keyed = map(lambda r: (r.job.submitted, r.job.id, 0, r), main)
        return map(lambda e: e[3], heapq.merge(self._live_front(), keyed, key=lambda e: e[:2]))

    def requeued(self) -> list[JobRecord]:
        """Jobs back in the queue after losing their replicas (and late arrivals of a trace), oldest first."""
        return [e[3] for e in self._live_front()]

    def append(self, rec: JobRecord) -> None:
        job = rec.job
        submitted = job.submitted
        last = self._last_submitted
        if submitted < last or (submitted == last and job.id < self._last_id):
            self.requeue(rec)  # older than the newest arrival (a trace out of order): keep order
            return
        self._last_submitted = submitted
        self._last_id = job.id
        rec.qtoken = _IN_MAIN
        main = self._main
        first = self._first
        if first > 32 and 2 * first > len(main):  # the jobs that left the front are half the list
            del main[:first]
            self._first = 0
        main.append(rec)
        self._len += 1
        head = self.head
        if head is None:
            self.head = rec
        elif self._nfront and (submitted, job.id) < (head.job.submitted, head.job.id):
            self._find_head()  # only after a requeue can an arrival be older than the head

    def requeue(self, rec: JobRecord) -> None:
        self._tokens += 1
        token = rec.qtoken = self._tokens
        bisect.insort(self._front, (rec.job.submitted, rec.job.id, token, rec), key=lambda e: e[:2])
        self._len += 1
        self._nfront += 1
        self._find_head()

    def remove(self, rec: JobRecord) -> None:
        token = rec.qtoken
        if not token:
            raise KeyError(rec.job.id)
        rec.qtoken = 0
        self._len -= 1
        if token == _IN_MAIN:
            if rec is self.head:  # the common case: the head leaves (it is first in _main)
                if not self._nfront:
                    main = self._main
                    first = self._first + 1
                    n = len(main)
                    while first < n and main[first].qtoken != _IN_MAIN:
                        first += 1
                    self.head = main[first] if first < n else None
                    self._first = first
                    return
                self._find_head()
            return
        self._nfront -= 1
        if len(self._front) > 2 * self._nfront + 16:  # mostly left: compact
            self._front = self._live_front()
        if rec is self.head:
            self._find_head()

    def _find_head(self) -> None:
        main = self._main
        first = self._first
        n = len(main)
        while first < n and main[first].qtoken != _IN_MAIN:  # left while behind the head
            first += 1
        m = main[first] if first < n else None
        self._first = first
        front = self._front
        while front and front[0][3].qtoken != front[0][2]:
            del front[0]
        if front:
            f = front[0]
            if m is None or f[:2] < (m.job.submitted, m.job.id):
                m = f[3]
        self.head = m
