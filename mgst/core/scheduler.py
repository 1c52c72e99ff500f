"""The scheduling state machine: events in, decisions out; no clock, no I/O, no randomness.

Everything in the core revolves around :class:`Scheduler`. It holds, as objects of their own: the
records, which are the policy's read-only :class:`~mgst.core.view.View`; the ready queue (machines
asking for work, mgst.core.ready); the :class:`~mgst.core.arrivals.Arrivals`, which make the
records of arriving jobs and bags; the :class:`~mgst.core.lifecycle.Lifecycle`, which makes the
transitions of the table in mgst.core.transitions; and the :class:`~mgst.core.matching.Matcher`,
which runs the policy after each event (only the hooks it declares: mgst.core.hooks), matches by
its choose() and applies its decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Final

from mgst.core.arrivals import Arrivals
from mgst.core.decisions import InputError, Output, shown
from mgst.core.events import (
    BagArrived,
    CpuShareChanged,
    Event,
    JobArrived,
    MachineAvailability,
    MachineDown,
    MachineHeard,
    MachineReady,
    MachineSilent,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaComputing,
    ReplicaDone,
    ReplicaFailed,
    RunStart,
    TimerFired,
)
from mgst.core.hooks import PolicyError, PolicyHooks, declared_hooks
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
from mgst.model import Availability, Bag, Job, JobClass, Machine, StagingModel

# A timer may be delivered this much model time early and still count (float round-off
# in drivers that convert wall time).
TIMER_SLACK: Final = 1e-9
# A timer that fires more times than this at one model time is re-armed there by the policy (for now or earlier, in
# on_timer: alone, or with others that arm it in turn), so model time never moves on: the run would hang. It is the
# policy's error, in both drivers. Far above any count of firings that lets time move (a timer fires once a setting).
TIMER_REFIRES: Final = 1000

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
            if m.cpus is not None and not 1 <= m.cpus <= m.slots:
                raise ValueError(f"machine {m.name!r} has {m.cpus} cpus for {m.slots} slots; it needs 1 to {m.slots}")
        declared = declared_hooks(type(policy))  # PolicyError on a hook defined but not declared
        hooks = policy.active_hooks(declared)  # (its options may leave some unused)
        if not hooks <= declared:
            raise PolicyError(f"{type(policy).__qualname__}.active_hooks() returned hooks it does not declare: "
                              f"{', '.join(sorted(hooks - declared))}")
        self.policy = policy
        self.hooks = hooks
        self.closed_at: float | None = None  # when close() accounted the run's end (once)
        self.started = False  # whether start() has run (a driver feeds RunStart once)
        # The model time of the latest timer fired, and how many times each key fired at it (TIMER_REFIRES).
        self._fired_at = -math.inf
        self._fired: dict[Hashable, int] = {}
        self.ready = ReadyQueue()  # machines asking for work, in request order
        self.view = View(classes, machines, self.ready)  # the records: what the policy reads
        self.view.sizes_known = bool(policy.knows_sizes)
        self.view.policy_name = str(getattr(policy, "name", "")) or type(policy).__qualname__
        self.lifecycle = Lifecycle(
            self.view, max_replicas=policy.max_replicas, resume=policy.resume_from_checkpoint,
            stage_start=staging is not None and staging.start is not None,
            stage_resume=staging is not None and staging.resume is not None, check=check,
            cancel_losers=bool(policy.cancel_losers),
        )
        self.arrivals = Arrivals(self.view, self.lifecycle, policy.queue_key if "queue_key" in hooks else None)
        self.matcher = Matcher(self.view, self.lifecycle, policy, hooks)
        self._listening = self.matcher.listening  # make the event object for the policy's on_event
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
        self._handlers: dict[type, Callable[[float, Any], list[Output]]] = {
            RunStart: lambda now, e: self.start(now),
            JobArrived: lambda now, e: self.job_arrived(now, e.job),
            BagArrived: lambda now, e: self.bag_arrived(now, e.bag),
            MachineReady: lambda now, e: self.machine_ready(now, e.machine, e.cpu_share, e.slots),
            ReplicaDone: lambda now, e: self.replica_done(now, e.replica, e.ready, e.computed),
            ReplicaFailed: lambda now, e: self.replica_failed(now, e.replica, e.reason),
            ReplicaComputing: lambda now, e: self.replica_computing(now, e.replica),
            ReplicaCheckpoint: lambda now, e: self.replica_checkpoint(now, e.replica, e.progress),
            MachineDown: lambda now, e: self.machine_down(now, e.machine),
            MachineUp: lambda now, e: self.machine_up(now, e.machine, e.cpu_share),
            MachineSilent: lambda now, e: self.machine_silent(now, e.machine),
            MachineHeard: lambda now, e: self.machine_heard(now, e.machine),
            CpuShareChanged: lambda now, e: self.cpu_share_changed(now, e.machine, e.cpu_share),
            MachineAvailability: lambda now, e: self.machine_availability(now, e.machine, e.state, e.cpu_share),
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
    def report_holds(self) -> bool:
        """Report Hold(machine) when an asking machine gets nothing (the simulator turns it off)."""
        return self.matcher.report_holds

    @report_holds.setter
    def report_holds(self, value: bool) -> None:
        self.matcher.report_holds = value

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
        self.started = True
        self.matcher.start()
        return self.lifecycle.out

    def handle(self, now: float, event: Event) -> list[Output]:
        """Apply ``event`` at model time ``now``; return what the driver must do. The one entry point for a driver
        that records what it feeds the core (the mapper's journal records each event, typed, and replays it here)."""
        return self._handlers[type(event)](now, event)

    # Typed entry points: each is handle(now, TheEvent(...)) without making the event, in the same three
    # steps: _begin (the model time, a new list of outputs); what the event changes, through the
    # Arrivals and the Lifecycle (an event about something over is counted stale there); and the
    # Matcher's after_event (the policy's hooks, then matching), given the event only if the policy
    # declares on_event, and told whether a new job or an asking machine is all that changed.

    def job_arrived(self, now: float, job: Job) -> list[Output]:
        self._begin(now)
        rec = self.arrivals.job(job)
        return self.matcher.after_event(JobArrived(job) if self._listening else None, rec, None, False)

    def bag_arrived(self, now: float, bag: Bag) -> list[Output]:
        """Every task of the bag enters its queue; then matching runs once, over all of them."""
        self._begin(now)
        arrived = self.arrivals.bag(bag)
        return self.matcher.after_event(BagArrived(bag) if self._listening else None, None, None, not arrived)

    def machine_ready(
        self, now: float, machine: int, cpu_share: float | None = None, slots: int | None = None
    ) -> list[Output]:
        self._begin(now)
        lifecycle = self.lifecycle
        m = self.machines[machine]
        if m.silent:  # its request is a sign of life
            self.matcher.heard(m)
        if not lifecycle.bring_up(m, cpu_share) and m.replicas and m.slots == 1 and (slots is None or slots > 0):
            # It asks for work while we think it runs a replica: that replica is gone.
            lifecycle.lose(m.replica, "machine asked for work while running it")  # type: ignore[arg-type]
        elif slots is not None and slots > m.slots - len(m.replicas):
            lifecycle.stale(f"machine {m.name} asks for {slots} slots; {m.slots - len(m.replicas)} are free")
        lifecycle.make_ready(m, slots)
        event = MachineReady(machine, cpu_share, slots) if self._listening else None
        return self.matcher.after_event(event, None, m if m.asking else None, False)

    def replica_done(
        self, now: float, replica: int, ready: bool = False, computed: float | None = None
    ) -> list[Output]:
        """A replica's result; ``computed``: how long it computed, if the driver measured it (see ReplicaDone)."""
        self._begin(now)
        lifecycle = self.lifecycle
        if computed is not None and not (computed >= 0.0 and math.isfinite(computed)):
            raise InputError(f"replica {replica}: compute time {computed} is not a finite number >= 0")
        event = ReplicaDone(replica, ready, computed) if self._listening else None
        r = self.view.live.get(replica)
        if r is None:
            r = self.view.given_up.pop(replica, None)
            if r is None or r.job.status is JobStatus.DONE:
                lifecycle.stale(f"replica {replica} done but not running")
                return self.matcher.after_event(event, None, None, False)
            lifecycle.complete(r, computed)
        elif r.job.status is JobStatus.DONE:  # a loser that ran on (the policy lets them): its result is waste
            lifecycle.discard(r)
        else:
            lifecycle.complete(r, computed)
        if not ready:
            return self.matcher.after_event(event, None, None, False)
        m = self.machines[r.machine]
        if m.silent:  # its request is a sign of life
            self.matcher.heard(m)
        state = m.state
        if state is MachineState.FREE and m.slots == 1 and m.cpu_share > 0.0 and not m.reclaimed:  # the common case
            lifecycle.ask_one(m)
            return self.matcher.after_event(event, None, m, False)
        if state is MachineState.DOWN and m.suspected:  # its result is its next request: back up
            lifecycle.bring_up(m, None)
            state = m.state
        if state is MachineState.DOWN:
            return self.matcher.after_event(event, None, None, False)
        lifecycle.make_ready(m, m.asking + 1)
        return self.matcher.after_event(event, None, m if m.asking else None, False)

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
        return self.matcher.after_event(ReplicaFailed(replica, reason) if self._listening else None, None, None, False)

    def replica_computing(self, now: float, replica: int) -> list[Output]:
        self._begin(now)
        r = self.view.live.get(replica)
        if r is None:
            self.lifecycle.stale(f"replica {replica} computing but not running")
        else:
            self.lifecycle.computing(r)
        return self.matcher.after_event(ReplicaComputing(replica) if self._listening else None, None, None, True)

    def replica_checkpoint(self, now: float, replica: int, progress: float) -> list[Output]:
        self._begin(now)
        if not 0.0 <= progress <= 1.0:
            raise InputError(f"checkpoint progress {progress} outside [0, 1]")
        r = self.view.live.get(replica)
        if r is None:
            self.lifecycle.stale(f"checkpoint of replica {replica} that is not running")
        else:
            self.lifecycle.checkpoint(r, progress)
        event = ReplicaCheckpoint(replica, progress) if self._listening else None
        return self.matcher.after_event(event, None, None, True)

    def machine_down(self, now: float, machine: int) -> list[Output]:
        self._begin(now)
        m = self.machines[machine]
        if m.state is MachineState.DOWN:
            self.lifecycle.stale(f"machine {m.name} down twice")
        else:
            self.lifecycle.take_down(m)
        return self.matcher.after_event(MachineDown(machine) if self._listening else None, None, None, False)

    def machine_up(self, now: float, machine: int, cpu_share: float | None = None) -> list[Output]:
        self._begin(now)
        self.lifecycle.bring_up(self.machines[machine], cpu_share)
        return self.matcher.after_event(MachineUp(machine, cpu_share) if self._listening else None, None, None, False)

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
            self.matcher.silent(m)
        return self.matcher.after_event(MachineSilent(machine) if self._listening else None, None, None, False)

    def machine_heard(self, now: float, machine: int) -> list[Output]:
        """A silent machine spoke again; it asks for work again with its next request."""
        self._begin(now)
        m = self.machines[machine]
        if not m.silent:
            self.lifecycle.stale(f"machine {m.name} heard but not silent")
        else:
            self.matcher.heard(m)
        return self.matcher.after_event(MachineHeard(machine) if self._listening else None, None, None, True)

    def cpu_share_changed(self, now: float, machine: int, cpu_share: float) -> list[Output]:
        """a_j changed: every computing replica on the machine moves its completion (an Eta each); at 0 the
        machine asks for no work (its request is withdrawn) until a share is back and it asks again."""
        self._begin(now)
        m = self.machines[machine]
        self.lifecycle.set_share(m, cpu_share)
        if cpu_share <= 0.0 and m.state is MachineState.READY:
            self.lifecycle.make_ready(m, 0)
        event = CpuShareChanged(machine, cpu_share) if self._listening else None
        return self.matcher.after_event(event, None, None, False)

    def machine_availability(self, now: float, machine: int, state: Availability, cpu_share: float) -> list[Output]:
        """The machine is UP or RECLAIMED at ``cpu_share`` (DOWN: machine_down). Its replicas move (an Eta each); a
        RECLAIMED one, or one at share 0, asks for no work until it is UP with a share and asks again."""
        state = Availability(state)  # (a journal replays it as its number)
        if state is Availability.DOWN:
            return self.machine_down(now, machine)
        self._begin(now)
        if not 0.0 <= cpu_share <= 1.0:
            raise InputError(f"CPU share {cpu_share} of machine {self.machines[machine].name} outside [0, 1]")
        self.lifecycle.set_availability(self.machines[machine], state is Availability.RECLAIMED, cpu_share)
        event = MachineAvailability(machine, state, cpu_share) if self._listening else None
        return self.matcher.after_event(event, None, None, False)

    def timer_fired(self, now: float, key: Hashable) -> list[Output]:
        self._begin(now)
        at = self.timers.get(key)
        if at is None or now < at - TIMER_SLACK:
            self.lifecycle.stale(f"timer {key!r} fired but is not due")
        else:
            del self.timers[key]
            self._count_firing(now, key)
            self.matcher.timer(key)
        return self.matcher.after_event(TimerFired(key) if self._listening else None, None, None, False)

    def _count_firing(self, now: float, key: Hashable) -> None:
        """A timer fires at ``now``: PolicyError if ``key`` has fired more than TIMER_REFIRES times at that model time
        (the policy re-arms it there, and time cannot move on)."""
        fired = self._fired
        if now != self._fired_at:
            self._fired_at = now
            fired.clear()
        n = fired.get(key, 0) + 1
        fired[key] = n
        if n > TIMER_REFIRES:
            raise PolicyError(f"timer {shown(key)} fired {TIMER_REFIRES:,} times at model time {now:g}: the policy "
                              "sets it again, in on_timer, for that time or an earlier one, so model time can never "
                              "move on (set the next one later: view.now + a period)")

    def close(self, now: float) -> None:
        """Account up-time until ``now``, the busy time of replicas still live (cut off by the run's end: a machine
        that ran one replica all along is busy all along), and the waste of losers among them; call once when the run
        ends; a second call raises (it would count the live replicas' busy time twice)."""
        if self.closed_at is not None:
            raise RuntimeError(f"the scheduler was closed at {self.closed_at:g}: close() accounts the run's end once")
        self.closed_at = now
        self.view.now = now
        for m in self.machines:
            if m.up_since is not None:
                m.stats.up_time += now - m.up_since
                m.up_since = now
            for r in m.replicas.values():
                held = r.charged_until(now)  # (its time waiting on the host for a CPU is not charged)
                m.stats.busy_time += held
                if r.discarded:
                    m.stats.discarded += 1
                    m.stats.discarded_time += held

    def out_of_queue(self) -> list[int]:
        """Jobs waiting yet in no queue (their ``qtoken`` 0): only a policy that wrote to its view (took a job out of
        a queue) leaves one, and such a job never runs; the ids, for a driver to say so at the run's end."""
        if not self.view.queued_count:  # (such a job is still counted waiting: none counted, none to look for)
            return []
        return [rec.job.id for rec in self.jobs.values() if rec.status is JobStatus.QUEUED and not rec.qtoken]

    def retire(self, rec: JobRecord) -> None:
        """A done job whose replicas have all ended leaves the core, for a driver that keeps no records (the
        simulator streaming its results): out of ``jobs``, its given-up replicas out of ``given_up`` (a result of
        theirs is stale either way, as its job is done), and its history cut (a replica points back at its job: a
        cycle), so that the record is freed at once. A bag's task keeps its history until its bag is complete and
        all its tasks are retired: the driver then takes the bag's replica totals and drops its tasks."""
        if rec.status is not JobStatus.DONE or rec.replicas:
            raise ValueError(f"job {rec.job.id} is not over: it cannot leave the core")
        view = self.view
        del view.jobs[rec.id_key]
        given_up = view.given_up
        if given_up:
            for r in rec.history:
                given_up.pop(r.id_key, None)
        if rec.bag is None:
            rec.history.clear()

    def _begin(self, now: float) -> None:
        """An event at ``now`` begins: the model time moves, and its outputs go to a new list."""
        self.view.now = now
        out: list[Output] = []
        self.lifecycle.out = out
        self.lifecycle.progress.out = out

    def check_invariants(self) -> None:
        """Raise AssertionError if the state is inconsistent (for tests; mgst.core.invariants)."""
        check_invariants(self.view, self.lifecycle, max(1, self.policy.max_replicas))


def out_of_queue_text(ids: list[int]) -> str:
    """What a run says of jobs left waiting in no queue (:meth:`Scheduler.out_of_queue`)."""
    shown_ids = ", ".join(str(i) for i in ids[:10]) + (", ..." if len(ids) > 10 else "")
    return (f"{len(ids)} job{'s' if len(ids) != 1 else ''} ({shown_ids}) waiting in no queue at the run's end: the "
            "policy took them out of the view's queues, so they never ran (the view is read-only: a policy decides "
            "by what it returns)")
