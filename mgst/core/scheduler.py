"""The scheduling state machine: events in, decisions out; no clock, no I/O, no randomness."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Sequence
from typing import TYPE_CHECKING

from mgst.core.decisions import (
    Assign,
    Cancel,
    CancelTimer,
    Hold,
    JobCompleted,
    JobRequeued,
    Output,
    SetTimer,
)
from mgst.core.events import (
    CpuShareChanged,
    Event,
    JobArrived,
    MachineDown,
    MachineReady,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaDone,
    ReplicaFailed,
    TimerFired,
)
from mgst.core.state import JobQueue, JobRecord, JobStatus, MachineRecord, MachineState, ReplicaRecord
from mgst.model import JobClass, Machine

if TYPE_CHECKING:
    from mgst.policies.base import Policy

log = logging.getLogger(__name__)

# A timer may be delivered this much model time early and still count (float round-off
# in drivers that convert wall time).
TIMER_SLACK = 1e-9


class PolicyError(RuntimeError):
    """A policy asked for something impossible (a bug in the policy, not in the input)."""


class Scheduler:
    """The scheduling core.

    Drivers call :meth:`start` once, then :meth:`handle` for every event, each time
    with the current model time, and carry out the decisions returned. The policy
    sees this object as its read-only view: the attributes and methods documented
    under "view" below; it changes nothing itself and acts only by yielding decisions.
    """

    def __init__(self, classes: Sequence[JobClass], machines: Sequence[Machine], policy: Policy):
        n = len(classes)
        for m in machines:
            if len(m.rates) != n:
                raise ValueError(f"machine {m.name!r} has {len(m.rates)} rates for {n} classes")
        # --- view: read-only for policies ---
        self.now = 0.0
        self.classes: tuple[JobClass, ...] = tuple(classes)
        self.machines: tuple[MachineRecord, ...] = tuple(
            MachineRecord(j, m.name, tuple(m.rates), m.availability) for j, m in enumerate(machines)
        )
        self.jobs: dict[int, JobRecord] = {}  # every job ever seen, by id
        self.queues: dict[Hashable, JobQueue] = {}  # waiting jobs, by the policy's queue key
        self.running: dict[int, JobRecord] = {}  # jobs with at least one live replica, by id
        self.queued_count = 0
        self.capacity_version = 0  # bumped whenever a machine goes up or down or its a_j changes
        self.timers: dict[Hashable, float] = {}
        self.stale_events = 0  # events that referred to something already over (late done, ...)
        # --- internal ---
        self.policy = policy
        self._ready: dict[int, None] = {}  # machines asking for work, in request order
        self._replicas: dict[int, ReplicaRecord] = {}  # live replicas
        self._lost: dict[int, ReplicaRecord] = {}  # replicas given up on whose result we'd still take
        self._next_replica = 1
        self._out: list[Output] = []
        self._handlers = {
            JobArrived: self._on_job_arrived,
            MachineReady: self._on_machine_ready,
            ReplicaDone: self._on_replica_done,
            ReplicaFailed: self._on_replica_failed,
            ReplicaCheckpoint: self._on_checkpoint,
            MachineDown: self._on_machine_down,
            MachineUp: self._on_machine_up,
            CpuShareChanged: self._on_cpu_share,
            TimerFired: self._on_timer,
        }

    # ------------------------------------------------------------------ view

    def ready_machines(self) -> list[MachineRecord]:
        """Machines whose request for work is held, oldest request first."""
        machines = self.machines
        return [machines[j] for j in self._ready]

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    def is_ready(self, machine: int) -> bool:
        return machine in self._ready

    def queue(self, key: Hashable) -> JobQueue | None:
        return self.queues.get(key)

    def replica(self, replica_id: int) -> ReplicaRecord | None:
        """A live replica by id."""
        return self._replicas.get(replica_id)

    def up_machines(self) -> list[MachineRecord]:
        return [m for m in self.machines if m.state is not MachineState.DOWN]

    # ------------------------------------------------------------------ driver API

    def start(self, now: float = 0.0) -> list[Output]:
        """Let the policy set itself up (solve an LP, set timers) and dispatch."""
        self.now = now
        self._out = out = []
        self._apply_all(self.policy.start(self))
        self._apply_all(self.policy.dispatch(self))
        return out

    def handle(self, now: float, event: Event) -> list[Output]:
        """Apply ``event`` at model time ``now``; return what the driver must do."""
        self.now = now
        self._out = out = []
        # A handler returns the machine whose request for work it registered, if any.
        asking = self._handlers[type(event)](event)
        policy = self.policy
        self._apply_all(policy.on_event(self, event))
        self._apply_all(policy.dispatch(self))
        if asking is not None and asking in self._ready:
            out.append(Hold(asking))
        return out

    def close(self, now: float) -> None:
        """Account up-time until ``now``; call once when the run ends."""
        self.now = now
        for m in self.machines:
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = now

    # ------------------------------------------------------------------ events

    def _on_job_arrived(self, ev: JobArrived) -> None:
        job = ev.job
        if job.id in self.jobs:
            self._stale(f"job {job.id} arrived twice")
            return
        if not 0 <= job.job_class < len(self.classes):
            raise ValueError(f"job {job.id} has class {job.job_class}; there are {len(self.classes)}")
        key = self.policy.queue_key(job)
        rec = JobRecord(job, key, self.now)
        self.jobs[job.id] = rec
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = JobQueue(key)
        q.append(rec)
        self.queued_count += 1

    def _on_machine_ready(self, ev: MachineReady) -> int:
        m = self.machines[ev.machine]
        if ev.cpu_share is not None and ev.cpu_share != m.cpu_share:
            m.cpu_share = ev.cpu_share
            self.capacity_version += 1
        if m.state is MachineState.DOWN:
            self._machine_up(m)
        elif m.state is MachineState.BUSY:
            # It asks for work while we think it runs a replica: that replica is gone.
            self._lose(m.replica, "machine asked for work while running it")
        self._make_ready(m)
        return m.index

    def _make_ready(self, m: MachineRecord) -> None:
        if m.state is not MachineState.READY:
            m.state = MachineState.READY
            self._ready[m.index] = None

    def _on_replica_done(self, ev: ReplicaDone) -> int | None:
        r = self._replicas.get(ev.replica)
        if r is None:
            r = self._lost.pop(ev.replica, None)
            if r is None or r.job.status is JobStatus.DONE:
                self._stale(f"replica {ev.replica} done but not running")
                return None
        live = r.live
        self._complete(r)
        if ev.ready and live:
            self._make_ready(self.machines[r.machine])
            return r.machine
        return None

    def _on_replica_failed(self, ev: ReplicaFailed) -> None:
        r = self._replicas.get(ev.replica)
        if r is None:
            self._stale(f"replica {ev.replica} failed but not running")
            return
        if ev.reason == "timeout":
            r.job.timeouts += 1
        self._lose(r, ev.reason)

    def _on_checkpoint(self, ev: ReplicaCheckpoint) -> None:
        r = self._replicas.get(ev.replica)
        if r is None:
            self._stale(f"checkpoint of replica {ev.replica} that is not running")
            return
        if not 0.0 <= ev.progress <= 1.0:
            raise ValueError(f"checkpoint progress {ev.progress} outside [0, 1]")
        if ev.progress > r.checkpoint:
            r.checkpoint = ev.progress
            if ev.progress > r.job.best_progress:
                r.job.best_progress = ev.progress

    def _on_machine_down(self, ev: MachineDown) -> None:
        m = self.machines[ev.machine]
        if m.state is MachineState.DOWN:
            self._stale(f"machine {m.name} down twice")
            return
        if m.replica is not None:
            self._lose(m.replica, "machine down")
        self._ready.pop(m.index, None)
        m.state = MachineState.DOWN
        m.stats.failures += 1
        if m.up_since is not None:
            m.stats.up_time += self.now - m.up_since
            m.up_since = None
        self.capacity_version += 1

    def _on_machine_up(self, ev: MachineUp) -> None:
        m = self.machines[ev.machine]
        if ev.cpu_share is not None and ev.cpu_share != m.cpu_share:
            m.cpu_share = ev.cpu_share
            self.capacity_version += 1
        if m.state is MachineState.DOWN:
            self._machine_up(m)

    def _on_cpu_share(self, ev: CpuShareChanged) -> None:
        m = self.machines[ev.machine]
        if ev.cpu_share != m.cpu_share:
            m.cpu_share = ev.cpu_share
            self.capacity_version += 1

    def _on_timer(self, ev: TimerFired) -> None:
        at = self.timers.get(ev.key)
        if at is None or self.now < at - TIMER_SLACK:
            self._stale(f"timer {ev.key!r} fired but is not due")
            return
        del self.timers[ev.key]
        self._apply_all(self.policy.on_timer(self, ev.key))

    # ------------------------------------------------------------------ decisions

    def _apply_all(self, decisions: Iterable | None) -> None:
        if decisions:
            apply = self._apply
            for d in decisions:
                apply(d)

    def _apply(self, d: object) -> None:
        t = type(d)
        if t is Assign:
            self._assign(d)  # type: ignore[arg-type]
        elif t is Hold:
            j = d.machine  # type: ignore[attr-defined]
            if j not in self._ready:
                raise PolicyError(f"hold of machine {j}, which is not asking for work")
            del self._ready[j]
            self._ready[j] = None
        elif t is Cancel:
            r = self._replicas.get(d.replica)  # type: ignore[attr-defined]
            if r is None:
                raise PolicyError(f"cancel of replica {d.replica}, which is not running")  # type: ignore[attr-defined]
            self._cancel(r)
        elif t is SetTimer:
            self.timers[d.key] = d.at  # type: ignore[attr-defined]
            self._out.append(d)  # type: ignore[arg-type]
        elif t is CancelTimer:
            if self.timers.pop(d.key, None) is not None:  # type: ignore[attr-defined]
                self._out.append(d)  # type: ignore[arg-type]
        else:
            raise PolicyError(f"a policy cannot decide {d!r}")

    def _assign(self, d: Assign) -> None:
        j = d.machine
        if j not in self._ready:
            raise PolicyError(f"assign to machine {j}, which is not asking for work")
        rec = self.jobs.get(d.job.id)
        if rec is None:
            raise PolicyError(f"assign of unknown job {d.job.id}")
        now = self.now
        status = rec.status
        if status is JobStatus.QUEUED:
            self.queues[rec.queue_key].remove(rec)
            self.queued_count -= 1
            rec.status = JobStatus.RUNNING
            rec.idle_time += now - rec.queued_since
            self.running[rec.job.id] = rec
        elif status is JobStatus.RUNNING:
            if len(rec.replicas) >= self.policy.max_replicas:
                raise PolicyError(
                    f"job {rec.job.id} has {len(rec.replicas)} replicas; the limit is {self.policy.max_replicas}"
                )
        else:
            raise PolicyError(f"assign of job {rec.job.id}, which is done")
        del self._ready[j]
        rid = self._next_replica
        self._next_replica = rid + 1
        rec.attempts += 1
        progress = rec.best_progress if self.policy.resume_from_checkpoint else 0.0
        r = ReplicaRecord(rid, rec, j, rec.attempts, now, progress)
        rec.replicas[rid] = r
        self._replicas[rid] = r
        if rec.first_sent is None:
            rec.first_sent = now
        m = self.machines[j]
        m.state = MachineState.BUSY
        m.replica = r
        self._out.append(Assign(rec.job, j, rid, progress))

    # ------------------------------------------------------------------ bookkeeping

    def _machine_up(self, m: MachineRecord) -> None:
        m.state = MachineState.FREE
        m.up_since = self.now
        self.capacity_version += 1

    def _release(self, r: ReplicaRecord) -> MachineRecord:
        """Detach a live replica from its job and machine; the machine becomes FREE."""
        r.live = False
        del r.job.replicas[r.id]
        del self._replicas[r.id]
        m = self.machines[r.machine]
        m.replica = None
        m.state = MachineState.FREE
        m.stats.busy_time += self.now - r.sent
        return m

    def _complete(self, r: ReplicaRecord) -> None:
        job = r.job
        now = self.now
        if r.live:
            m = self._release(r)
            st = m.stats
            c = job.job.job_class
            st.completed_by_class[c] += 1
            st.service_by_class[c] += now - r.sent
        else:  # a replica we had given up on delivered after all: take its result
            m = self.machines[r.machine]
            st = m.stats
            if job.status is JobStatus.QUEUED:
                self.queues[job.queue_key].remove(job)
                self.queued_count -= 1
        st.completed += 1
        job.status = JobStatus.DONE
        job.completed = now
        job.done_by = r.id
        job.done_on = r.machine
        job.done_sent = r.sent
        self.running.pop(job.job.id, None)
        for sibling in list(job.replicas.values()):
            self._cancel(sibling)
        self._out.append(JobCompleted(job.job, r.id, r.machine))

    def _cancel(self, r: ReplicaRecord) -> None:
        job = r.job
        m = self._release(r)
        m.stats.cancelled += 1
        self._out.append(Cancel(r.id, m.index, job.job.id))
        if job.status is JobStatus.RUNNING:
            self._lost[r.id] = r
            if not job.replicas:
                self._requeue(job, r, "cancelled")

    def _lose(self, r: ReplicaRecord | None, reason: str) -> None:
        assert r is not None
        m = self._release(r)
        m.stats.lost += 1
        self._lost[r.id] = r
        if not r.job.replicas:
            self._requeue(r.job, r, reason)

    def _requeue(self, job: JobRecord, r: ReplicaRecord, reason: str) -> None:
        job.status = JobStatus.QUEUED
        job.requeues += 1
        job.queued_since = self.now
        self.running.pop(job.job.id, None)
        self.queues[job.queue_key].requeue(job)
        self.queued_count += 1
        self._out.append(JobRequeued(job.job, r.id, r.machine, reason))

    def _stale(self, what: str) -> None:
        self.stale_events += 1
        log.debug("stale event at t=%s: %s", self.now, what)

    # ------------------------------------------------------------------ checks

    def check_invariants(self) -> None:
        """Raise AssertionError if the state is inconsistent (for tests)."""
        queued = 0
        for key, q in self.queues.items():
            for rec in q:
                assert rec.status is JobStatus.QUEUED, f"queue {key} holds {rec}"
                assert rec.queue_key == key
                assert not rec.replicas, f"queued {rec} has live replicas"
                queued += 1
        assert queued == self.queued_count, (queued, self.queued_count)
        for jid, rec in self.jobs.items():
            if rec.status is JobStatus.RUNNING:
                assert rec.replicas, f"running {rec} has no replica"
                assert jid in self.running
            else:
                assert jid not in self.running
            if rec.status is JobStatus.DONE:
                assert not rec.replicas and rec.completed is not None
            assert len(rec.replicas) <= max(1, self.policy.max_replicas)
        seen_machines: set[int] = set()
        for r in self._replicas.values():
            assert r.live and r.job.replicas.get(r.id) is r
            assert r.machine not in seen_machines, f"machine {r.machine} runs two replicas"
            seen_machines.add(r.machine)
            assert self.machines[r.machine].replica is r
        for m in self.machines:
            busy = m.state is MachineState.BUSY
            assert busy == (m.replica is not None), m
            assert (m.state is MachineState.READY) == (m.index in self._ready), m
