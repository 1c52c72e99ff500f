"""The discrete-event driver: runs the scheduling core on a virtual clock."""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from mgst.availability.process import Period, State
from mgst.core.decisions import Assign, Cancel, MachineSuspected, ReplicaTimedOut, SetTimer
from mgst.core.scheduler import Scheduler
from mgst.core.state import BagRecord, JobRecord, MachineState, MachineStats
from mgst.event_heap import Entry, EventHeap, new_event_heap
from mgst.model import Bag, Experiment, Job
from mgst.policies import build_policy
from mgst.sim_availability import PeriodEvents
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
# The heap drops its dead entries (cancelled or lost replicas' completions) once they are more
# than half of it and more than this many; until then they are skipped when popped.
STALE_MIN: Final = 1024

# Final: a C static when compiled, where a plain global is a dict lookup at every use (docs/build.md).
_ASSIGN: Final = Assign
_CANCEL: Final = Cancel
_SET_TIMER: Final = SetTimer
_REPLICA_TIMED_OUT: Final = ReplicaTimedOut
_MACHINE_SUSPECTED: Final = MachineSuspected
_BAG: Final = Bag
_DOWN_STATE: Final = State.DOWN

# An Assign's fields, and a heap entry's, as the loop reads them: the ids and the seq stay int objects
# (Any), compiled, so that each is made once and a dict finds its own key by identity.
_AssignFields = tuple[Job, int, Any, float, bool]
_EntryFields = tuple[float, int, Any, Any]


class MachineSummary(NamedTuple):
    """One machine's totals over a replication (a NamedTuple: a compiled frozen dataclass took about
    10,000 instructions to make, which 10,000 machines noticed)."""

    name: str
    busy_time: float
    up_time: float
    completed: int
    lost: int
    cancelled: int
    failures: int


@dataclass(frozen=True, slots=True)
class ReplicationRun:
    """What one simulated replication leaves behind."""

    replication: int
    end_time: float  # model time when the last counted job finished (or the drain limit)
    jobs: list[JobRecord]  # every job, in id order, with its full record (replicas in .history)
    machines: list[MachineSummary]
    unfinished: int  # jobs still in the system when the drain limit cut the run
    bags: list[BagRecord] = ()  # type: ignore[assignment]  # every bag, in arrival order
    horizon: float = 0.0  # arrivals stopped here


class Simulation:
    """One replication of an experiment: arrivals during [0, horizon), then a drain.

    Machines start up, each asking for work for all its slots. A replica of a
    job of size X on machine j does mu'_ij a_j units of work per time unit once
    it computes (after staging, if the experiment's staging model says so); the
    core tracks its work left, and the driver schedules its completion at the
    core's ``eta``, again whenever a share change moves it. Failures kill the
    machine's replicas; the core resubmits their jobs, at once by default, or,
    with ``[testbed] detection = "timeout"``, only when the policy's silence
    time-outs give up on them (MGST's mapper), or when the machine comes back
    holding nothing. A replica the policy gave
    up on (time-out, suspected machine) keeps running here, as it would on a
    real machine, and its result still counts once.
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
    ):
        s = experiment.simulation
        # (time, machine, a_j): CPU-share changes to impose, e.g. from a trace (0 suspends).
        self.share_changes = tuple(share_changes)
        self.experiment = experiment
        self.replication = replication
        self.seed = s.seed if seed is None else seed
        self.horizon = s.horizon if horizon is None else horizon
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
        exp = self.experiment
        core = self.core
        horizon = self.horizon
        stop_at = horizon + self.drain_limit
        heap: EventHeap = new_event_heap()  # (time, kind, seq, what): in C where built (mgst.event_heap)
        push = heap.push
        # Typed with the seq as Any, so that compiled code keeps the entry's own int object (see _EntryFields).
        pop: Callable[[], _EntryFields] = heap.pop
        peek: Callable[[], _EntryFields] = heap.peek
        seq = 0
        n_machines = len(exp.machines)
        share = [m.availability for m in exp.machines]
        rates = exp.rates  # [class][machine], read once: the Assign branch below is the hot path
        # Replicas running on the (simulated) machines -> seq of their valid completion event.
        live: dict[int, int] = {}
        given_up: dict[int, int] = {}  # running replicas the core gave up on -> machine
        up = [True] * n_machines  # the machine's real state (the core may only suspect it down)
        ck = self.checkpoint_interval
        staging = StagingSampler(exp.staging, self.seed, self.replication) if exp.staging is not None else None
        stale = 0  # heap entries of replicas cancelled, lost or moved (skipped when popped)
        stale_min = self.stale_min
        by_timeout = self.detect_by_timeout

        workload = make_workload(exp, self.seed, self.replication)
        # Poisson classes, the common case, typed: compiled, its calls are native
        poisson = workload if isinstance(workload, PoissonWorkload) else None
        # The next arrival is held here, out of the heap, and taken when it comes before the heap's
        # least entry in (time, kind) order: the order of the heap, as no other entry is an arrival.
        arrival: Job | Bag | None = workload.next() if workload.peek_time() < horizon else None
        arrival_at = arrival.submitted if arrival is not None else math.inf
        periods = PeriodEvents(exp, self.seed, self.replication, (_DOWN, _UP, _AVAIL, _DONE))
        first, seq = periods.start(push, seq)

        for when, j, a in self.share_changes:
            push((when, _SHARE, seq, (j, a)))
            seq += 1

        pending: list = []  # outputs to carry out, in order
        for j in range(n_machines):  # every machine starts up and asking for work (unless its process says not)...
            p0 = first[j]
            if p0 is None or (p0.state is not _DOWN_STATE and p0.cpu_share > 0.0):
                if p0 is not None:
                    share[j] = p0.cpu_share
                pending.extend(core.machine_ready(0.0, j, share[j]))
            elif p0.state is _DOWN_STATE:
                up[j] = False
            else:  # reclaimed at share 0: up, and asking for nothing (a puller asks only with CPU to give)
                share[j] = 0.0
                pending.extend(core.machine_up(0.0, j, 0.0))
        pending.extend(core.start(0.0))  # ...which the policy plans for once

        t = 0.0
        while True:
            # Carry out decisions; a cancel frees a slot, which asks again at once.
            i = 0
            while i < len(pending):
                d = pending[i]
                i += 1
                td = type(d)
                if td is _ASSIGN:
                    fields: _AssignFields = d  # an annotation, not cast(): no call in pure Python
                    job, j, rid, progress, staged = fields  # compiled: one read per field
                    if staged:
                        live[rid] = -1  # no completion until it computes
                        push((t + staging.duration(progress > 0.0), _COMPUTING, seq, rid))  # type: ignore[union-attr]
                        seq += 1
                        continue
                    if share[j] <= 0.0:  # suspended from its start: no completion until the share is back
                        live[rid] = seq
                        seq += 1
                        if ck is not None:
                            push((t + ck, _CHECKPOINT, seq, rid))
                            seq += 1
                        continue
                    end = t + (1.0 - progress) * job.size / (rates[job.job_class][j] * share[j])
                    key: Any = seq  # one int object for the dict and the entry
                    live[rid] = key
                    push((end, _DONE, key, rid))
                    seq += 1
                    if ck is not None and t + ck < end:
                        push((t + ck, _CHECKPOINT, seq, rid))
                        seq += 1
                elif td is _CANCEL:
                    if live.pop(d.replica, None) is not None:
                        stale += 1  # its completion (or end of staging) is still in the heap
                    given_up.pop(d.replica, None)
                    if share[d.machine] > 0.0:  # (without CPU to give a machine asks again only once it has some)
                        pending.extend(core.machine_ready(t, d.machine))
                elif td is _SET_TIMER:
                    push((d.at, _TIMER, seq, d.key))
                    seq += 1
                elif td is _REPLICA_TIMED_OUT:
                    if d.replica in live:  # still running here (not lost with its machine)
                        given_up[d.replica] = d.machine
                elif td is _MACHINE_SUSPECTED:
                    j = d.machine
                    for rid in live:
                        r = core.given_up_replica(rid)
                        if r is not None and r.machine == j:
                            given_up[rid] = j  # lost in the core, still running here
            pending.clear()

            if arrival is None and not core.queued_count and not core.running:
                break
            if arrival is None and not heap:
                break
            if stale > stale_min and stale * 2 > len(heap):  # mostly dead entries: drop them
                size = len(heap)
                heap.reset(_live_entries(heap.entries(), live))
                self.dropped_entries += size - len(heap)
                stale = 0
            if arrival is None or (heap and not _comes_first(arrival_at, _ARRIVAL, peek())):
                entry: _EntryFields = pop()
                t, kind, s, arg = entry
            else:  # the held arrival comes first
                t, kind, s, arg = arrival_at, _ARRIVAL, None, arrival
            if t >= stop_at:
                t = stop_at
                break
            if kind == _DONE:
                valid = live.get(arg)
                if valid is not s and valid != s:  # (the same int object, mostly: no comparison then)
                    continue  # cancelled, lost, or its completion moved
                del live[arg]
                j = given_up.pop(arg, -1) if given_up else -1  # (a method call: skipped when empty)
                if j < 0:  # (pending is empty here: the core's list is taken, not copied)
                    pending = core.replica_done(t, arg, True)
                else:
                    pending.extend(core.replica_done(t, arg, False))  # a late result: counts once
                    self._slot_free(t, j, live, given_up, up, pending)
            elif kind == _ARRIVAL:
                if type(arg) is _BAG:
                    pending.extend(core.bag_arrived(t, arg))
                else:
                    pending = core.job_arrived(t, arg)  # (as above)
                if poisson is not None:  # typed: compiled, a native call and a tuple read
                    if poisson.peek_time() < horizon:
                        new_job = poisson.next_job()
                        arrival, arrival_at = new_job, new_job.submitted
                    else:
                        arrival = None
                elif workload.peek_time() < horizon:
                    arrival = workload.next()
                    arrival_at = arrival.submitted
                else:
                    arrival = None
            elif kind == _DOWN:
                up[arg] = False
                for rid in [r for r, m in given_up.items() if m == arg]:
                    del given_up[rid]
                    live.pop(rid, None)
                m = core.machines[arg]
                for rid in m.replicas:
                    if live.pop(rid, None) is not None:
                        stale += 1
                if m.state is not MachineState.DOWN:
                    if not by_timeout:
                        pending.extend(core.machine_down(t, arg))
                    elif not m.silent:  # MGST's mapper: its silence alone, until a time-out decides
                        pending.extend(core.machine_silent(t, arg))
                seq = periods.advance(t, arg, push, seq)
            elif kind == _UP:
                up[arg] = True
                period: Period = periods.entering[arg]
                share[arg] = period.cpu_share
                m = core.machines[arg]
                if m.silent:  # back before a time-out noticed: it re-registers holding nothing
                    pending.extend(core.machine_heard(t, arg))
                    for rid in list(m.replicas):
                        pending.extend(core.replica_failed(t, rid, "not held by the machine after its failure"))
                if period.cpu_share > 0.0:
                    pending.extend(core.machine_ready(t, arg, share[arg]))  # implies up
                else:  # back, but reclaimed at share 0: up, asking for nothing
                    pending.extend(core.machine_up(t, arg, 0.0))
                seq = periods.advance(t, arg, push, seq)
            elif kind == _AVAIL:
                period = periods.entering[arg]
                seq, moved = periods.share_changed(core, t, arg, period.cpu_share, share, live, push, seq, pending)
                stale += moved
                seq = periods.advance(t, arg, push, seq)
            elif kind == _TIMER:
                pending.extend(core.timer_fired(t, arg))
            elif kind == _CHECKPOINT:
                if arg not in live or ck is None:  # (ck is set whenever checkpoints are scheduled)
                    continue
                r = core.replica(arg)
                if r is not None:
                    pending.extend(core.replica_checkpoint(t, arg, min(1.0, r.progress_at(t))))
                push((t + ck, _CHECKPOINT, seq, arg))
                seq += 1
            elif kind == _COMPUTING:
                if live.get(arg) != -1:
                    continue
                pending.extend(core.replica_computing(t, arg))
                r = core.replica(arg)
                if r is None:
                    continue
                live[arg] = seq
                end = r.eta(t)
                if end < math.inf:  # (not suspended)
                    push((end, _DONE, seq, arg))
                seq += 1
                if ck is not None and t + ck < end:
                    push((t + ck, _CHECKPOINT, seq, arg))
                    seq += 1
            elif kind == _SHARE:
                j, a = arg
                seq, moved = periods.share_changed(core, t, j, a, share, live, push, seq, pending)
                stale += moved

        core.close(t)
        unfinished = core.queued_count + len(core.running)
        if unfinished:
            log.warning(
                "replication %d: %d jobs still in the system at the drain limit t=%.1f",
                self.replication, unfinished, t,
            )
        jobs = list(core.jobs.values())
        return ReplicationRun(
            replication=self.replication,
            end_time=t,
            jobs=jobs,
            machines=[_summary(m.name, m.stats) for m in core.machines],
            unfinished=unfinished,
            bags=list(core.all_bags.values()),
            horizon=horizon,
        )

    def _slot_free(
        self, t: float, j: int, live: dict[int, int], given_up: dict[int, int], up: list[bool], pending: list
    ) -> None:
        """A replica the core had given up on ended here: its slot asks again (its machine, if the
        core suspected it down, once nothing of it runs any more)."""
        if not up[j]:
            return
        if self.core.machines[j].state is MachineState.DOWN:  # suspected: back once nothing of it runs
            if not any(mj == j for mj in given_up.values()):
                pending.extend(self.core.machine_ready(t, j))
        else:
            pending.extend(self.core.machine_ready(t, j, None, self.core.machines[j].asking + 1))


def _comes_first(t: float, kind: int, top: _EntryFields) -> bool:
    """Whether an event (t, kind) comes before the heap entry ``top``, in the heap's order (kinds differ)."""
    return t < top[0] or (t == top[0] and kind < top[1])


def _live_entries(entries: list[Entry], live: dict[int, int]) -> list[Entry]:
    """The entries but those of replicas that no longer run, or whose completion moved."""
    return [
        e for e in entries
        if (e[1] != _DONE or live.get(e[3]) == e[2])
        and (e[1] != _CHECKPOINT or e[3] in live)
        and (e[1] != _COMPUTING or live.get(e[3]) == -1)
    ]


def _summary(name: str, st: MachineStats) -> MachineSummary:
    # tuple.__new__: a NamedTuple's own __new__ is a Python function (3,000 instructions per machine)
    fields = (name, st.busy_time, st.up_time, st.completed, st.lost, st.cancelled, st.failures)
    return tuple.__new__(MachineSummary, fields)  # type: ignore[type-var]


__all__ = ["MachineSummary", "ReplicationRun", "Simulation"]
