"""The life of jobs, replicas, bags and machines: every state transition of the core, in one place.

Transitions (the only ones; each method below is one row):

    job      QUEUED  --_start-->            RUNNING    (its first live replica)
             RUNNING --_start-->            RUNNING    (another replica, up to max_replicas)
             RUNNING --_complete-->         DONE       (siblings are cancelled)
             RUNNING --_requeue-->          QUEUED     (its last live replica ended without result)
             QUEUED  --_complete (late)-->  DONE       (a replica given up on delivered after all)
    replica  (new)   --_start-->            STAGING or COMPUTING
             STAGING --computing-->         COMPUTING
             live    --_complete-->         DONE
             live    --_cancel-->           CANCELLED
             live    --_lose-->             LOST, FAILED or TIMED_OUT  (kept for a late result)
             given up (job not DONE) --_complete--> DONE, late
    machine  DOWN  --_bring_up-->           FREE
             up    --_make_ready-->         READY  (asking for n <= free slots)
             READY --_start (last asked slot)--> BUSY
             up    --_take_down-->          DOWN   (every live replica LOST)
    bag      a task's transitions move its counters; the last task DONE completes the bag.

The :class:`Scheduler` mixes this in; policies never call it.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import mypyc_attr

from mgst.core.decisions import (
    Assign,
    BagCompleted,
    Cancel,
    JobCompleted,
    JobRequeued,
    MachineSuspected,
    Output,
    ReplicaTimedOut,
)
from mgst.core.state import (
    COMPUTING,
    STAGING,
    BagRecord,
    JobQueue,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)
from mgst.core.tuples import new_tuple

if TYPE_CHECKING:
    from mgst.core.ready import ReadyQueue
    from mgst.policies.base import Policy

# Outputs are made with tuple.__new__ (new_tuple: in C where built): a NamedTuple's own __new__ is a
# Python function, the costliest step of an assignment or a completion once the core is compiled
# (the result is the same).
# Final: a C static when compiled, where a plain global is a dict lookup at every use (docs/build.md).
_new_tuple: Final = new_tuple
_ASSIGN: Final = Assign
_JOB_COMPLETED: Final = JobCompleted
_CANCEL: Final = Cancel


@mypyc_attr(native_class=False)  # mypyc: a native class cannot subclass RuntimeError
class PolicyError(RuntimeError):
    """A policy asked for something impossible (a bug in the policy, not in the input)."""


class Lifecycle:
    """State transitions of the core's records (see the module docstring)."""

    now: float
    policy: Policy
    machines: tuple[MachineRecord, ...]
    queues: dict[Hashable, JobQueue]
    queues_version: int
    running: dict[int, JobRecord]
    bags: dict[int, BagRecord]
    queued_count: int
    capacity_version: int
    _ready: ReadyQueue
    _replicas: dict[int, ReplicaRecord]
    _lost: dict[int, ReplicaRecord]
    _out: list[Output]
    report_completions: bool
    _ended: list[ReplicaRecord] | None
    _started: list[ReplicaRecord] | None
    _requeued: bool
    _next_replica: int
    _no_progress: Any  # 0.0, one object
    _stage_start: bool
    _stage_resume: bool
    _resume: bool

    def _start(self, rec: JobRecord, m: MachineRecord) -> None:
        """Start a replica of ``rec`` in one of the slots ``m`` asks to fill."""
        j = m.index
        if not m.asking:
            raise PolicyError(f"assign to machine {m.name}, which is not asking for work")
        c = rec.job.job_class
        rate = m.rates[c]
        if rate <= 0.0:
            raise PolicyError(f"assign of a class-{c + 1} job to {m.name}, which cannot run it")
        now = self.now
        status = rec.status
        if status is JobStatus.QUEUED:
            self.queues[rec.queue_key].remove(rec)
            self.queued_count -= 1
            rec.status = JobStatus.RUNNING
            rec.idle_time += now - rec.queued_since
            self.running[rec.id_key] = rec
            bag = rec.bag
            if bag is not None:
                bag.queued -= 1
                bag.running[rec.id_key] = rec
                if bag.first_dispatch is None:
                    bag.first_dispatch = now
        elif status is JobStatus.RUNNING:
            if len(rec.replicas) >= self.policy.max_replicas:
                raise PolicyError(
                    f"job {rec.job.id} has {len(rec.replicas)} replicas; the limit is {self.policy.max_replicas}"
                )
            for other in rec.replicas.values():
                if other.machine == j:
                    raise PolicyError(f"assign of job {rec.job.id} to {m.name}, which already runs a replica of it")
        else:
            raise PolicyError(f"assign of job {rec.job.id}, which is done")
        asking = m.asking - 1
        m.asking = asking
        if not asking:
            self._ready.remove(j)
            m.state = MachineState.BUSY
        rid = self._next_replica
        self._next_replica = rid + 1
        rec.attempts += 1
        progress = rec.best_progress if self._resume else 0.0
        staging = self._stage_start or (progress > 0.0 and self._stage_resume)
        r = ReplicaRecord(rid, rec, j, rec.attempts, now, progress, rate * m.cpu_share, staging)
        key = r.id_key
        rec.replicas[key] = r
        rec.history.append(r)
        self._replicas[key] = r
        m.replicas[key] = r
        if rec.first_sent is None:
            rec.first_sent = now
        progress_object: Any = self._no_progress  # a progress of 0 (most replicas) as one float object:
        if progress:  # compiled, a float argument is a new object each time
            progress_object = progress
        self._out.append(_new_tuple(_ASSIGN, rec.job, j, key, progress_object, staging))
        if self._started is not None:
            self._started.append(r)

    def _computing(self, r: ReplicaRecord) -> None:
        if r.phase == STAGING:
            m = self.machines[r.machine]
            r.phase = COMPUTING
            r.set_rate(self.now, m.rates[r.job.job.job_class] * m.cpu_share)

    def _release(self, r: ReplicaRecord, outcome: Outcome) -> MachineRecord:
        """End a live replica: detach it from its job and its machine's slot."""
        now = self.now
        r.live = False
        r.outcome = outcome
        r.ended = now  # work stops counting here (ReplicaRecord.remaining)
        key = r.id_key
        del r.job.replicas[key]
        del self._replicas[key]
        m = self.machines[r.machine]
        del m.replicas[key]
        if m.state is MachineState.BUSY and not m.replicas:
            m.state = MachineState.FREE
        m.stats.busy_time += now - r.sent
        if self._ended is not None:
            self._ended.append(r)
        return m

    def _complete(self, r: ReplicaRecord) -> None:
        job = r.job
        now = self.now
        status = job.status
        if r.live:
            st = self._release(r, Outcome.DONE).stats
        else:  # a replica we had given up on delivered after all: take its result
            r.outcome = Outcome.DONE
            r.late = True
            r.ended = now
            st = self.machines[r.machine].stats
            if status is JobStatus.QUEUED:
                self.queues[job.queue_key].remove(job)
                self.queued_count -= 1
                job.idle_time += now - job.queued_since
            if self._ended is not None:
                self._ended.append(r)
        c = job.job.job_class
        # x[c] = x[c] + ..., not x[c] += ...: compiled, += on a list item is the generic number protocol
        completed = st.completed_by_class
        completed[c] = completed[c] + 1
        service = st.service_by_class
        service[c] = service[c] + (now - r.sent)
        st.completed += 1
        st.note_outcome(True)
        job.status = JobStatus.DONE
        job.completed = now
        job.done_by = r.id_key
        job.done_on = r.machine
        job.done_sent = r.sent
        if status is JobStatus.RUNNING:  # (a late result may find its job queued)
            del self.running[job.id_key]
        if job.replicas:
            for sibling in list(job.replicas.values()):
                self._cancel(sibling)
        if self.report_completions:
            self._out.append(_new_tuple(_JOB_COMPLETED, job.job, r.id_key, r.machine))
        bag = job.bag
        if bag is not None:
            if status is JobStatus.RUNNING:
                del bag.running[job.id_key]
            else:
                bag.queued -= 1
            bag.done += 1
            if bag.done == bag.size:
                self._bag_done(bag)

    def _bag_done(self, bag: BagRecord) -> None:
        bag.completed = self.now
        self.bags.pop(bag.id, None)
        q = self.queues.get(bag.key)
        if q is bag.queue:
            del self.queues[bag.key]
            self.queues_version += 1
        self._out.append(BagCompleted(bag.id))

    def _cancel(self, r: ReplicaRecord) -> None:
        job = r.job
        m = self._release(r, Outcome.CANCELLED)
        m.stats.cancelled += 1
        self._out.append(_new_tuple(_CANCEL, r.id_key, m.index, job.id_key))
        if job.status is JobStatus.RUNNING:
            self._lost[r.id_key] = r
            if not job.replicas:
                self._requeue(job, r, "cancelled")

    def _lose(self, r: ReplicaRecord, reason: str, outcome: Outcome = Outcome.LOST) -> None:
        """A live replica ended without a result; its result still counts once if it comes."""
        st = self._release(r, outcome).stats
        st.lost += 1
        if outcome is Outcome.FAILED:
            st.failed += 1
        elif outcome is Outcome.TIMED_OUT:
            st.timed_out += 1
        st.note_outcome(False)
        self._lost[r.id_key] = r
        if not r.job.replicas:
            self._requeue(r.job, r, reason)

    def _time_out(self, r: ReplicaRecord, notice: bool = True) -> None:
        """Give up on a live replica (T/O); ``notice`` tells the driver, which did not decide it."""
        r.job.timeouts += 1
        if notice:
            self._out.append(ReplicaTimedOut(r.id, r.machine, r.job.job.id))
        self._lose(r, "timeout", Outcome.TIMED_OUT)

    def _requeue(self, job: JobRecord, r: ReplicaRecord, reason: str) -> None:
        self._requeued = True
        job.status = JobStatus.QUEUED
        job.requeues += 1
        job.queued_since = self.now
        self.running.pop(job.id_key, None)
        self.queues[job.queue_key].requeue(job)
        self.queued_count += 1
        bag = job.bag
        if bag is not None:
            del bag.running[job.id_key]
            bag.queued += 1
        self._out.append(JobRequeued(job.job, r.id, r.machine, reason))

    # ------------------------------------------------------------------ machines

    def _bring_up(self, m: MachineRecord, share: float | None) -> bool:
        """Note the machine's CPU share; bring it up if it was down (then True)."""
        self._set_share(m, share)
        if m.state is MachineState.DOWN:
            m.state = MachineState.FREE
            m.suspected = False
            m.up_since = self.now
            self.capacity_version += 1
            return True
        return False

    def _take_down(self, m: MachineRecord, suspected: bool = False) -> None:
        for r in list(m.replicas.values()):
            self._lose(r, "machine down")
        self._ready.discard(m.index)
        m.asking = 0
        m.state = MachineState.DOWN
        m.suspected = suspected
        m.silent = False
        if suspected:
            m.stats.suspicions += 1
        else:
            m.stats.failures += 1
        if m.up_since is not None:
            m.stats.up_time += self.now - m.up_since
            m.up_since = None
        self.capacity_version += 1
        if suspected:
            self._out.append(MachineSuspected(m.index))

    def _make_ready(self, m: MachineRecord, slots: int | None = None) -> None:
        """The machine asks for work for ``slots`` slots (None: all it has free)."""
        free = m.slots - len(m.replicas)
        want = free if slots is None or slots > free else slots
        if want > 0:
            m.asking = want
            if m.state is not MachineState.READY:
                m.state = MachineState.READY
                self._ready.add(m.index)
        elif m.state is MachineState.READY:
            m.asking = 0
            self._ready.remove(m.index)
            m.state = MachineState.BUSY if m.replicas else MachineState.FREE

    def _set_share(self, m: MachineRecord, share: float | None) -> None:
        if share is not None and share != m.cpu_share:
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"CPU share {share} of machine {m.name} outside [0, 1]")
            m.cpu_share = share
            now = self.now
            for r in m.replicas.values():
                if r.phase == COMPUTING:
                    r.set_rate(now, m.rates[r.job.job.job_class] * share)
            self.capacity_version += 1
