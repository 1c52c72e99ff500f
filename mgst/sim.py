"""The discrete-event driver: runs the scheduling core on a virtual clock."""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass

from mgst.availability.exponential import ExponentialUpDown
from mgst.core.decisions import Assign, Cancel, SetTimer
from mgst.core.scheduler import Scheduler
from mgst.core.state import JobRecord, MachineStats
from mgst.model import Experiment
from mgst.policies import policy_class
from mgst.streams import Purpose, python_random
from mgst.workload.poisson import PoissonWorkload

log = logging.getLogger(__name__)

# Event kinds, in the order they are handled when they fall at the same instant:
# completions before failures before arrivals, so a job done at the instant its
# machine fails counts as done (either order is a measure-zero event).
_DONE, _CHECKPOINT, _DOWN, _UP, _TIMER, _ARRIVAL = range(6)


@dataclass(frozen=True, slots=True)
class MachineSummary:
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
    jobs: list[JobRecord]  # every job, in id order, with its full record
    machines: list[MachineSummary]
    unfinished: int  # jobs still in the system when the drain limit cut the run


class Simulation:
    """One replication of an experiment: arrivals during [0, horizon), then a drain.

    Machines start up and asking for work. Service of a replica of a class-i job
    of size X on machine j takes (1 - progress) X / (mu'_ij a_j). Failures kill
    the running replica; the core resubmits the job.
    """

    def __init__(
        self,
        experiment: Experiment,
        *,
        replication: int = 0,
        seed: int | None = None,
        horizon: float | None = None,
        drain_limit: float | None = None,
    ):
        s = experiment.simulation
        self.experiment = experiment
        self.replication = replication
        self.seed = s.seed if seed is None else seed
        self.horizon = s.horizon if horizon is None else horizon
        # Drain for at most as long again as the arrival period (an overloaded run never empties).
        self.drain_limit = self.horizon if drain_limit is None else drain_limit
        self.checkpoint_interval = s.checkpoint_interval
        spec = experiment.policy
        cls = policy_class(spec.name)
        rng = python_random(self.seed, replication, Purpose.POLICY)
        self.policy = cls(cls.Options.from_mapping(spec.options), rng)
        self.core = Scheduler(experiment.classes, experiment.machines, self.policy)

    def run(self) -> ReplicationRun:
        exp = self.experiment
        core = self.core
        arrived = core.job_arrived
        done = core.replica_done
        horizon = self.horizon
        stop_at = horizon + self.drain_limit
        heap: list[tuple] = []
        push = heapq.heappush
        pop = heapq.heappop
        seq = 0
        share = [m.availability for m in exp.machines]
        rates = exp.rates  # [class][machine]
        live: dict[int, tuple[int, float, float, float]] = {}  # replica -> (machine, start, progress, speed)
        ck = self.checkpoint_interval

        workload = PoissonWorkload(exp.arrival_rates, self.seed, self.replication)
        first = workload.next_job()
        arrivals_open = first.submitted < horizon
        if arrivals_open:
            push(heap, (first.submitted, _ARRIVAL, seq, first))
            seq += 1
        updown: list[ExponentialUpDown] = []
        if exp.failures is not None:
            for j in range(len(exp.machines)):
                ud = ExponentialUpDown(exp.failures, self.seed, self.replication, j)
                updown.append(ud)
                push(heap, (ud.next_up(), _DOWN, seq, j))
                seq += 1

        pending: list = []  # outputs to carry out, in order
        pending.extend(core.start(0.0))
        for j in range(len(exp.machines)):  # every machine starts up and asking for work
            pending.extend(core.machine_ready(0.0, j, share[j]))

        t = 0.0
        while True:
            # Carry out decisions; a cancel frees a machine, which asks again at once.
            i = 0
            while i < len(pending):
                d = pending[i]
                i += 1
                td = type(d)
                if td is Assign:
                    job = d.job
                    j = d.machine
                    speed = rates[job.job_class][j] * share[j]
                    remaining = (1.0 - d.progress) * job.size
                    push(heap, (t + remaining / speed, _DONE, seq, d.replica))
                    seq += 1
                    live[d.replica] = (j, t, d.progress, speed)
                    if ck is not None and t + ck < t + remaining / speed:
                        push(heap, (t + ck, _CHECKPOINT, seq, d.replica))
                        seq += 1
                elif td is Cancel:
                    live.pop(d.replica, None)
                    pending.extend(core.machine_ready(t, d.machine))
                elif td is SetTimer:
                    push(heap, (d.at, _TIMER, seq, d.key))
                    seq += 1
            pending.clear()

            if not arrivals_open and not core.queued_count and not core.running:
                break
            if not heap:
                break
            t, kind, _, arg = pop(heap)
            if t >= stop_at:
                t = stop_at
                break
            if kind == _DONE:
                entry = live.pop(arg, None)
                if entry is None:
                    continue  # cancelled or lost
                pending.extend(done(t, arg, True))
            elif kind == _ARRIVAL:
                pending.extend(arrived(t, arg))
                nxt = workload.next_job()
                if nxt.submitted < horizon:
                    push(heap, (nxt.submitted, _ARRIVAL, seq, nxt))
                    seq += 1
                else:
                    arrivals_open = False
            elif kind == _DOWN:
                m = core.machines[arg]
                if m.replica is not None:
                    live.pop(m.replica.id, None)
                pending.extend(core.machine_down(t, arg))
                push(heap, (t + updown[arg].next_down(), _UP, seq, arg))
                seq += 1
            elif kind == _UP:
                pending.extend(core.machine_ready(t, arg, share[arg]))  # implies up
                push(heap, (t + updown[arg].next_up(), _DOWN, seq, arg))
                seq += 1
            elif kind == _TIMER:
                pending.extend(core.timer_fired(t, arg))
            elif kind == _CHECKPOINT:
                entry = live.get(arg)
                if entry is None:
                    continue
                _, start, progress, speed = entry
                size = core.replica(arg).job.job.size  # type: ignore[union-attr]
                progress_now = min(1.0, progress + (t - start) * speed / size)
                pending.extend(core.replica_checkpoint(t, arg, progress_now))
                push(heap, (t + ck, _CHECKPOINT, seq, arg))
                seq += 1

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
        )


def _summary(name: str, st: MachineStats) -> MachineSummary:
    return MachineSummary(name, st.busy_time, st.up_time, st.completed, st.lost, st.cancelled, st.failures)


__all__ = ["MachineSummary", "ReplicationRun", "Simulation"]
