"""One Kondo run's metrics: makespan, the optimum and their ratio, the waste of replication, the prediction error.

- ``makespan``: the application's last task's completion minus its submission (model seconds).
- ``optimal``: the omniscient optimum of the same platform, start and application (mgst.papers.kondo.optimum);
  ``ratio`` = makespan / optimal (>= 1).
- ``waste_cpu_s``: the CPU time of the discarded replicas: replicas cancelled because a sibling
  replica of their task completed first, each counted as the CPU seconds its host gave it (its work
  done / the host's power = the integral of its CPU share while it ran). ``waste`` is the same work
  as a fraction of the application's (T x s work units): replication's extra work, comparable across
  task sizes. Replicas killed by a DOWN are not counted: any policy loses those, with or without
  replication.
- ``prediction_error``: |predicted - optimal| / optimal, for a policy that reports a
  ``predicted_makespan`` (EXCL-PRED*: its first prediction, from the application's submission); NaN for
  the others.
- ``replicas``: replicas started (``tasks`` of them are the first ones; the rest are restarts and copies).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mgst.core.state import BagRecord, Outcome
from mgst.model import Experiment
from mgst.papers.kondo.experiment import optimal_makespan_of
from mgst.papers.kondo.optimum import NotEnoughCapacity


@dataclass(frozen=True, slots=True)
class KondoRun:
    """One simulated run of a Kondo application, reduced."""

    makespan: float  # NaN if the application did not complete
    optimal: float  # NaN if the trace holds too little capacity
    waste_cpu_s: float
    waste: float
    replicas: int
    tasks: int
    predicted: float  # the policy's predicted_makespan (NaN: it makes none)
    completions: tuple[float, ...]  # each task's completion after the submission, sorted

    @property
    def ratio(self) -> float:
        return self.makespan / self.optimal if self.optimal > 0 else math.nan

    @property
    def prediction_error(self) -> float:
        return abs(self.predicted - self.optimal) / self.optimal if self.optimal > 0 else math.nan


def replication_waste(bag: BagRecord, powers: Sequence[float]) -> tuple[float, float]:
    """(CPU seconds, work units) of the bag's replicas cancelled because a sibling completed first."""
    cpu = work = 0.0
    for task in bag.tasks:
        if task.completed is None:
            continue
        for r in task.history:
            if r.outcome is not Outcome.CANCELLED or r.ended is None or r.id == task.done_by:
                continue
            done = (1.0 - r.progress) * task.job.size - r.remaining(r.ended)
            work += done
            cpu += done / powers[r.machine]
    return cpu, work


def reduce_run(experiment: Experiment, bag: BagRecord, report: dict[str, float], optimal: float) -> KondoRun:
    """The metrics of one run's application ``bag`` (the policy's ``report()``, the optimum given)."""
    powers = [m.rates[0] for m in experiment.machines]
    cpu, work = replication_waste(bag, powers)
    total = sum(t.job.size for t in bag.tasks)
    done = sorted(t.completed - bag.submitted for t in bag.tasks if t.completed is not None)
    makespan = bag.completed - bag.submitted if bag.completed is not None else math.nan
    return KondoRun(
        makespan=makespan, optimal=optimal, waste_cpu_s=cpu, waste=work / total if total > 0 else math.nan,
        replicas=sum(len(t.history) for t in bag.tasks), tasks=bag.size,
        predicted=float(report.get("predicted_makespan", math.nan)), completions=tuple(done),
    )


def simulate_run(experiment: Experiment, replication: int = 0) -> KondoRun:
    """Simulate a kondo_experiment (mgst.papers.kondo.experiment) and reduce it."""
    from mgst.sim.loop import Simulation  # noqa: PLC0415 (a worker imports only what it runs)

    simulation = Simulation(experiment, replication=replication)
    run = simulation.run()
    if len(run.bags) != 1:
        raise ValueError(f"{experiment.name}: a Kondo run has one application, this one had {len(run.bags)}")
    try:
        optimal = optimal_makespan_of(experiment)
    except NotEnoughCapacity:
        optimal = math.nan
    report = getattr(simulation.policy, "report", dict)()
    return reduce_run(experiment, run.bags[0], report, optimal)


# The columns simulate_cell writes, in order (mgst sweep's summary and plots read the first ones).
# (Not ``tasks``: the sweep's axis of that name is the cell's key.)
CELL_METRICS = ("ratio", "makespan", "optimal", "waste", "waste_cpu_s", "prediction_error", "replicas", "unfinished",
                "wall_s")


def simulate_cell(experiment: Experiment, replication: int) -> dict[str, Any]:
    """One `mgst sweep` cell of the kondo scenario: one run's metrics (the module docstring)."""
    t0 = time.perf_counter()
    run = simulate_run(experiment, replication)
    return {
        "ratio": run.ratio, "makespan": run.makespan, "optimal": run.optimal, "waste": run.waste,
        "waste_cpu_s": run.waste_cpu_s, "prediction_error": run.prediction_error, "replicas": run.replicas,
        "unfinished": math.isnan(run.makespan), "wall_s": time.perf_counter() - t0,
    }
