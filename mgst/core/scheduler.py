"""The scheduling state machine: events in, decisions out; no clock, no I/O, no randomness.

Everything in the core revolves around :class:`Scheduler`. It holds, as objects of their own:
the records, which are the policy's read-only :class:`~mgst.core.view.View`; the ready queue
(machines asking for work, mgst.core.ready); the :class:`~mgst.core.lifecycle.Lifecycle`, which
makes the transitions of the table in mgst.core.transitions; and the
:class:`~mgst.core.matching.Matcher`, which matches by the policy's choose() and applies its
decisions. The policy (mgst.core.hooks) is called only through the hooks it declares.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final

from mgst.core.decisions import Hold, Output
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
from mgst.core.hooks import PolicyError, PolicyHooks, declared_hooks, uses_groups
from mgst.core.invariants import check_invariants
from mgst.core.lifecycle import Lifecycle
from mgst.core.matching import Matcher
from mgst.core.ready import ReadyQueue
from mgst.core.state import (
    BagRecord,
    JobQueue,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)
from mgst.core.view import View
from mgst.model import Bag, Job, JobClass, Machine, StagingModel

# A timer may be delivered this much model time early and still count (float round-off
# in drivers that convert wall time).
TIMER_SLACK: Final = 1e-9

__all__ = ["PolicyError", "Scheduler", "TIMER_SLACK"]


class Scheduler:
    """The scheduling core.

    Drivers call :meth:`start` once, then :meth:`handle` for every event (or the
    typed method of the same name, which saves making the event object), each
    time with the current model time, and carry out the decisions returned. The
    policy sees :attr:`view`; the Scheduler exposes the same attributes and read
    methods under the same names, for drivers and tests. With ``check``, every
    transition the core makes is checked against the table (mgst.core.transitions):
    for tests; it costs.
    """

    def __init__(
        self, classes: Sequence[JobClass], machines: Sequence[Machine], policy: PolicyHooks,
        staging: StagingModel | None = None, *, check: bool = False,
    ):
        n = len(classes)
        for m in machines:
            if len(m.rates) != n:
                raise ValueError(f"machine {m.name!r} has {len(m.rates)} rates for {n} classes")
            if m.slots < 1:
                raise ValueError(f"machine {m.name!r} has {m.slots} slots; it needs at least 1")
        kind = type(policy)
        hooks = declared_hooks(kind)  # PolicyError on a hook defined but not declared
        self.policy = policy
        self.hooks = hooks
        self.ready = ReadyQueue()  # machines asking for work, in request order
        self.view = View(classes, machines, self.ready)  # the records: what the policy reads
        self.lifecycle = Lifecycle(
            self.view, max_replicas=policy.max_replicas, resume=policy.resume_from_checkpoint,
            stage_start=staging is not None and staging.start is not None,
            stage_resume=staging is not None and staging.resume is not None,
            queue_key=policy.queue_key if "queue_key" in hooks else None, check=check,
        )
        self.matcher = Matcher(self.view, self.lifecycle, policy, grouped=uses_groups(kind, hooks))
        # The view's containers under their own names, for drivers and tests (the same objects).
        view = self.view
        self.classes = view.classes
        self.machines = view.machines
        self.jobs = view.jobs
        self.queues = view.queues
        self.running = view.running
        self.bags = view.bags
        self.all_bags = view.all_bags
        self.timers = view.timers
        # Report Hold(machine) when an asking machine gets nothing; a driver with no use for it (the
        # simulator) turns it off (and report_completions, JobCompleted).
        self.report_holds = True
        # The hooks the policy declares, looked up once. on_event: the event object is made only then.
        self._listening = "on_event" in hooks
        self._on_start = "start" in hooks
        self._on_capacity = "on_capacity_change" in hooks
        self._on_timer = "on_timer" in hooks
        self._on_silent = "on_machine_silent" in hooks
        self._on_heard = "on_machine_heard" in hooks
        self._matching = "choose" in hooks  # neither it nor dispatch: nothing is ever assigned
        # None: the core matches, asking policy.choose().
        self._dispatch = policy.dispatch if "dispatch" in hooks else None
        if "on_replica_end" in hooks:  # ended and started replicas wait there for the hooks
            self.lifecycle.ended = []
        if "on_replica_start" in hooks:
            self.lifecycle.started = []
        self._dispatched_version = -1
        # Before start(), events only set up the initial state (machines up and asking, jobs
        # queued): no policy hook runs and nothing is matched, so that a policy that plans on
        # capacity changes (LPAS_DG's LP) plans once, in start(), not once per machine.
        self._begun = False
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

    # ------------------------------------------------------------------ the view, for drivers and tests

    @property
    def now(self) -> float:
        return self.view.now

    @property
    def queued_count(self) -> int:
        return self.view.queued_count

    @property
    def queues_version(self) -> int:
        return self.view.queues_version

    @property
    def capacity_version(self) -> int:
        return self.view.capacity_version

    @property
    def stale_events(self) -> int:
        return self.view.stale_events

    @property
    def last_bag(self) -> BagRecord | None:
        return self.view.last_bag

    @property
    def report_completions(self) -> bool:
        """Report JobCompleted when a job is done (the simulator turns it off: its records say it all)."""
        return self.lifecycle.report_completions

    @report_completions.setter
    def report_completions(self, value: bool) -> None:
        self.lifecycle.report_completions = value

    @property
    def ready_count(self) -> int:
        return len(self.ready)

    def ready_machines(self) -> list[MachineRecord]:
        return self.view.ready_machines()

    def is_ready(self, machine: int) -> bool:
        return machine in self.ready

    def queue(self, key: Hashable) -> JobQueue | None:
        return self.view.queues.get(key)

    def replica(self, replica_id: int) -> ReplicaRecord | None:
        """A live replica by id."""
        return self.view.live.get(replica_id)

    def live_replicas(self) -> Iterable[ReplicaRecord]:
        return self.view.live.values()

    def accepts_result(self, replica_id: int) -> bool:
        return self.view.accepts_result(replica_id)

    def given_up_replica(self, replica_id: int) -> ReplicaRecord | None:
        return self.view.given_up_replica(replica_id)

    def up_machines(self) -> list[MachineRecord]:
        return self.view.up_machines()

    # ------------------------------------------------------------------ driver API

    def start(self, now: float = 0.0) -> list[Output]:
        """Let the policy set itself up (solve an LP, set timers) and dispatch.

        Events before start() only set up the initial state (machines up and asking,
        jobs queued); the policy sees that state here, as a whole.
        """
        self._begin(now)
        self._begun = True
        self.lifecycle.requeued = False
        self._dispatched_version = self.view.capacity_version
        if self._on_start:
            self.matcher.apply_all(self.policy.start(self.view))
        self._dispatch_now(None, None)
        return self.lifecycle.out

    def handle(self, now: float, event: Event) -> list[Output]:
        """Apply ``event`` at model time ``now``; return what the driver must do."""
        return self._handlers[type(event)](now, event)

    # Typed entry points: each is handle(now, TheEvent(...)) without making the event, and each has
    # the same three steps: _begin (the time, a new list of outputs), what the event changes (through
    # the Lifecycle; an event about something over is counted stale), and _after (the policy's hooks
    # and matching), given the event only if the policy declares on_event.

    def job_arrived(self, now: float, job: Job) -> list[Output]:
        self._begin(now)
        rec = self.lifecycle.enqueue(job)
        return self._after(JobArrived(job) if self._listening else None, new_job=rec)

    def bag_arrived(self, now: float, bag: Bag) -> list[Output]:
        """Every task of the bag enters its queue; then matching runs once, over all of them."""
        self._begin(now)
        lifecycle = self.lifecycle
        if bag.id in self.all_bags:
            lifecycle.stale(f"bag {bag.id} arrived twice")
            return self._after(BagArrived(bag) if self._listening else None, quiet=True)
        for task in bag.tasks:
            if task.bag != bag.id:
                raise ValueError(f"task {task.id} of bag {bag.id} says it belongs to bag {task.bag}")
            if task.id in self.jobs:
                raise ValueError(f"task {task.id} of bag {bag.id} has the id of an earlier job")
        if lifecycle.queue_key is None and lifecycle.bag_keys is False:
            raise ValueError(
                f"bag {bag.id} arrived after single jobs: a run mixing bags and single jobs needs a policy "
                "with its own queue_key"
            )
        rec = lifecycle.bag_record(bag.id, bag.submitted, dict(bag.attributes))
        for task in bag.tasks:
            lifecycle.enqueue(task)
        if not rec.size:
            lifecycle.bag_done(rec)
        lifecycle.requeued = True  # many jobs entered queues: every ready machine may take one
        return self._after(BagArrived(bag) if self._listening else None)

    def machine_ready(
        self, now: float, machine: int, cpu_share: float | None = None, slots: int | None = None
    ) -> list[Output]:
        self._begin(now)
        lifecycle = self.lifecycle
        m = self.machines[machine]
        if m.silent:  # its request is a sign of life
            self._heard(m)
        if not lifecycle.bring_up(m, cpu_share) and m.replicas and m.slots == 1 and (slots is None or slots > 0):
            # It asks for work while we think it runs a replica: that replica is gone.
            lifecycle.lose(m.replica, "machine asked for work while running it")  # type: ignore[arg-type]
        elif slots is not None and slots > m.slots - len(m.replicas):
            lifecycle.stale(f"machine {m.name} asks for {slots} slots; {m.slots - len(m.replicas)} are free")
        lifecycle.make_ready(m, slots)
        event = MachineReady(machine, cpu_share, slots) if self._listening else None
        return self._after(event, asking=m if m.asking else None)

    def replica_done(self, now: float, replica: int, ready: bool = False) -> list[Output]:
        self._begin(now)
        lifecycle = self.lifecycle
        r = self.view.live.get(replica)
        if r is None:
            r = self.view.given_up.pop(replica, None)
            if r is None or r.job.status is JobStatus.DONE:
                lifecycle.stale(f"replica {replica} done but not running")
                return self._after(ReplicaDone(replica, ready) if self._listening else None)
        lifecycle.complete(r)
        event = ReplicaDone(replica, ready) if self._listening else None
        if not ready:
            return self._after(event)
        m = self.machines[r.machine]
        if m.silent:  # its request is a sign of life
            self._heard(m)
        state = m.state
        if state is MachineState.FREE and m.slots == 1:  # the common case
            lifecycle.ask_one(m)
            return self._after(event, asking=m)
        if state is MachineState.DOWN and m.suspected:  # its result is its next request: back up
            lifecycle.bring_up(m, None)
            state = m.state
        if state is MachineState.DOWN:
            return self._after(event)
        lifecycle.make_ready(m, m.asking + 1)
        return self._after(event, asking=m if m.asking else None)

    def replica_failed(self, now: float, replica: int, reason: str = "failed") -> list[Output]:
        """The replica ended without result; reason "timeout" counts it as timed out (T/O)."""
        self._begin(now)
        r = self.view.live.get(replica)
        if r is None:
            self.lifecycle.stale(f"replica {replica} failed but not running")
        elif reason == "timeout":
            self.lifecycle.time_out(r, notice=False)
        else:
            self.lifecycle.lose(r, reason, Outcome.FAILED)
        return self._after(ReplicaFailed(replica, reason) if self._listening else None)

    def replica_computing(self, now: float, replica: int) -> list[Output]:
        self._begin(now)
        r = self.view.live.get(replica)
        if r is None:
            self.lifecycle.stale(f"replica {replica} computing but not running")
        else:
            self.lifecycle.computing(r)
        return self._after(ReplicaComputing(replica) if self._listening else None, quiet=True)

    def replica_checkpoint(self, now: float, replica: int, progress: float) -> list[Output]:
        self._begin(now)
        if not 0.0 <= progress <= 1.0:
            raise ValueError(f"checkpoint progress {progress} outside [0, 1]")
        r = self.view.live.get(replica)
        if r is None:
            self.lifecycle.stale(f"checkpoint of replica {replica} that is not running")
        else:
            self.lifecycle.checkpoint(r, progress)
        return self._after(ReplicaCheckpoint(replica, progress) if self._listening else None, quiet=True)

    def machine_down(self, now: float, machine: int) -> list[Output]:
        self._begin(now)
        m = self.machines[machine]
        if m.state is MachineState.DOWN:
            self.lifecycle.stale(f"machine {m.name} down twice")
        else:
            self.lifecycle.take_down(m)
        return self._after(MachineDown(machine) if self._listening else None)

    def machine_up(self, now: float, machine: int, cpu_share: float | None = None) -> list[Output]:
        self._begin(now)
        self.lifecycle.bring_up(self.machines[machine], cpu_share)
        return self._after(MachineUp(machine, cpu_share) if self._listening else None)

    def machine_silent(self, now: float, machine: int) -> list[Output]:
        """The machine has fallen silent: it is offered no work, its replicas stay live, the policy's
        ``on_machine_silent`` decides what to give up on (see :class:`MachineSilent`)."""
        self._begin(now)
        m = self.machines[machine]
        if m.state is MachineState.DOWN or m.silent:
            self.lifecycle.stale(f"machine {m.name} silent while {'silent' if m.silent else 'down'}")
        else:
            m.silent = True
            self.lifecycle.make_ready(m, 0)  # its request, if any, is withdrawn
            if self._on_silent:
                self.matcher.apply_all(self.policy.on_machine_silent(self.view, m))
        return self._after(MachineSilent(machine) if self._listening else None)

    def machine_heard(self, now: float, machine: int) -> list[Output]:
        """A silent machine spoke again; it asks for work again with its next request."""
        self._begin(now)
        m = self.machines[machine]
        if not m.silent:
            self.lifecycle.stale(f"machine {m.name} heard but not silent")
        else:
            self._heard(m)
        return self._after(MachineHeard(machine) if self._listening else None, quiet=True)

    def cpu_share_changed(self, now: float, machine: int, cpu_share: float) -> list[Output]:
        """a_j changed: every computing replica on the machine moves its completion (see eta)."""
        self._begin(now)
        self.lifecycle.set_share(self.machines[machine], cpu_share)
        return self._after(CpuShareChanged(machine, cpu_share) if self._listening else None)

    def timer_fired(self, now: float, key: Hashable) -> list[Output]:
        self._begin(now)
        at = self.timers.get(key)
        if at is None or now < at - TIMER_SLACK:
            self.lifecycle.stale(f"timer {key!r} fired but is not due")
        else:
            del self.timers[key]
            if self._on_timer:
                self.matcher.apply_all(self.policy.on_timer(self.view, key))
        return self._after(TimerFired(key) if self._listening else None)

    def close(self, now: float) -> None:
        """Account up-time until ``now``; call once when the run ends."""
        self.view.now = now
        for m in self.machines:
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = now

    # ------------------------------------------------------------------ the steps every event shares

    def _begin(self, now: float) -> None:
        """An event at ``now`` begins: the model time moves, and its outputs go to a new list."""
        self.view.now = now
        self.lifecycle.out = []

    def _heard(self, m: MachineRecord) -> None:
        m.silent = False
        if self._on_heard:
            self.matcher.apply_all(self.policy.on_machine_heard(self.view, m))

    def _after(
        self, event: Event | None, *, new_job: JobRecord | None = None, asking: MachineRecord | None = None,
        quiet: bool = False,
    ) -> list[Output]:
        """Run the policy's hooks after an event and return the event's outputs.

        ``event`` is made only for a policy that declares ``on_event`` (None otherwise).
        ``new_job`` or ``asking`` tell the policy's dispatch that the event's only
        effect on matching was that one job entered a queue or that one machine
        started asking, so that it may look at just that. ``quiet`` events
        (checkpoints, staging over) change nothing a dispatch could use.
        """
        lifecycle = self.lifecycle
        if not self._begun:  # setting up the initial state: the policy sees it all in start()
            return lifecycle.out
        policy = self.policy
        view = self.view
        if lifecycle.ended:
            self._replica_hooks()
        if self._listening:
            assert event is not None
            self.matcher.apply_all(policy.on_event(view, event))
        if view.capacity_version != self._dispatched_version:
            self._dispatched_version = view.capacity_version
            if self._on_capacity:
                self.matcher.apply_all(policy.on_capacity_change(view))
            new_job = asking_hint = None  # eligibility may have changed: look at everything
        elif lifecycle.requeued:
            new_job = asking_hint = None  # a job is back in a queue: any ready machine may take it
        elif quiet:
            return lifecycle.out
        else:
            asking_hint = asking
        lifecycle.requeued = False
        self._dispatch_now(new_job, asking_hint)
        if asking is not None and self.report_holds and asking.index in self.ready:
            lifecycle.out.append(Hold(asking.index))
        return lifecycle.out

    def _dispatch_now(self, new_job: JobRecord | None, asking: MachineRecord | None) -> None:
        """Matching: the policy's dispatch if it declares one, else the core's by its choose(); then the
        replica hooks, for the replicas it started and ended."""
        if self._dispatch is not None:
            self.matcher.apply_all(self._dispatch(self.view, new_job, asking))
        elif self._matching:
            self.matcher.match(new_job, asking)
        lifecycle = self.lifecycle
        if lifecycle.started or lifecycle.ended:
            self._replica_hooks()

    def _replica_hooks(self) -> None:
        """Deliver ended and started replicas to the policy until its decisions end or start no more."""
        policy = self.policy
        lifecycle = self.lifecycle
        apply_all = self.matcher.apply_all
        view = self.view
        while lifecycle.ended or lifecycle.started:
            ended, started = lifecycle.ended, lifecycle.started
            if ended:
                lifecycle.ended = []
                for r in ended:
                    apply_all(policy.on_replica_end(view, r))
            if started:
                lifecycle.started = []
                for r in started:
                    apply_all(policy.on_replica_start(view, r))

    def check_invariants(self) -> None:
        """Raise AssertionError if the state is inconsistent (for tests; mgst.core.invariants)."""
        check_invariants(self.view, self.lifecycle, max(1, self.policy.max_replicas))
