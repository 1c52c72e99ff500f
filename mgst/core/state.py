"""The core's records of jobs, replicas, machines and queues.

Policies receive these objects through the scheduler's view and must treat them
as read-only: only the core changes them, so that every invariant is kept in one place.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import math
from collections.abc import Hashable, Iterator

from mgst.model import Job


class JobStatus(enum.Enum):
    QUEUED = "Queued"
    RUNNING = "Running"
    DONE = "Done"


class MachineState(enum.Enum):
    DOWN = "down"
    FREE = "free"  # up, not running anything, not asking for work
    READY = "ready"  # up and asking: its request is held in the ready queue
    BUSY = "busy"


class ReplicaRecord:
    """One attempt at running a job on a machine."""

    __slots__ = ("id", "job", "machine", "attempt", "sent", "progress", "checkpoint", "live")

    def __init__(self, id: int, job: JobRecord, machine: int, attempt: int, sent: float, progress: float):
        self.id = id
        self.job = job
        self.machine = machine
        self.attempt = attempt  # 1 for the job's first replica, 2 for the next...
        self.sent = sent  # model time of the Assign
        self.progress = progress  # fraction of work done when this replica started
        self.checkpoint = progress  # latest checkpointed fraction
        self.live = True


class JobRecord:
    """A job's state and history in the core."""

    __slots__ = (
        "job", "queue_key", "status", "replicas", "attempts", "requeues", "best_progress",
        "first_sent", "completed", "done_by", "done_on", "done_sent", "queued_since", "idle_time",
        "timeouts",
    )

    def __init__(self, job: Job, queue_key: Hashable, now: float):
        self.job = job
        self.queue_key = queue_key
        self.status = JobStatus.QUEUED
        self.replicas: dict[int, ReplicaRecord] = {}  # live replicas by id
        self.attempts = 0  # replicas started so far
        self.requeues = 0  # times the job went back to its queue after losing every replica
        self.best_progress = 0.0  # best checkpoint of any replica: where a new one resumes
        self.first_sent: float | None = None
        self.completed: float | None = None
        self.done_by: int | None = None  # replica id that finished it
        self.done_on: int | None = None  # machine that finished it
        self.done_sent: float | None = None  # when the finishing replica was sent
        self.queued_since = now
        self.idle_time = 0.0  # accumulated time with no running replica (LongIdle)
        self.timeouts = 0  # replicas given up on after a time-out (the T/O column)

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

    def __repr__(self) -> str:
        return f"JobRecord({self.job.id}, class={self.job.job_class}, {self.status.name})"


class MachineStats:
    """Per-host statistics kept by the core, for policies and for results."""

    __slots__ = (
        "completed", "lost", "cancelled", "busy_time", "up_time", "failures",
        "completed_by_class", "service_by_class",
    )

    def __init__(self, n_classes: int):
        self.completed = 0  # replicas that completed their job
        self.lost = 0  # replicas lost to a failure of this machine or of the replica
        self.cancelled = 0  # replicas cancelled (siblings of a finished replica, ...)
        self.busy_time = 0.0  # model time spent running replicas, whatever their fate
        self.up_time = 0.0  # model time up, counted at each down event and at close()
        self.failures = 0  # times the machine went down
        self.completed_by_class = [0] * n_classes
        self.service_by_class = [0.0] * n_classes  # sum of sent->done times of completed replicas


class MachineRecord:
    __slots__ = ("index", "name", "rates", "availability", "cpu_share", "state", "replica", "up_since", "stats")

    def __init__(self, index: int, name: str, rates: tuple[float, ...], availability: float):
        self.index = index
        self.name = name
        self.rates = rates  # nominal mu'_ij by class
        self.availability = availability  # nominal a_j from the experiment
        self.cpu_share = availability  # current a_j as last reported
        self.state = MachineState.DOWN
        self.replica: ReplicaRecord | None = None
        self.up_since: float | None = None
        self.stats = MachineStats(len(rates))

    @property
    def is_up(self) -> bool:
        return self.state is not MachineState.DOWN

    def __repr__(self) -> str:
        return f"MachineRecord({self.index}, {self.name!r}, {self.state.name})"


class JobQueue:
    """Jobs waiting to run, in order of submission time (then id).

    New arrivals append in O(1). A job that comes back after a failure keeps its
    submission time, so it goes back near the head (our reading of the paper's
    "resubmitted"); such jobs are few and live in a small sorted side list, as
    does an arrival older than the newest one (only an out-of-order trace does that).
    ``head`` (the job that has waited longest, or None) is kept up to date, so
    reading it costs an attribute access.
    """

    __slots__ = ("key", "head", "_main", "_front", "_last")

    def __init__(self, key: Hashable):
        self.key = key
        self.head: JobRecord | None = None
        self._main: dict[int, JobRecord] = {}  # arrival order == submission order
        self._front: list[tuple[float, int, JobRecord]] = []  # requeued (or late), sorted
        self._last: tuple[float, int] = (-math.inf, -1)  # newest (submitted, id) in _main

    def __len__(self) -> int:
        return len(self._main) + len(self._front)

    def __bool__(self) -> bool:
        return self.head is not None

    def __contains__(self, job_id: int) -> bool:
        return job_id in self._main or any(j == job_id for _, j, _ in self._front)

    def __iter__(self) -> Iterator[JobRecord]:
        if not self._front:
            return iter(list(self._main.values()))
        main = ((r.job.submitted, r.job.id, r) for r in list(self._main.values()))
        return (r for _, _, r in heapq.merge(list(self._front), main, key=lambda e: e[:2]))

    def append(self, rec: JobRecord) -> None:
        key = (rec.job.submitted, rec.job.id)
        if key < self._last:  # older than the newest arrival (a trace out of order): keep order
            self.requeue(rec)
            return
        self._last = key
        self._main[rec.job.id] = rec
        if self.head is None:
            self.head = rec
        elif self._front and (rec.job.submitted, rec.job.id) < (self.head.job.submitted, self.head.job.id):
            self._find_head()  # only after a requeue can an arrival be older than the head

    def requeue(self, rec: JobRecord) -> None:
        bisect.insort(self._front, (rec.job.submitted, rec.job.id, rec), key=lambda e: e[:2])
        self._find_head()

    def remove(self, rec: JobRecord) -> None:
        if self._main.pop(rec.job.id, None) is None:
            for i, (_, jid, _) in enumerate(self._front):
                if jid == rec.job.id:
                    del self._front[i]
                    break
            else:
                raise KeyError(rec.job.id)
        if rec is self.head:
            self._find_head()

    def _find_head(self) -> None:
        main = self._main
        m = next(iter(main.values())) if main else None
        if self._front:
            f = self._front[0]
            if m is None or f[:2] < (m.job.submitted, m.job.id):
                m = f[2]
        self.head = m
