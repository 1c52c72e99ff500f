"""The discrete-event driver: runs the scheduling core on a virtual clock."""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any, Final

from mgst.availability.process import Period, State
from mgst.availability.registry import overlay_grids
from mgst.core.decisions import Assign, Cancel, Eta, MachineSuspected, PolicyError, ReplicaTimedOut, SetTimer
from mgst.core.scheduler import Scheduler, out_of_queue_text
from mgst.core.state import MachineState
from mgst.model import Bag, Experiment, Job
from mgst.policies import build_policy
from mgst.sim.availability_feed import PeriodEvents, held_end
from mgst.sim.event_heap import Entry, EventHeap, new_event_heap
from mgst.sim.overheads import Overheads, OverheadSampler, grid_return_delays
from mgst.sim.overlay import Overlay
from mgst.sim.replication_run import ReplicationRun, machine_summary
from mgst.sim.streamed_totals import StreamedTotals
from mgst.staging import StagingSampler
from mgst.streams import Purpose, python_random
from mgst.workload import make_workload
from mgst.workload.poisson import PoissonWorkload

log = logging.getLogger(__name__)

# Event kinds, in the order they are handled when they fall at the same instant:
# completions before failures before arrivals, so a job done at the instant its
# machine fails counts as done (either order is a measure-zero event).
_DONE: Final = 0
_CHECKPOINT: Final = 1
_DOWN: Final = 2
_UP: Final = 3
_TIMER: Final = 4
_ARRIVAL: Final = 5
_COMPUTING: Final = 6
_SHARE: Final = 7
_AVAIL: Final = 8  # an availability period that changes only the machine's CPU share (UP <-> RECLAIMED)
_OVERLAY: Final = 9  # the overlay's turn at one grid whose size it drives (mgst.sim.overlay)
_LEAVE: Final = 10  # a host of such a grid that held no job for its idle time leaves
# The heap drops its dead entries (cancelled or lost replicas' completions) once they are more
# than half of it and more than this many; until then they are skipped when popped.
STALE_MIN: Final = 1024
# With overheads, the held delays of replicas no longer running are dropped once they are more than this many
# beyond twice the running ones (they are looked up only while a replica runs; kept, they would grow with the run).
HELD_PRUNE_MIN: Final = 1024
# The policy's timers' pace is looked at every TIMER_PACE_EVERY fires: one that would need more than
# TIMER_FIRES_MAX fires to cover the run's length at the pace of the last TIMER_PACE_EVERY (a timer re-armed at now,
# or a hair after it: model time standing still, or crawling) stops the run with a PolicyError, not a silent hang.
TIMER_PACE_EVERY: Final = 1_000_000
TIMER_FIRES_MAX: Final = 1e10

# Final: a C static when compiled, where a plain global is a dict lookup at every use (docs/build.md).
_ASSIGN: Final = Assign
_ETA: Final = Eta
_CANCEL: Final = Cancel
_SET_TIMER: Final = SetTimer
_REPLICA_TIMED_OUT: Final = ReplicaTimedOut
_MACHINE_SUSPECTED: Final = MachineSuspected
_BAG: Final = Bag
_DOWN_STATE: Final = State.DOWN
_UP_STATE: Final = State.UP

# An Assign's fields, and a heap entry's, as the loop reads them: the ids and the seq stay int objects
# (Any), compiled, so that each is made once and a dict finds its own key by identity.
_AssignFields = tuple[Job, int, Any, float, bool, float, float]
_EntryFields = tuple[float, int, Any, Any]


class Simulation:
    """One replication of an experiment: arrivals during [0, horizon), then a drain.

    Machines start up, each asking for work for all its slots. A replica of a
    job of size X on machine j does mu'_ij a_j units of work per time unit once
    it computes (after staging, if the experiment's staging model says so, and
    once one of the machine's cpus is free); the core tracks its work left, and
    the driver schedules its completion where the core says: the Assign's
    ``eta``, then each Eta that moves it. It computes no end itself. Failures kill the
    machine's replicas; the core resubmits their jobs, at once by default, or,
    with ``[testbed] detection = "timeout"``, only when the policy's silence
    time-outs give up on them (MGST's mapper), or when the machine comes back
    holding nothing. A replica the policy gave
    up on (time-out, suspected machine) keeps running here, as it would on a
    real machine, and its result still counts once.

    With ``overheads`` (a testbed run's, mgst.sim.overheads), each replica holds its
    machine for a drawn pre-compute delay before it computes and a post-compute
    delay after, and its completion (the core's replica_done) comes at the end of
    both: the core sees what the mapper sees (docs/models.md, "Overheads").
    """

    def __init__(
        self,
        experiment: Experiment,
        *,
        replication: int = 0,
        seed: int | None = None,
        horizon: float | None = None,
        drain_limit: float | None = None,
        share_changes: Iterable[tuple[float, int, float]] = (),
        overheads: Overheads | None = None,
        keep_records: bool = True,
        warmup: float | None = None,
        keep_batches: bool = False,
    ):
        s = experiment.simulation
        if overheads is not None and len(overheads.machines) != len(experiment.machines):
            raise ValueError(f"overheads for {len(overheads.machines)} machines, the experiment has "
                             f"{len(experiment.machines)}")
        if overheads is None:  # the grids' returned-result delays (mgst.availability.grids), as overheads
            overheads = grid_return_delays(experiment)
        self.overheads = overheads
        # (time, machine, a_j): CPU-share changes to impose, e.g. from a trace (0 suspends).
        self.share_changes = tuple(share_changes)
        self.experiment = experiment
        self.replication = replication
        self.seed = s.seed if seed is None else seed
        self.horizon = s.horizon if horizon is None else horizon
        # Without records, each job's record leaves the core once it is over, retired in arrival order, and what
        # the results need of it is summed then: its class's counted totals, for jobs submitted in [warmup, horizon).
        self.keep_records = keep_records
        # And with keep_batches, per class and batch, its counted jobs and their response times' sum (batch means).
        self.keep_batches = keep_batches
        self.warmup = s.warmup if warmup is None else warmup
        # Drain for at most as long again as the arrival period (an overloaded run never empties).
        self.drain_limit = self.horizon if drain_limit is None else drain_limit
        self.checkpoint_interval = s.checkpoint_interval
        self.stale_min = STALE_MIN
        self.dropped_entries = 0  # dead heap entries dropped (counted for tests)
        self.policy = build_policy(experiment, python_random(self.seed, replication, Purpose.POLICY))
        self.detect_by_timeout = experiment.testbed.detection == "timeout"
        self.core = Scheduler(experiment.classes, experiment.machines, self.policy, experiment.staging)
        self.core.report_holds = False  # a held request needs nothing done here,
        self.core.report_completions = False  # nor a job done: the records say it all
        # The grids whose size the overlay drives (none: every machine plays its availability alone), and the run's
        # overlay once it runs (its samples: the grids' sizes over time).
        self.overlay_grids = overlay_grids(experiment)
        self.overlay: Overlay | None = None

    def run(self) -> ReplicationRun:
        # Every record stays alive until the run ends, so the cyclic garbage collector's passes over
        # them find nothing and cost up to a third of the run: it is paused meanwhile.
        paused = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if paused:
                gc.enable()

    def _run(self) -> ReplicationRun:
        loop = _EventLoop(self)
        t = loop.run(self.horizon + self.drain_limit)
        self.dropped_entries += loop.dropped_entries
        core = self.core
        core.close(t)
        if strays := core.out_of_queue():
            raise PolicyError(out_of_queue_text(strays))
        unfinished = core.queued_count + len(core.running)
        # (info: the summary says their totals once, where 100,000 replications said them each)
        stranded = unfinished if t < self.horizon + self.drain_limit else 0  # (it ran out of events before its limit)
        if stranded:
            log.info("replication %d: %d jobs still in the system at t=%.1f, when nothing was left to happen",
                     self.replication, unfinished, t)
        elif unfinished:
            log.info("replication %d: %d jobs still in the system at the drain limit t=%.1f",
                     self.replication, unfinished, t)
        machines = [machine_summary(m.name, m.stats) for m in core.machines]
        bags = list(core.all_bags.values())
        if self.keep_records:
            jobs = list(core.jobs.values())
            return ReplicationRun(self.replication, t, jobs, machines, unfinished, bags, self.horizon, len(jobs),
                                  stranded=stranded)
        totals = loop.totals
        totals.finish()
        return ReplicationRun(self.replication, t, [], machines, unfinished, bags, self.horizon, totals.jobs_total,
                              totals.totals(), (self.warmup, self.horizon), totals.counted_batches(), stranded)


class _EventLoop:
    """One replication's event loop: ``run`` takes the events in time order and hands each to the
    handler of its kind (``_on_done``, ``_on_arrival``, ...), which tells the core and returns the
    core's decisions; ``_carry_out`` carries those out on the simulated machines.

    Compiled, this is a native class: its attributes are struct fields and its methods are called
    directly, so the split costs no speed (docs/benchmarks.md). For the pure build, the per-event
    steps stay inline (the arrival-or-heap choice, an Assign), and a handler reads an attribute it
    uses more than once into a local.
    """

    def __init__(self, sim: Simulation) -> None:
        exp = sim.experiment
        self.core = sim.core
        self.horizon = sim.horizon
        self.heap: EventHeap = new_event_heap()  # (time, kind, seq, what): in C where built (mgst.sim.event_heap)
        self.push: Callable[[Entry], None] = self.heap.push
        self.seq = 0  # the next heap entry's seq: unique, so no two entries tie
        n_machines = len(exp.machines)
        self.share = [m.availability for m in exp.machines]
        # Replicas running on the (simulated) machines -> seq of their valid completion event
        # (-1 while staging: no completion until it computes).
        self.live: dict[int, int] = {}
        self.given_up: dict[int, int] = {}  # running replicas the core gave up on -> machine
        self.up = [True] * n_machines  # the machine's real state (the core may only suspect it down)
        self.ck = sim.checkpoint_interval
        self.staging = StagingSampler(exp.staging, sim.seed, sim.replication) if exp.staging is not None else None
        # With a testbed run's overheads: their draws, and each held replica's (computing from, overrun, post-compute
        # delay), for its end of staging or a share change to move its completion (None: no overheads).
        self.overheads: OverheadSampler | None = None
        self.held: dict[int, tuple[float, float, float]] = {}
        self.held_or_none: dict[int, tuple[float, float, float]] | None = None  # what a share change is given
        if sim.overheads is not None:
            self.overheads = OverheadSampler(sim.overheads, sim.seed, sim.replication)
            self.held_or_none = self.held
        self.stale = 0  # heap entries of replicas cancelled, lost or moved (skipped when popped)
        self.stale_min = sim.stale_min
        self.dropped_entries = 0
        self.timer_fires = 0  # the timers' entries popped, and the model time at the last look at their pace
        self.timer_pace_at = TIMER_PACE_EVERY
        self.timer_pace_time = 0.0
        self.by_timeout = sim.detect_by_timeout
        # Each machine's availability process, drawn a period ahead (mgst.sim.availability_feed).
        self.periods = PeriodEvents(exp, sim.seed, sim.replication, (_DOWN, _UP, _AVAIL, _DONE))

        self.workload = make_workload(exp, sim.seed, sim.replication)
        # Poisson classes, the common case, typed: compiled, its calls are native
        self.poisson = self.workload if isinstance(self.workload, PoissonWorkload) else None
        # The next arrival is held here, out of the heap, and taken when it comes before the heap's
        # least entry in (time, kind) order: the order of the heap, as no other entry is an arrival.
        self.arrival: Job | Bag | None = self.workload.next() if self.workload.peek_time() < self.horizon else None
        self.arrival_at = self.arrival.submitted if self.arrival is not None else math.inf

        # Without records: each job leaves the core once over, its figures summed in arrival order.
        self.streamed = not sim.keep_records
        self.totals = StreamedTotals(self.core, len(exp.classes), sim.warmup, self.horizon,
                                     sim.keep_batches and self.streamed)

        self.first, self.seq = self.periods.start(self.push, self.seq)  # (None: a machine always up)
        for when, j, a in sim.share_changes:
            self._schedule(when, _SHARE, (j, a))
        # GridBot's overlay (mgst.sim.overlay): the driver-side decisions of grids that grow and shrink; the policy
        # says which grids a bag may use (takes_grid) and what it holds queued beside the core (held_jobs), if it can.
        self.overlay: Overlay | None = None
        if sim.overlay_grids:
            self.overlay = Overlay(sim.overlay_grids, n_machines, sim.seed, sim.replication,
                                   getattr(sim.policy, "takes_grid", None), getattr(sim.policy, "held_jobs", None))
            sim.overlay = self.overlay
            for position in range(len(sim.overlay_grids)):
                self._schedule(0.0, _OVERLAY, position)

    def run(self, stop_at: float) -> float:
        """Run until nothing is left to do or ``stop_at``; the model time it ended at."""
        core = self.core
        heap = self.heap
        # Typed with the seq as Any, so that compiled code keeps the entry's own int object (see _EntryFields).
        pop: Callable[[], _EntryFields] = heap.pop
        peek: Callable[[], _EntryFields] = heap.peek
        pending: list = []  # the core's outputs to carry out, in order
        share = self.share
        for j, first in enumerate(self.first):  # every machine starts up and asking for work (unless it starts down,
            if first is None or (first.state is _UP_STATE and first.cpu_share > 0.0):  # reclaimed, or at share 0)...
                if first is not None:
                    share[j] = first.cpu_share
                pending.extend(core.machine_ready(0.0, j, share[j]))
            elif first.state is _DOWN_STATE:
                self.up[j] = False
            else:  # reclaimed, or at share 0: up, and asking for nothing (a puller asks only with CPU to give)
                share[j] = first.cpu_share
                pending.extend(core.machine_up(0.0, j, first.cpu_share))
                pending.extend(core.machine_availability(0.0, j, first.state, first.cpu_share))
        pending.extend(core.start(0.0))  # ...which the policy plans for once
        overlay = self.overlay
        periods = self.periods
        live_replicas = core.view.live

        horizon = self.horizon
        t = 0.0
        while True:
            if pending:
                self._carry_out(t, pending)
            if overlay is not None:  # hosts of sized grids that now hold no job get their leave time
                self.seq = overlay.watch(t, self.up, core.machines, self.seq, self.push, _LEAVE)
            arrival = self.arrival
            if arrival is None and (not heap or (not core.queued_count and not core.running and not core.view.live)):
                # Every job is over (a loser that runs on after its job is done ends as it would: its waste counts).
                # Before the horizon, while arrivals went on (the next falls after it), the run lasts until the
                # horizon, as a testbed run lasts its duration: its machines' periods and the policy's timers until
                # then are played, and their up time counted. A workload that ran out (a bag list, max_bags) ends
                # with its last job.
                if t >= horizon or self.workload.peek_time() == math.inf:
                    break
                if not heap or peek()[0] >= horizon:
                    t = horizon
                    break
            if self.stale > self.stale_min and self.stale * 2 > len(heap):  # mostly dead entries
                self._drop_dead_entries()
            if arrival is not None:
                t = self.arrival_at
                try:  # the held arrival comes first, in the heap's (time, kind) order? (inline: every event)
                    top = peek()
                    arrival_first = t < top[0] or (t == top[0] and _ARRIVAL < top[1])
                except IndexError:  # the heap is empty (peek, not len(): a call per event in pure Python)
                    arrival_first = True
                if arrival_first:
                    if t >= stop_at:
                        return stop_at
                    pending = self._on_arrival(t, arrival)
                    continue
            entry: _EntryFields = pop()
            t, kind, s, arg = entry
            if t >= stop_at:
                return stop_at
            if kind == _DONE:
                if self.streamed:
                    totals = self.totals
                    # (its job, to leave the core at once if this ends it, when many wait behind an older one)
                    r = live_replicas.get(arg) if totals.crowded() else None
                    pending = self._on_done(t, s, arg)
                    if r is not None:
                        totals.settle(r.job)
                    totals.advance()
                else:
                    pending = self._on_done(t, s, arg)
            elif kind == _CHECKPOINT:
                pending = self._on_checkpoint(t, arg)
            elif kind == _DOWN:  # (with an overlay, a period it ended itself leaves a stale event)
                pending = self._on_down(t, arg) if overlay is None or periods.event_seq[arg] == s else []
            elif kind == _UP:
                pending = self._on_up(t, arg) if overlay is None or periods.event_seq[arg] == s else []
            elif kind == _TIMER:
                pending = self._on_timer(t, arg)
            elif kind == _COMPUTING:
                pending = self._on_computing(t, arg)
            elif kind == _SHARE:
                pending = self._on_share(t, arg)
            elif kind == _AVAIL:
                pending = self._on_avail(t, arg) if overlay is None or periods.event_seq[arg] == s else []
            elif kind == _OVERLAY:
                pending = self._on_overlay(t, arg)
            elif kind == _LEAVE:
                pending = self._on_leave(t, s, arg)
        return t

    # -- the clock's events, one handler per kind: each returns the core's outputs to carry out --

    def _on_done(self, t: float, s: Any, rid: Any) -> list:
        """A replica's completion, if still valid (not cancelled, lost, or moved since)."""
        live = self.live
        valid = live.get(rid)
        if valid is not s and valid != s:  # (the same int object, mostly: no comparison then)
            return []
        del live[rid]
        computed: float | None = None
        if self.overheads is not None:  # the core hears of it after the post-compute delay: say how long it computed
            held = self.held.get(rid)
            if held is not None:
                computed = max(0.0, t - held[2] - held[0])
        given_up = self.given_up
        j = given_up.pop(rid, -1) if given_up else -1  # (a method call: skipped when empty)
        if j < 0:
            return self.core.replica_done(t, rid, True, computed)  # (the core's list is taken, not copied)
        pending = self.core.replica_done(t, rid, False, computed)  # a late result: counts once
        self._slot_free(t, j, pending)
        return pending

    def _on_arrival(self, t: float, arrival: Job | Bag) -> list:
        """A job or a bag arrives; the workload's next one is held in its place."""
        if self.streamed:
            pending = self._arrive_noted(t, arrival)
        elif type(arrival) is _BAG:
            pending = self.core.bag_arrived(t, arrival)
        else:
            pending = self.core.job_arrived(t, arrival)  # type: ignore[arg-type]  # a Job: not narrowed by type() is
        poisson = self.poisson
        if poisson is not None:  # typed: compiled, a native call and a tuple read
            if poisson.peek_time() < self.horizon:
                new_job = poisson.next_job()
                self.arrival = new_job
                self.arrival_at = new_job.submitted
            else:
                self.arrival = None
        elif self.workload.peek_time() < self.horizon:
            nxt = self.workload.next()
            self.arrival = nxt
            self.arrival_at = nxt.submitted
        else:
            self.arrival = None
        return pending

    def _arrive_noted(self, t: float, arrival: Job | Bag) -> list:
        """A job or a bag arrives, in a run that keeps no records: its jobs' records are noted in arrival order."""
        core = self.core
        jobs = core.jobs
        before = len(jobs)
        totals = self.totals
        if type(arrival) is _BAG:
            pending = core.bag_arrived(t, arrival)
            if len(jobs) > before:
                for task in arrival.tasks:  # type: ignore[union-attr]  # a Bag: not narrowed by type() is
                    totals.note(jobs[task.id])
        else:
            pending = core.job_arrived(t, arrival)  # type: ignore[arg-type]
            if len(jobs) > before:  # (not a stale second arrival)
                totals.note(jobs[arrival.id])
        return pending

    def _on_checkpoint(self, t: float, rid: Any) -> list:
        """A running replica checkpoints (every ``ck``, from its start of computing)."""
        ck = self.ck
        if rid not in self.live or ck is None:  # (ck is set whenever checkpoints are scheduled)
            return []
        r = self.core.replica(rid)
        pending = [] if r is None else self.core.replica_checkpoint(t, rid, min(1.0, r.progress_at(t)))
        self._schedule(t + ck, _CHECKPOINT, rid)
        return pending

    def _on_down(self, t: float, j: int) -> list:
        """Machine j fails: its replicas are lost; the core hears of it now, or by its silence."""
        self.up[j] = False
        given_up = self.given_up
        live = self.live
        for rid in [r for r, m in given_up.items() if m == j]:
            del given_up[rid]
            live.pop(rid, None)
        core = self.core
        m = core.machines[j]
        for rid in m.replicas:
            if live.pop(rid, None) is not None:
                self.stale += 1
        pending: list = []
        if m.state is not MachineState.DOWN:
            if not self.by_timeout:
                pending = core.machine_down(t, j)
            elif not m.silent:  # MGST's mapper: its silence alone, until a time-out decides
                pending = core.machine_silent(t, j)
        self.seq = self.periods.advance(t, j, self.push, self.seq)
        return pending

    def _on_up(self, t: float, j: int) -> list:
        """Machine j is back, asking for work for all its slots (reclaimed at share 0: asking for none)."""
        self.up[j] = True
        if self.overlay is not None:
            self.overlay.arrived(j)
        period: Period = self.periods.entering[j]
        self.share[j] = period.cpu_share
        core = self.core
        m = core.machines[j]
        pending: list = []
        if m.silent:  # back before a time-out noticed: it re-registers holding nothing
            pending.extend(core.machine_heard(t, j))
            for rid in list(m.replicas):
                pending.extend(core.replica_failed(t, rid, "not held by the machine after its failure"))
        if period.state is _UP_STATE and period.cpu_share > 0.0:
            pending.extend(core.machine_ready(t, j, self.share[j]))  # implies up
        else:  # reclaimed, or at share 0: up, asking for nothing
            pending.extend(core.machine_up(t, j, period.cpu_share))
            pending.extend(core.machine_availability(t, j, period.state, period.cpu_share))
        self.seq = self.periods.advance(t, j, self.push, self.seq)
        return pending

    def _on_avail(self, t: float, j: int) -> list:
        """Machine j's availability changes while it is up: reclaimed by its owner, given back, or a new share."""
        period: Period = self.periods.entering[j]
        pending: list = []
        self.periods.availability_changed(self.core, t, j, period.state, period.cpu_share, self.share, pending)
        self.seq = self.periods.advance(t, j, self.push, self.seq)
        return pending

    def _on_overlay(self, t: float, position: int) -> list:
        """The overlay's turn at a grid: a host asked for if work it may take is queued (its arrival, an up event
        after the grid's queue wait); its next turn ``request_every`` later."""
        overlay = self.overlay
        assert overlay is not None  # (only scheduled with one)
        j = overlay.cycle(t, position, self.core.view, self.up)
        if j >= 0:
            seq = self.seq
            self.push((t + overlay.arrival_delay(j), _UP, seq, j))
            self.periods.event_seq[j] = seq  # (it was DOWN for good: no other event of it pending)
            self.seq = seq + 1
        self._schedule(t + overlay.every(position), _OVERLAY, position)
        return []

    def _on_leave(self, t: float, s: Any, j: int) -> list:
        """A host that held no job for its grid's idle time leaves, if it still holds none: it goes down now, and the
        end of its up period pending in the heap goes stale."""
        overlay = self.overlay
        assert overlay is not None
        if not self.up[j] or not overlay.leave_due(j, s):
            return []
        self.periods.event_seq[j] = -1
        return self._on_down(t, j)

    def _on_timer(self, t: float, key: Any) -> list:
        """A timer the core set (SetTimer) fires; one the policy cancelled since is skipped, as the mapper skips it
        (a replaced one's earlier entry still reaches the core, in both, which counts it stale)."""
        self.timer_fires += 1
        if self.timer_fires >= self.timer_pace_at:
            self._check_timer_pace(t)
        if key not in self.core.timers:
            return []
        return self.core.timer_fired(t, key)

    def _check_timer_pace(self, t: float) -> None:
        """PolicyError if the last TIMER_PACE_EVERY timer fires moved model time so little that covering the run's
        length (its horizon, or now in its drain) at that pace would take more than TIMER_FIRES_MAX fires."""
        span = t - self.timer_pace_time
        length = max(self.horizon, t)
        if span * TIMER_FIRES_MAX < length * TIMER_PACE_EVERY:
            raise PolicyError(
                f"the policy's timers fired {TIMER_PACE_EVERY:,} times while model time moved from "
                f"{self.timer_pace_time:.17g} to {t:.17g}: at that pace the run's length, {length:g}, would take "
                f"more than {TIMER_FIRES_MAX:.0e} fires (a timer re-armed at now, or a hair after it, in on_timer? "
                "SetTimer(key, view.now + delay) needs a delay of the run's scale)")
        self.timer_pace_time = t
        self.timer_pace_at = self.timer_fires + TIMER_PACE_EVERY

    def _on_computing(self, t: float, rid: Any) -> list:
        """A replica's staging ends: the core says when it completes (an Eta, carried out with the rest)."""
        if self.live.get(rid) != -1:
            return []
        if self.overheads is not None:  # its overrun and post-compute delay, drawn when it started
            _, overrun, post = self.held[rid]
            self.held[rid] = (t, overrun, post)  # it computes from now (its computed excludes staging, as the core's)
        return self.core.replica_computing(t, rid)

    def _on_share(self, t: float, change: tuple[int, float]) -> list:
        """Machine j's CPU share becomes a (an imposed change): its replicas' completions move."""
        j, a = change
        pending: list = []
        self.periods.share_changed(self.core, t, j, a, self.share, pending)
        return pending

    # -- the core's decisions, carried out on the simulated machines --

    def _carry_out(self, t: float, pending: list) -> None:
        """Carry out the decisions in order; a cancel frees a slot, which asks again at once."""
        i = 0
        while i < len(pending):
            d = pending[i]
            i += 1
            td = type(d)
            if td is _ASSIGN:  # a replica starts on machine j (inline: the hot path)
                fields: _AssignFields = d  # an annotation, not cast(): no call in pure Python
                job, j, rid, progress, staged, end, _ = fields  # compiled: one read per field
                if not self.up[j]:  # sent to a machine that is down (the core learns it by silence): never runs
                    continue
                if staged:
                    self.live[rid] = -1  # no completion until it computes
                    pre = self._hold(t, j, rid, 0.0)[0] if self.overheads is not None else 0.0
                    self._schedule(t + pre + self.staging.duration(progress > 0.0), _COMPUTING, rid)  # type: ignore[union-attr]
                    continue
                # end: the core's (inf while suspended at share 0 or waiting for a cpu: an Eta moves it)
                if self.overheads is not None:  # a testbed run's overheads: held before and after computing
                    pre, after = self._hold(t, j, rid, end - t)
                    end = t + pre + after
                self._schedule_completion(t, end, rid)
            elif td is _ETA:  # the core moved a replica's end: schedule it where the core says
                self._moved(t, d.replica, d.at)
            elif td is _CANCEL:
                if self.live.pop(d.replica, None) is not None:
                    self.stale += 1  # its completion (or end of staging) is still in the heap
                self.given_up.pop(d.replica, None)
                # the freed slot asks again, on a machine that is up (a down one asks when it is back) with CPU to give
                if self.up[d.machine] and self.share[d.machine] > 0.0:
                    pending.extend(self.core.machine_ready(t, d.machine))
            elif td is _SET_TIMER:  # (one set for an earlier time fires at once, as on the testbed: never back in time)
                at = d.at
                self._schedule(at if at > t else t, _TIMER, d.key)
            elif td is _REPLICA_TIMED_OUT:
                if d.replica in self.live:  # still running here (not lost with its machine)
                    self.given_up[d.replica] = d.machine
            elif td is _MACHINE_SUSPECTED:
                self._suspected(d.machine)

    def _moved(self, t: float, rid: Any, end: float) -> None:
        """The core says replica ``rid`` now ends at ``end``: its staging is over (its first completion, and its
        checkpoints from now), or its rate changed (its completion moves; the old entry goes stale)."""
        now_at = self.live.get(rid)
        if now_at is None:  # not running here (lost with its machine, or given up and gone)
            return
        held = self.held_or_none
        if held is not None and end < math.inf:  # a testbed run's overheads: its post-compute delay and overrun
            end = held_end(t, end, held[rid])
        if now_at == -1:
            self._schedule_completion(t, end, rid)
            return
        self.stale += 1
        seq = self.seq
        key: Any = seq
        self.live[rid] = key
        if end < math.inf:
            self.push((end, _DONE, key, rid))
        self.seq = seq + 1

    def _hold(self, t: float, j: int, rid: Any, compute: float) -> tuple[float, float]:
        """A replica starting at t on machine j, computing for ``compute`` by the model (unused when it stages
        first): its pre-compute delay, and how long after that its completion comes (its computing and overrun,
        never below none, and its post-compute delay); noted for its end of staging and share changes."""
        pre, overrun, post = self.overheads.draw(j)  # type: ignore[union-attr]  # (only called with overheads)
        held = self.held
        if len(held) > 2 * len(self.live) + HELD_PRUNE_MIN:  # drop those of replicas no longer running
            live = self.live
            for k in [k for k in held if k not in live]:
                del held[k]
        held[rid] = (t + pre, overrun, post)
        return pre, max(0.0, compute + overrun) + post

    def _suspected(self, j: int) -> None:
        """The core suspects machine j down: what it still runs here, the core has given up on."""
        given_up = self.given_up
        for rid in self.live:
            r = self.core.given_up_replica(rid)
            if r is not None and r.machine == j:
                given_up[rid] = j  # lost in the core, still running here

    def _slot_free(self, t: float, j: int, pending: list) -> None:
        """A replica the core had given up on ended here: its slot asks again (its machine, if the
        core suspected it down, once nothing of it runs any more)."""
        if not self.up[j]:
            return
        core = self.core
        if core.machines[j].state is MachineState.DOWN:  # suspected: back once nothing of it runs
            if not any(mj == j for mj in self.given_up.values()):
                pending.extend(core.machine_ready(t, j))
        else:
            pending.extend(core.machine_ready(t, j, None, core.machines[j].asking + 1))

    # -- the heap --

    def _schedule_completion(self, t: float, end: float, rid: Any) -> None:
        """A replica computes from t until ``end``: its completion, and its first checkpoint if before."""
        seq = self.seq
        key: Any = seq  # one int object for the dict and the entry
        self.live[rid] = key
        if end < math.inf:  # (suspended, at share 0: no completion until the share is back)
            self.push((end, _DONE, key, rid))
        ck = self.ck
        if ck is not None and t + ck < end:
            self.push((t + ck, _CHECKPOINT, seq + 1, rid))
            self.seq = seq + 2
        else:
            self.seq = seq + 1

    def _schedule(self, at: float, kind: int, what: Any) -> None:
        self.push((at, kind, self.seq, what))
        self.seq += 1

    def _drop_dead_entries(self) -> None:
        """Rebuild the heap without the dead entries (cancelled or lost replicas' completions)."""
        heap = self.heap
        size = len(heap)
        heap.reset(_live_entries(heap.entries(), self.live))
        self.dropped_entries += size - len(heap)
        self.stale = 0


def _live_entries(entries: list[Entry], live: dict[int, int]) -> list[Entry]:
    """The entries but those of replicas that no longer run, or whose completion moved."""
    return [
        e for e in entries
        if (e[1] != _DONE or live.get(e[3]) == e[2])
        and (e[1] != _CHECKPOINT or e[3] in live)
        and (e[1] != _COMPUTING or live.get(e[3]) == -1)
    ]


__all__ = ["Simulation"]
