"""The scheduling state machine: events in, decisions out; no clock, no I/O, no randomness."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

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
from mgst.model import Job, JobClass, Machine

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

    Drivers call :meth:`start` once, then :meth:`handle` for every event (or the
    typed method of the same name, which saves making the event object), each
    time with the current model time, and carry out the decisions returned. The
    policy sees this object as its read-only view: the attributes and methods
    under "view" below; it changes nothing itself and acts only by returning
    decisions.
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
        # Replicas given up on (lost, or cancelled while their job went on) whose result we
        # would still take; one entry per failure or policy cancel, so it stays small.
        self._lost: dict[int, ReplicaRecord] = {}
        self._next_replica = 1
        self._out: list[Output] = []
        self._dispatched_version = -1
        self._requeued = False  # a job went back to a queue during this event
        from mgst.policies.base import Policy as _Base  # noqa: PLC0415 (the base imports this module)

        kind = type(policy)
        # None: the default, every job waits in its class's queue.
        self._queue_key = policy.queue_key if kind.queue_key is not _Base.queue_key else None
        # Make an event object for on_event only if the policy looks at it.
        self._policy_on_event = kind.on_event is not _Base.on_event
        # None: the core matches, asking policy.choose().
        self._dispatch = policy.dispatch if kind.dispatch is not _Base.dispatch else None
        self._handlers: dict[type, Callable[[float, Any], list[Output]]] = {
            JobArrived: lambda now, e: self.job_arrived(now, e.job),
            MachineReady: lambda now, e: self.machine_ready(now, e.machine, e.cpu_share),
            ReplicaDone: lambda now, e: self.replica_done(now, e.replica, e.ready),
            ReplicaFailed: lambda now, e: self.replica_failed(now, e.replica, e.reason),
            ReplicaCheckpoint: lambda now, e: self.replica_checkpoint(now, e.replica, e.progress),
            MachineDown: lambda now, e: self.machine_down(now, e.machine),
            MachineUp: lambda now, e: self.machine_up(now, e.machine, e.cpu_share),
            CpuShareChanged: lambda now, e: self.cpu_share_changed(now, e.machine, e.cpu_share),
            TimerFired: lambda now, e: self.timer_fired(now, e.key),
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

    def accepts_result(self, replica_id: int) -> bool:
        """Whether a result for this replica would count: it is live, or it was given up on
        (lost, cancelled) while its job still waits for a result. A driver checks this before
        it records anything of a reported result, so a replayed report changes nothing."""
        if replica_id in self._replicas:
            return True
        r = self._lost.get(replica_id)
        return r is not None and r.job.status is not JobStatus.DONE

    def up_machines(self) -> list[MachineRecord]:
        return [m for m in self.machines if m.state is not MachineState.DOWN]

    # ------------------------------------------------------------------ driver API

    def start(self, now: float = 0.0) -> list[Output]:
        """Let the policy set itself up (solve an LP, set timers) and dispatch."""
        self.now = now
        self._out = out = []
        self._dispatched_version = self.capacity_version
        self._apply_all(self.policy.start(self))
        if self._dispatch is None:
            self._match(None, None)
        else:
            self._apply_all(self._dispatch(self, None, None))
        return out

    def handle(self, now: float, event: Event) -> list[Output]:
        """Apply ``event`` at model time ``now``; return what the driver must do."""
        return self._handlers[type(event)](now, event)

    # Typed entry points: each is handle(now, TheEvent(...)) without making the event.

    def job_arrived(self, now: float, job: Job) -> list[Output]:
        self.now = now
        self._out = []
        return self._after(JobArrived, (job,), new_job=self._enqueue(job))

    def machine_ready(self, now: float, machine: int, cpu_share: float | None = None) -> list[Output]:
        self.now = now
        self._out = []
        m = self.machines[machine]
        if not self._bring_up(m, cpu_share) and m.state is MachineState.BUSY:
            # It asks for work while we think it runs a replica: that replica is gone.
            self._lose(m.replica, "machine asked for work while running it")  # type: ignore[arg-type]
        self._make_ready(m)
        return self._after(MachineReady, (machine, cpu_share), asking=m)

    def replica_done(self, now: float, replica: int, ready: bool = False) -> list[Output]:
        self.now = now
        self._out = []
        r = self._replicas.get(replica)
        if r is None:
            r = self._lost.pop(replica, None)
            if r is None or r.job.status is JobStatus.DONE:
                self._stale(f"replica {replica} done but not running")
                return self._after(ReplicaDone, (replica, ready))
        live = r.live
        self._complete(r)
        if ready and live:
            m = self.machines[r.machine]
            self._make_ready(m)
            return self._after(ReplicaDone, (replica, ready), asking=m)
        return self._after(ReplicaDone, (replica, ready))

    def replica_failed(self, now: float, replica: int, reason: str = "failed") -> list[Output]:
        self.now = now
        self._out = []
        r = self._replicas.get(replica)
        if r is None:
            self._stale(f"replica {replica} failed but not running")
        else:
            if reason == "timeout":
                r.job.timeouts += 1
            self._lose(r, reason)
        return self._after(ReplicaFailed, (replica, reason))

    def replica_checkpoint(self, now: float, replica: int, progress: float) -> list[Output]:
        self.now = now
        self._out = []
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"checkpoint progress {progress} outside [0, 1]")
        r = self._replicas.get(replica)
        if r is None:
            self._stale(f"checkpoint of replica {replica} that is not running")
        elif progress > r.checkpoint:
            r.checkpoint = progress
            if progress > r.job.best_progress:
                r.job.best_progress = progress
        return self._after(ReplicaCheckpoint, (replica, progress), quiet=True)

    def machine_down(self, now: float, machine: int) -> list[Output]:
        self.now = now
        self._out = []
        m = self.machines[machine]
        if m.state is MachineState.DOWN:
            self._stale(f"machine {m.name} down twice")
        else:
            if m.replica is not None:
                self._lose(m.replica, "machine down")
            self._ready.pop(m.index, None)
            m.state = MachineState.DOWN
            m.stats.failures += 1
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = None
            self.capacity_version += 1
        return self._after(MachineDown, (machine,))

    def machine_up(self, now: float, machine: int, cpu_share: float | None = None) -> list[Output]:
        self.now = now
        self._out = []
        self._bring_up(self.machines[machine], cpu_share)
        return self._after(MachineUp, (machine, cpu_share))

    def cpu_share_changed(self, now: float, machine: int, cpu_share: float) -> list[Output]:
        self.now = now
        self._out = []
        self._set_share(self.machines[machine], cpu_share)
        return self._after(CpuShareChanged, (machine, cpu_share))

    def timer_fired(self, now: float, key: Hashable) -> list[Output]:
        self.now = now
        self._out = []
        at = self.timers.get(key)
        if at is None or now < at - TIMER_SLACK:
            self._stale(f"timer {key!r} fired but is not due")
        else:
            del self.timers[key]
            self._apply_all(self.policy.on_timer(self, key))
        return self._after(TimerFired, (key,))

    def close(self, now: float) -> None:
        """Account up-time until ``now``; call once when the run ends."""
        self.now = now
        for m in self.machines:
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = now

    def _after(
        self, kind: type, args: tuple, *, new_job: JobRecord | None = None, asking: MachineRecord | None = None,
        quiet: bool = False,
    ) -> list[Output]:
        """Run the policy's hooks after an event and return the event's outputs.

        ``new_job`` or ``asking`` tell the policy's dispatch that the event's only
        effect on matching was that one job entered a queue or that one machine
        started asking, so that it may look at just that. ``quiet`` events
        (checkpoints) change nothing a dispatch could use.
        """
        policy = self.policy
        if self._policy_on_event:
            self._apply_all(policy.on_event(self, kind(*args)))
        if self.capacity_version != self._dispatched_version:
            self._dispatched_version = self.capacity_version
            self._apply_all(policy.on_capacity_change(self))
            new_job = asking_hint = None  # eligibility may have changed: look at everything
        elif self._requeued:
            new_job = asking_hint = None  # a job is back in a queue: any ready machine may take it
        elif quiet:
            return self._out
        else:
            asking_hint = asking
        self._requeued = False
        if self._dispatch is None:
            self._match(new_job, asking_hint)
        else:
            self._apply_all(self._dispatch(self, new_job, asking_hint))
        if asking is not None and asking.index in self._ready:
            self._out.append(Hold(asking.index))
        return self._out

    # ------------------------------------------------------------------ matching

    def _match(self, new_job: JobRecord | None, asking: MachineRecord | None) -> None:
        """The default matching, for policies that implement only ``choose``.

        Ready machines are offered work in request order; one that gets nothing
        goes to the back of the ready queue (the rotating server queue of MGST
        section 4.3.1). For an ``incremental`` policy that does not replicate, an
        asking machine alone is offered work, and a new job is offered to ready
        machines from the head until one takes something; otherwise (and after
        any requeue or capacity change) every ready machine is offered work
        once. That is exact when choose() looks only at the machine and the
        queues: a machine that got nothing can then get something only when a
        job arrives, and taking jobs away never makes another machine eligible.
        """
        ready = self._ready
        policy = self.policy
        replicating = policy.max_replicas > 1
        if not ready or (not self.queued_count and not replicating):
            return
        choose = policy.choose
        # A replicating choose() changes its answer when a job starts running: not incremental.
        if policy.incremental and not replicating:
            if asking is not None:
                rec = choose(self, asking)
                if rec is not None:
                    self._start(rec, asking)
                return
            if new_job is not None:
                machines = self.machines
                for j in list(ready):
                    m = machines[j]
                    rec = choose(self, m)
                    if rec is not None:
                        self._start(rec, m)
                        return
                    del ready[j]  # passed over: to the back
                    ready[j] = None
                return
        machines = self.machines
        for j in list(ready):
            m = machines[j]
            rec = choose(self, m)
            if rec is None:
                del ready[j]
                ready[j] = None
            else:
                self._start(rec, m)
                if not self.queued_count and not replicating:
                    return

    # ------------------------------------------------------------------ bookkeeping

    def _enqueue(self, job: Job) -> JobRecord | None:
        if job.id in self.jobs:
            self._stale(f"job {job.id} arrived twice")
            return None
        if not 0 <= job.job_class < len(self.classes):
            raise ValueError(f"job {job.id} has class {job.job_class}; there are {len(self.classes)}")
        key = job.job_class if self._queue_key is None else self._queue_key(job)
        rec = JobRecord(job, key, self.now)
        self.jobs[job.id] = rec
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = JobQueue(key)
        q.append(rec)
        self.queued_count += 1
        return rec

    def _make_ready(self, m: MachineRecord) -> None:
        if m.state is not MachineState.READY:
            m.state = MachineState.READY
            self._ready[m.index] = None

    def _set_share(self, m: MachineRecord, share: float | None) -> None:
        if share is not None and share != m.cpu_share:
            if not 0.0 <= share <= 1.0:
                raise ValueError(f"CPU share {share} of machine {m.name} outside [0, 1]")
            m.cpu_share = share
            self.capacity_version += 1

    # ------------------------------------------------------------------ decisions

    def _apply_all(self, decisions: Iterable | None) -> None:
        if decisions:
            apply = self._apply
            for d in decisions:
                apply(d)

    def _apply(self, d: object) -> None:
        """Check and carry out one decision of the policy."""
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
        rec = self.jobs.get(d.job.id)
        if rec is None:
            raise PolicyError(f"assign of unknown job {d.job.id}")
        self._start(rec, self.machines[d.machine])

    def _start(self, rec: JobRecord, m: MachineRecord) -> None:
        """Start a replica of ``rec`` on ready machine ``m``."""
        j = m.index
        if j not in self._ready:
            raise PolicyError(f"assign to machine {m.name}, which is not asking for work")
        if m.rates[rec.job.job_class] <= 0.0:
            raise PolicyError(f"assign of a class-{rec.job.job_class + 1} job to {m.name}, which cannot run it")
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
        m.state = MachineState.BUSY
        m.replica = r
        self._out.append(Assign(rec.job, j, rid, progress))

    def _bring_up(self, m: MachineRecord, share: float | None) -> bool:
        """Note the machine's CPU share; bring it up if it was down (then True)."""
        self._set_share(m, share)
        if m.state is MachineState.DOWN:
            self._machine_up(m)
            return True
        return False

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
            st = self._release(r).stats
        else:  # a replica we had given up on delivered after all: take its result
            st = self.machines[r.machine].stats
            if job.status is JobStatus.QUEUED:
                self.queues[job.queue_key].remove(job)
                self.queued_count -= 1
        c = job.job.job_class
        st.completed_by_class[c] += 1
        st.service_by_class[c] += now - r.sent
        st.completed += 1
        job.status = JobStatus.DONE
        job.completed = now
        job.done_by = r.id
        job.done_on = r.machine
        job.done_sent = r.sent
        self.running.pop(job.job.id, None)
        if job.replicas:
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
        self._requeued = True
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
