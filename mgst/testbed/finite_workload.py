"""A finite workload (a bag list, a job trace) run to its end: the simulation's horizon and drain beside it, and
each bag's makespan on the testbed and in the simulation, side by side (summary.json's ``bag_makespans``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mgst.model import Experiment, PoissonClasses
from mgst.testbed.run_result import TestbedRun, drain_bound
from mgst.workload import late_arrivals, make_workload

# summary.json lists the makespans of at most this many bags side by side (a finite list is a few applications;
# a long trace's bags are in bags.csv).
MAX_BAG_ROWS = 100


@dataclass(frozen=True, slots=True)
class FiniteWindow:
    """How to simulate beside a run whose workload ended before its generation did."""

    horizon: float  # model time: after the last arrival
    drain_limit: float  # model time after the horizon: as long as the testbed could have drained


def finite_window(run: TestbedRun, horizon: float) -> FiniteWindow | None:
    """For a run that generated its whole workload (its last arrival is before ``horizon``, the testbed's), the
    window its simulation must cover: every arrival, and a drain as long as the testbed's bound (the mapper's
    drain time-out, or longer if the run drained longer), so that the simulation ends, like the run, when the last
    task is done (or at the same bound). None for an endless workload (Poisson classes, a bag stream without
    ``max_bags``, a trace going on past the horizon): its simulation drains as before."""
    exp = run.experiment
    if isinstance(exp.workload, PoissonClasses):
        return None
    workload = make_workload(exp, run.seed, 0)
    last = 0.0
    while workload.peek_time() <= horizon:  # (<=: the testbed's horizon is its last feed, at or after the arrival)
        last = workload.next().submitted
    if math.isfinite(workload.peek_time()):
        return None
    drained = max(0.0, run.end - run.generation_end)
    drain = max(drain_bound(exp, run.time_unit), drained) / run.time_unit
    return FiniteWindow(max(horizon, math.nextafter(last, math.inf)), max(horizon, drain))


def late_arrivals_warning(experiment: Experiment, duration: float, time_unit: float, seed: int) -> str | None:
    """A warning if a finite workload (a bag list, a job trace) has arrivals the run will not generate (at or after
    model time duration / time_unit: `duration` is wall seconds), else None."""
    horizon = duration / time_unit
    counts = late_arrivals(experiment, horizon, seed)
    if counts is None:
        return None
    late, total = counts
    return (f"{late} of the workload's {total} arrivals come at or after model time {horizon:g} (the "
            f"duration, {duration:g} s, over the time unit, {time_unit:g} s): the run will not generate them; give a "
            "longer --duration (a finite workload's run ends when its last task is done anyway)")


def bag_makespans(testbed_rows: list[tuple], simulation_rows: list[tuple]) -> list[dict[str, Any]]:
    """Each bag's makespan (Kondo et al.'s: its last task's completion less its submission, model time) on the
    testbed and in the simulation (replication 0: the same bags), with the difference in % of the simulation's;
    None where a side did not complete the bag; and whether the testbed's summary counts it. Rows are bags.csv's
    (mgst.bot_metrics.bag_row)."""
    sim = {row[1]: row for row in simulation_rows}
    out = []
    for row in testbed_rows[:MAX_BAG_ROWS]:
        other = sim.get(row[1])
        testbed = _number(row[5])
        simulated = _number(other[5]) if other is not None else None
        diff = (100.0 * (testbed - simulated) / simulated if testbed is not None and simulated else None)
        out.append({"bag": row[1], "submitted": _number(row[2]), "tasks": row[8],
                    "testbed": testbed, "simulation": simulated,
                    "difference_pct": None if diff is None else round(diff, 3),
                    "counted": row[-1] == "Yes"})  # (not: before the warm-up, or caught in a mapper outage)
    return out


def format_bag_makespans(rows: list[dict[str, Any]]) -> list[str]:
    """The lines `mgst run` prints of them: "makespan from submission" (Kondo et al.'s), where the bag table's
    MAKESPAN is from the bag's first dispatch."""

    def f(x: float | None) -> str:
        return "not done" if x is None else f"{x:.1f}"

    return [f"bag {r['bag']} ({r['tasks']} tasks, submitted at {r['submitted']:g}): makespan from submission "
            f"{f(r['testbed'])} on "
            f"the testbed, {f(r['simulation'])} in simulation"
            + (f" ({r['difference_pct']:+.1f} %)" if r["difference_pct"] is not None else "")
            + ("" if r.get("counted", True) else "; not counted (before the warm-up, or caught in a mapper outage)")
            for r in rows]


def _number(text: str) -> float | None:
    return float(text) if text else None


__all__ = ["FiniteWindow", "bag_makespans", "finite_window", "format_bag_makespans", "late_arrivals_warning"]
