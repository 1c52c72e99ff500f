"""The scheduling state machine: events in, decisions out; no clock, no I/O, no randomness."""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from mgst.core.decisions import (
    Hold,
    Output,
)
from mgst.core.events import (
    BagArrived,
    CpuShareChanged,
    Event,
    JobArrived,
    MachineDown,
    MachineHeard,
    MachineReady,
    MachineSilent,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaComputing,
    ReplicaDone,
    ReplicaFailed,
    TimerFired,
)
from mgst.core.lifecycle import PolicyError
from mgst.core.matching import Matching
from mgst.core.ready import ReadyQueue
from mgst.core.state import (
    CHECKPOINT_TIE,
    BagRecord,
    JobQueue,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)
from mgst.model import Bag, Job, JobClass, Machine, StagingModel

if TYPE_CHECKING:
    from mgst.policies.base import Policy

log = logging.getLogger(__name__)

# A timer may be delivered this much model time early and still count (float round-off
# in drivers that convert wall time).
TIMER_SLACK: Final = 1e-9

__all__ = ["PolicyError", "Scheduler", "TIMER_SLACK"]


class Scheduler(Matching):
    """The scheduling core.

    Drivers call :meth:`start` once, then :meth:`handle` for every event (or the
    typed method of the same name, which saves making the event object), each
    time with the current model time, and carry out the decisions returned. The
    policy sees this object as its read-only view: the attributes and methods
    under "view" below; it changes nothing itself and acts only by returning
    decisions. The transitions themselves live in :class:`Lifecycle`, the matching
    and the decisions' effects in :class:`Matching`.
    """

    def __init__(
        self, classes: Sequence[JobClass], machines: Sequence[Machine], policy: Policy,
        staging: StagingModel | None = None,
    ):
        n = len(classes)
        for m in machines:
            if len(m.rates) != n:
                raise ValueError(f"machine {m.name!r} has {len(m.rates)} rates for {n} classes")
            if m.slots < 1:
                raise ValueError(f"machine {m.name!r} has {m.slots} slots; it needs at least 1")
        # --- view: read-only for policies ---
        self.now = 0.0
        self.classes: tuple[JobClass, ...] = tuple(classes)
        self.machines: tuple[MachineRecord, ...] = tuple(
            MachineRecord(j, m.name, tuple(m.rates), m.availability, m.slots, dict(m.attributes))
            for j, m in enumerate(machines)
        )
        self.jobs: dict[int, JobRecord] = {}  # every job ever seen, by id
        self.queues: dict[Hashable, JobQueue] = {}  # waiting jobs, by the policy's queue key
        self.queues_version = 0  # counts queues added to and removed from ``queues`` (for policies' caches)
        self.running: dict[int, JobRecord] = {}  # jobs with at least one live replica, by id
        self.bags: dict[int, BagRecord] = {}  # bags not yet complete, in arrival order
        self.all_bags: dict[int, BagRecord] = {}  # every bag ever seen, by id
        self.last_bag: BagRecord | None = None  # the bag of the latest BagArrived
        self.queued_count = 0
        self.capacity_version = 0  # bumped whenever a machine goes up or down or its a_j changes
        self.timers: dict[Hashable, float] = {}
        self.stale_events = 0  # events that referred to something already over (late done, ...)
        # Report Hold(machine) when an asking machine gets nothing, and JobCompleted when a job is
        # done; a driver with no use for them (the simulator) turns them off.
        self.report_holds = True
        self.report_completions = True
        # --- internal ---
        self.policy = policy
        self._ready = ReadyQueue()  # machines asking for work, in request order
        self._replicas: dict[int, ReplicaRecord] = {}  # live replicas
        # Replicas given up on (lost, timed out, or cancelled while their job went on) whose
        # result we would still take; one entry per failure or policy cancel, so it stays small.
        self._lost: dict[int, ReplicaRecord] = {}
        self._next_replica = 1
        self._no_progress: Any = 0.0  # (see Lifecycle._start)
        self._out: list[Output] = []
        self._dispatched_version = -1
        self._requeued = False  # a job went back to a queue during this event
        # Before start(), events only set up the initial state (machines up and asking, jobs
        # queued): no policy hook runs and nothing is matched, so that a policy that plans on
        # capacity changes (LPAS_DG's LP) plans once, in start(), not once per machine.
        self._begun = False
        self._stage_start = staging is not None and staging.start is not None
        self._stage_resume = staging is not None and staging.resume is not None
        self._resume = policy.resume_from_checkpoint
        self._bag_keys: bool | None = None  # do jobs wait by bag (True) or by class (False)?
        from mgst.policies.base import Policy as _Base  # noqa: PLC0415 (the base imports this module)

        kind = type(policy)
        # None: the default, every job waits in its class's queue (a task: in its bag's).
        self._queue_key = policy.queue_key if kind.queue_key is not _Base.queue_key else None
        # Make an event object for on_event only if the policy looks at it.
        self._policy_on_event = kind.on_event is not _Base.on_event
        # Ended replicas wait here for on_replica_end, if the policy looks at them.
        self._ended: list[ReplicaRecord] | None = [] if kind.on_replica_end is not _Base.on_replica_end else None
        # Started replicas wait here for on_replica_start, if the policy looks at them.
        self._started: list[ReplicaRecord] | None = (
            [] if kind.on_replica_start is not _Base.on_replica_start else None
        )
        # What _match needs of the policy, looked up once (class attributes of the policy).
        self._replicating = policy.max_replicas > 1
        self._incremental = policy.incremental and not self._replicating
        # Ask one ready machine per choose_groups() key when offering a new job (Policy.choose_groups).
        self._grouped = kind.choose_groups is not _Base.choose_groups and issubclass(
            _defined_in(kind, "choose_groups"), _defined_in(kind, "choose")
        )
        self._walks = 0
        self._refused_in: list[int] = []
        # None: the core matches, asking policy.choose().
        self._dispatch = policy.dispatch if kind.dispatch is not _Base.dispatch else None
        self._handlers: dict[type, Callable[[float, Any], list[Output]]] = {
            JobArrived: lambda now, e: self.job_arrived(now, e.job),
            BagArrived: lambda now, e: self.bag_arrived(now, e.bag),
            MachineReady: lambda now, e: self.machine_ready(now, e.machine, e.cpu_share, e.slots),
            ReplicaDone: lambda now, e: self.replica_done(now, e.replica, e.ready),
            ReplicaFailed: lambda now, e: self.replica_failed(now, e.replica, e.reason),
            ReplicaComputing: lambda now, e: self.replica_computing(now, e.replica),
            ReplicaCheckpoint: lambda now, e: self.replica_checkpoint(now, e.replica, e.progress),
            MachineDown: lambda now, e: self.machine_down(now, e.machine),
            MachineUp: lambda now, e: self.machine_up(now, e.machine, e.cpu_share),
            MachineSilent: lambda now, e: self.machine_silent(now, e.machine),
            MachineHeard: lambda now, e: self.machine_heard(now, e.machine),
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
        """Machines asking for work (each for ``asking`` slots)."""
        return len(self._ready)

    def is_ready(self, machine: int) -> bool:
        return machine in self._ready

    def queue(self, key: Hashable) -> JobQueue | None:
        return self.queues.get(key)

    def replica(self, replica_id: int) -> ReplicaRecord | None:
        """A live replica by id."""
        return self._replicas.get(replica_id)

    def live_replicas(self) -> Iterable[ReplicaRecord]:
        return self._replicas.values()

    def accepts_result(self, replica_id: int) -> bool:
        """Whether a result for this replica would count: it is live, or it was given up on
        (lost, cancelled, timed out) while its job still waits for a result. A driver checks this
        before it records anything of a reported result, so a replayed report changes nothing."""
        if replica_id in self._replicas:
            return True
        r = self._lost.get(replica_id)
        return r is not None and r.job.status is not JobStatus.DONE

    def given_up_replica(self, replica_id: int) -> ReplicaRecord | None:
        """A replica the core gave up on (lost, timed out, cancelled) whose result would still count."""
        r = self._lost.get(replica_id)
        return r if r is not None and r.job.status is not JobStatus.DONE else None

    def up_machines(self) -> list[MachineRecord]:
        return [m for m in self.machines if m.state is not MachineState.DOWN]

    # ------------------------------------------------------------------ driver API

    def start(self, now: float = 0.0) -> list[Output]:
        """Let the policy set itself up (solve an LP, set timers) and dispatch.

        Events before start() only set up the initial state (machines up and asking,
        jobs queued); the policy sees that state here, as a whole.
        """
        self.now = now
        out = self._out = []
        self._begun = True
        self._requeued = False
        self._dispatched_version = self.capacity_version
        self._apply_all(self.policy.start(self))
        if self._dispatch is None:
            self._match(None, None)
        else:
            self._apply_all(self._dispatch(self, None, None))
        if self._started or self._ended:
            self._replica_hooks()
        return out

    def handle(self, now: float, event: Event) -> list[Output]:
        """Apply ``event`` at model time ``now``; return what the driver must do."""
        return self._handlers[type(event)](now, event)

    # Typed entry points: each is handle(now, TheEvent(...)) without making the event.

    def job_arrived(self, now: float, job: Job) -> list[Output]:
        self.now = now
        self._out = []
        return self._after(JobArrived(job) if self._policy_on_event else None, new_job=self._enqueue(job))

    def bag_arrived(self, now: float, bag: Bag) -> list[Output]:
        """Every task of the bag enters its queue; then matching runs once, over all of them."""
        self.now = now
        self._out = []
        if bag.id in self.all_bags:
            self._stale(f"bag {bag.id} arrived twice")
            return self._after(BagArrived(bag) if self._policy_on_event else None, quiet=True)
        for task in bag.tasks:
            if task.bag != bag.id:
                raise ValueError(f"task {task.id} of bag {bag.id} says it belongs to bag {task.bag}")
            if task.id in self.jobs:
                raise ValueError(f"task {task.id} of bag {bag.id} has the id of an earlier job")
        if self._queue_key is None and self._bag_keys is False:
            raise ValueError(
                f"bag {bag.id} arrived after single jobs: a run mixing bags and single jobs needs a policy "
                "with its own queue_key"
            )
        rec = self._bag_record(bag.id, bag.submitted, dict(bag.attributes))
        for task in bag.tasks:
            self._enqueue(task)
        if not rec.size:
            self._bag_done(rec)
        self._requeued = True  # many jobs entered queues: every ready machine may take one
        return self._after(BagArrived(bag) if self._policy_on_event else None)

    def machine_ready(
        self, now: float, machine: int, cpu_share: float | None = None, slots: int | None = None
    ) -> list[Output]:
        self.now = now
        self._out = []
        m = self.machines[machine]
        if m.silent:  # its request is a sign of life
            self._heard(m)
        if not self._bring_up(m, cpu_share) and m.replicas and m.slots == 1 and (slots is None or slots > 0):
            # It asks for work while we think it runs a replica: that replica is gone.
            self._lose(m.replica, "machine asked for work while running it")  # type: ignore[arg-type]
        elif slots is not None and slots > m.slots - len(m.replicas):
            self._stale(f"machine {m.name} asks for {slots} slots; {m.slots - len(m.replicas)} are free")
        self._make_ready(m, slots)
        event = MachineReady(machine, cpu_share, slots) if self._policy_on_event else None
        return self._after(event, asking=m if m.asking else None)

    def replica_done(self, now: float, replica: int, ready: bool = False) -> list[Output]:
        self.now = now
        self._out = []
        r = self._replicas.get(replica)
        if r is None:
            r = self._lost.pop(replica, None)
            if r is None or r.job.status is JobStatus.DONE:
                self._stale(f"replica {replica} done but not running")
                return self._after(ReplicaDone(replica, ready) if self._policy_on_event else None)
        self._complete(r)
        if ready:
            m = self.machines[r.machine]
            if m.silent:  # its request is a sign of life
                self._heard(m)
            state = m.state
            if state is MachineState.FREE and m.slots == 1:  # the common case, inlined
                m.asking = 1
                m.state = MachineState.READY
                self._ready.add(m.index)
                return self._after(ReplicaDone(replica, ready) if self._policy_on_event else None, asking=m)
            if state is MachineState.DOWN and m.suspected:  # its result is its next request: back up
                self._bring_up(m, None)
                state = m.state
            if state is not MachineState.DOWN:
                self._make_ready(m, m.asking + 1)
                event = ReplicaDone(replica, ready) if self._policy_on_event else None
                return self._after(event, asking=m if m.asking else None)
        return self._after(ReplicaDone(replica, ready) if self._policy_on_event else None)

    def replica_failed(self, now: float, replica: int, reason: str = "failed") -> list[Output]:
        """The replica ended without result; reason "timeout" counts it as timed out (T/O)."""
        self.now = now
        self._out = []
        r = self._replicas.get(replica)
        if r is None:
            self._stale(f"replica {replica} failed but not running")
        elif reason == "timeout":
            self._time_out(r, notice=False)
        else:
            self._lose(r, reason, Outcome.FAILED)
        return self._after(ReplicaFailed(replica, reason) if self._policy_on_event else None)

    def replica_computing(self, now: float, replica: int) -> list[Output]:
        self.now = now
        self._out = []
        r = self._replicas.get(replica)
        if r is None:
            self._stale(f"replica {replica} computing but not running")
        else:
            self._computing(r)
        return self._after(ReplicaComputing(replica) if self._policy_on_event else None, quiet=True)

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
            job = r.job
            best = job.best_progress
            if progress > best:
                job.best_progress = progress  # a tie's larger value too: where a new replica resumes
                if progress - best > CHECKPOINT_TIE:
                    r.best = True
        return self._after(ReplicaCheckpoint(replica, progress) if self._policy_on_event else None, quiet=True)

    def machine_down(self, now: float, machine: int) -> list[Output]:
        self.now = now
        self._out = []
        m = self.machines[machine]
        if m.state is MachineState.DOWN:
            self._stale(f"machine {m.name} down twice")
        else:
            self._take_down(m)
        return self._after(MachineDown(machine) if self._policy_on_event else None)

    def machine_up(self, now: float, machine: int, cpu_share: float | None = None) -> list[Output]:
        self.now = now
        self._out = []
        self._bring_up(self.machines[machine], cpu_share)
        return self._after(MachineUp(machine, cpu_share) if self._policy_on_event else None)

    def machine_silent(self, now: float, machine: int) -> list[Output]:
        """The machine has fallen silent: it is offered no work, its replicas stay live, the policy's
        ``on_machine_silent`` decides what to give up on (see :class:`MachineSilent`)."""
        self.now = now
        self._out = []
        m = self.machines[machine]
        if m.state is MachineState.DOWN or m.silent:
            self._stale(f"machine {m.name} silent while {'silent' if m.silent else 'down'}")
            return self._after(MachineSilent(machine) if self._policy_on_event else None)
        m.silent = True
        self._make_ready(m, 0)  # its request, if any, is withdrawn
        self._apply_all(self.policy.on_machine_silent(self, m))
        return self._after(MachineSilent(machine) if self._policy_on_event else None)

    def machine_heard(self, now: float, machine: int) -> list[Output]:
        """A silent machine spoke again; it asks for work again with its next request."""
        self.now = now
        self._out = []
        m = self.machines[machine]
        if not m.silent:
            self._stale(f"machine {m.name} heard but not silent")
            return self._after(MachineHeard(machine) if self._policy_on_event else None, quiet=True)
        self._heard(m)
        return self._after(MachineHeard(machine) if self._policy_on_event else None, quiet=True)

    def _heard(self, m: MachineRecord) -> None:
        m.silent = False
        self._apply_all(self.policy.on_machine_heard(self, m))

    def cpu_share_changed(self, now: float, machine: int, cpu_share: float) -> list[Output]:
        """a_j changed: every computing replica on the machine moves its completion (see eta)."""
        self.now = now
        self._out = []
        self._set_share(self.machines[machine], cpu_share)
        return self._after(CpuShareChanged(machine, cpu_share) if self._policy_on_event else None)

    def timer_fired(self, now: float, key: Hashable) -> list[Output]:
        self.now = now
        self._out = []
        at = self.timers.get(key)
        if at is None or now < at - TIMER_SLACK:
            self._stale(f"timer {key!r} fired but is not due")
        else:
            del self.timers[key]
            self._apply_all(self.policy.on_timer(self, key))
        return self._after(TimerFired(key) if self._policy_on_event else None)

    def close(self, now: float) -> None:
        """Account up-time until ``now``; call once when the run ends."""
        self.now = now
        for m in self.machines:
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = now

    def _after(
        self, event: Event | None, *, new_job: JobRecord | None = None, asking: MachineRecord | None = None,
        quiet: bool = False,
    ) -> list[Output]:
        """Run the policy's hooks after an event and return the event's outputs.

        ``event`` is made only for a policy with an ``on_event`` hook (None otherwise): the entry
        points above build it with ``... if self._policy_on_event else None``.

        ``new_job`` or ``asking`` tell the policy's dispatch that the event's only
        effect on matching was that one job entered a queue or that one machine
        started asking, so that it may look at just that. ``quiet`` events
        (checkpoints, staging over) change nothing a dispatch could use.
        """
        if not self._begun:  # setting up the initial state: the policy sees it all in start()
            return self._out
        policy = self.policy
        if self._ended:
            self._replica_hooks()
        if self._policy_on_event:
            assert event is not None
            self._apply_all(policy.on_event(self, event))
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
        if self._started or self._ended:
            self._replica_hooks()
        if asking is not None and self.report_holds and asking.index in self._ready:
            self._out.append(Hold(asking.index))
        return self._out

    def _replica_hooks(self) -> None:
        """Deliver ended and started replicas to the policy until its decisions end or start no more."""
        policy = self.policy
        while self._ended or self._started:
            ended, started = self._ended, self._started
            if ended:
                self._ended = []
                for r in ended:
                    self._apply_all(policy.on_replica_end(self, r))
            if started:
                self._started = []
                for r in started:
                    self._apply_all(policy.on_replica_start(self, r))

    # ------------------------------------------------------------------ bookkeeping

    def _bag_record(self, bag_id: int, submitted: float, attributes: dict[str, Any]) -> BagRecord:
        key = bag_id
        rec = BagRecord(bag_id, submitted, key, attributes)
        self.bags[bag_id] = rec
        self.all_bags[bag_id] = rec
        self.last_bag = rec
        if self._queue_key is None:
            self.queues[key] = rec.queue
            self.queues_version += 1
        return rec

    def _key_of(self, job: Job, bag: BagRecord | None) -> Hashable:
        if self._queue_key is not None:
            return self._queue_key(job)
        by_bag = bag is not None
        if self._bag_keys is None:
            self._bag_keys = by_bag
        elif self._bag_keys != by_bag:
            raise ValueError(
                f"job {job.id} {'belongs to a bag' if by_bag else 'has no bag'} while earlier jobs "
                f"{'did not' if by_bag else 'did'}: a run mixing bags and single jobs needs a policy "
                "with its own queue_key"
            )
        return job.job_class if bag is None else bag.key

    def _enqueue(self, job: Job) -> JobRecord | None:
        fields: tuple[Any, ...] = job  # the Job's own id object (compiled, job.id would be boxed anew)
        if fields[0] in self.jobs:
            self._stale(f"job {job.id} arrived twice")
            return None
        if not 0 <= job.job_class < len(self.classes):
            raise ValueError(f"job {job.id} has class {job.job_class}; there are {len(self.classes)}")
        bag = None
        if job.bag is None and self._bag_keys is False and self._queue_key is None:  # classes: the fast path
            key: Hashable = job.job_class
        else:
            if job.bag is not None:
                bag = self.all_bags.get(job.bag)
                if bag is None:  # a task arriving on its own starts its bag
                    bag = self._bag_record(job.bag, job.submitted, {})
                elif bag.completed is not None:
                    raise ValueError(f"task {job.id} arrived for bag {job.bag}, which is complete")
            key = self._key_of(job, bag)
        rec = JobRecord(job, key, self.now, bag)
        self.jobs[rec.id_key] = rec
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = JobQueue(key)
            self.queues_version += 1
        q.append(rec)
        self.queued_count += 1
        if bag is not None:
            bag.size += 1
            bag.queued += 1
            bag.tasks.append(rec)
        return rec

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
            assert sum(1 for r in rec.history if r.outcome is Outcome.DONE) == (rec.status is JobStatus.DONE)
        for r in self._replicas.values():
            assert r.live and r.job.replicas.get(r.id) is r
            assert self.machines[r.machine].replicas.get(r.id) is r
        for m in self.machines:
            assert len(m.replicas) <= m.slots, f"{m} runs {len(m.replicas)} replicas in {m.slots} slots"
            assert 0 <= m.asking <= m.slots - len(m.replicas), (m, m.asking)
            assert (m.state is MachineState.READY) == (m.index in self._ready) == (m.asking > 0), m
            if m.state is MachineState.BUSY:
                assert m.replicas, m
            if m.state is MachineState.FREE or m.state is MachineState.DOWN:
                assert not m.replicas, m
        self._ready.check()
        for bag in self.all_bags.values():
            by_status = {s: 0 for s in JobStatus}
            for rec in bag.tasks:
                by_status[rec.status] += 1
            assert bag.queued == by_status[JobStatus.QUEUED], bag
            assert len(bag.running) == by_status[JobStatus.RUNNING], bag
            assert bag.done == by_status[JobStatus.DONE], bag
            assert bag.size == len(bag.tasks)
            done = bag.done == bag.size
            assert done == (bag.completed is not None) == (bag.id not in self.bags), bag
            if done and bag.tasks:
                assert bag.completed == max(rec.completed for rec in bag.tasks)  # type: ignore[type-var]


def _defined_in(kind: type, name: str) -> type:
    """The class of ``kind``'s method resolution order that defines attribute ``name``."""
    return next(k for k in kind.__mro__ if name in k.__dict__)
