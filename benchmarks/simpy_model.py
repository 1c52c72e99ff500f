"""A plain SimPy implementation of mgst's LPAS_DG model (no failures), the baseline for bench_sim.py."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import deque
from dataclasses import dataclass

import simpy

from mgst.model import Experiment
from mgst.papers.mgst.lpas_options import LpasOptions
from mgst.policies.allocation import solve_allocation
from mgst.workload.poisson import PoissonWorkload


@dataclass(slots=True)
class JobRecord:
    """What the model keeps for every job."""

    id: int
    job_class: int
    submitted: float
    size: float
    started: float | None = None
    completed: float | None = None
    machine: int | None = None


class LpasDGModel:
    """Jobs of the experiment's Poisson classes on its machines, scheduled by LPAS_DG.

    Each machine is a SimPy process. An idle machine waits on its own event in
    an FCFS queue of idle machines; an arriving job goes to the first idle
    machine eligible for its class (the machines passed over move to the back:
    mgst's rotating server queue), else to its class's FIFO queue. A machine
    that finishes a job takes the head of the eligible non-empty class with the
    largest mu_ij * (now - submitted) (ties to the lower class), or goes idle.
    """

    def __init__(
        self,
        exp: Experiment,
        *,
        seed: int | None = None,
        replication: int = 0,
        horizon: float | None = None,
        drain_limit: float | None = None,
    ):
        if exp.failures is not None:
            raise ValueError(f"{exp.name}: this model has no machine failures")
        self.seed = exp.simulation.seed if seed is None else seed
        self.replication = replication
        self.horizon = exp.simulation.horizon if horizon is None else horizon
        # Like mgst: drain for at most as long again as the arrival period.
        self.drain_limit = self.horizon if drain_limit is None else drain_limit
        self.exp = exp
        n, m = len(exp.classes), len(exp.machines)
        share = exp.availability
        # mu_ij = mu'_ij * a_j: service speed of class i on machine j.
        self.speed = [[exp.rates[i][j] * share[j] for j in range(m)] for i in range(n)]
        # mgst's LPAS_DG options (simplex variant, tolerance): on a grid of repeated machines the LP
        # has several optimal vertices, and the variant decides which one, hence which machines run what.
        options = LpasOptions(**exp.policy.options)
        eligible = solve_allocation(exp.rates, exp.arrival_rates, share, options.lp_method).eligible(options.tolerance)
        self.eligible = eligible  # [class][machine]
        self.classes_of = [[i for i in range(n) if eligible[i][j]] for j in range(m)]
        self.queues: list[deque[JobRecord]] = [deque() for _ in range(n)]
        self.idle: deque[int] = deque()  # idle machines, longest idle first
        self.wakeup: list[simpy.Event | None] = [None] * m
        self.records: list[JobRecord] = []  # every job, in id (= arrival) order
        self.env = simpy.Environment()
        for j in range(m):  # they start at t = 0, in this order, all idle
            self.env.process(self.machine(j))
        self.env.process(self.arrivals())

    def run(self) -> list[JobRecord]:
        self.env.run(until=self.horizon + self.drain_limit)
        return self.records

    def arrivals(self):
        env = self.env
        workload = PoissonWorkload(self.exp.arrival_rates, self.seed, self.replication)
        horizon = self.horizon
        records = self.records
        while True:
            job = workload.next_job()
            if job.submitted >= horizon:
                return
            yield env.timeout(job.submitted - env.now)
            rec = JobRecord(job.id, job.job_class, job.submitted, job.size)
            records.append(rec)
            self.dispatch(rec)

    def dispatch(self, rec: JobRecord) -> None:
        """Give an arriving job to the first eligible idle machine, or queue it."""
        idle = self.idle
        eligible = self.eligible[rec.job_class]
        for k, j in enumerate(idle):
            if eligible[j]:
                # The machines passed over move to the back of the idle queue.
                idle.rotate(-k)
                idle.popleft()
                self.wakeup[j].succeed(rec)
                return
        self.queues[rec.job_class].append(rec)

    def choose(self, j: int) -> JobRecord | None:
        """LPAS_DG: the head job of the eligible class maximising mu_ij * its wait."""
        now = self.env.now
        queues = self.queues
        speed = self.speed
        best: deque[JobRecord] | None = None
        best_value = -1.0
        for i in self.classes_of[j]:
            q = queues[i]
            if q:
                value = speed[i][j] * (now - q[0].submitted)
                if value > best_value:
                    best, best_value = q, value
        return best.popleft() if best is not None else None

    def machine(self, j: int):
        env = self.env
        speed = [row[j] for row in self.speed]
        while True:
            self.wakeup[j] = wake = env.event()
            self.idle.append(j)
            rec = yield wake
            while rec is not None:
                rec.started = env.now
                rec.machine = j
                yield env.timeout(rec.size / speed[rec.job_class])
                rec.completed = env.now
                rec = self.choose(j)


def simulate(exp: Experiment, **kw) -> list[JobRecord]:
    """Run one replication; keywords as for :class:`LpasDGModel`."""
    return LpasDGModel(exp, **kw).run()


# --------------------------------------------------------------------------- agreement check


def compare(exp: Experiment, seed: int, replication: int, horizon: float) -> dict:
    """Run mgst and this model on the same jobs; how far apart are they, job by job?"""
    from mgst.sim.loop import Simulation

    mg = Simulation(exp, seed=seed, replication=replication, horizon=horizon).run().jobs
    sp = simulate(exp, seed=seed, replication=replication, horizon=horizon)
    if [r.job.id for r in mg] != [r.id for r in sp]:
        raise AssertionError(f"different job sequences: {len(mg)} mgst jobs, {len(sp)} SimPy jobs")
    n = len(exp.classes)
    out: dict = {
        "jobs": len(mg),
        "machine_mismatch": sum(a.done_on != b.machine for a, b in zip(mg, sp, strict=True)),
        "max_start_diff": max(abs(a.first_sent - b.started) for a, b in zip(mg, sp, strict=True)),
        "max_completed_diff": max(abs(a.completed - b.completed) for a, b in zip(mg, sp, strict=True)),
        "classes": [],
    }
    for i in range(n):
        rm = [a.completed - a.job.submitted for a in mg if a.job.job_class == i]
        rs = [b.completed - b.submitted for b in sp if b.job_class == i]
        out["classes"].append((i, len(rm), statistics.fmean(rm), statistics.fmean(rs)))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Check the SimPy model against mgst, job by job.")
    p.add_argument("--experiment", default="experiments/hihi-mfd-fd.toml")
    p.add_argument("--horizon", type=float, default=1000.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--replications", type=int, default=3)
    args = p.parse_args(argv)
    from mgst.config import load_experiment

    exp = load_experiment(args.experiment)
    seed = exp.simulation.seed if args.seed is None else args.seed
    ok = True
    for rep in range(args.replications):
        c = compare(exp, seed, rep, args.horizon)
        print(
            f"seed {seed} replication {rep}: {c['jobs']} jobs, {c['machine_mismatch']} on a different machine, "
            f"max |start diff| {c['max_start_diff']:.3g}, max |completion diff| {c['max_completed_diff']:.3g}"
        )
        print(f"  {'class':>5} {'jobs':>6} {'mgst mean R':>12} {'SimPy mean R':>13} {'rel diff':>9}")
        for i, count, rm, rs in c["classes"]:
            print(f"  {i + 1:>5} {count:>6} {rm:>12.6f} {rs:>13.6f} {abs(rm - rs) / rm:>9.2e}")
        ok = ok and c["machine_mismatch"] == 0 and math.isclose(c["max_completed_diff"], 0.0, abs_tol=1e-6)
    print("agreement:", "job by job" if ok else "NOT job by job")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
