"""Warnings on a testbed run's length before it starts: too short to generate the jobs its figures need, or a drain
that may last far longer than the run."""

from __future__ import annotations

from mgst.model import Experiment
from mgst.testbed.run_result import DRAIN_JOBS, drain_bound, slowest_machine

# Fewer jobs expected than this in the whole run: its means and intervals say next to nothing.
FEW_JOBS = 10.0
# A drain that may last longer than this many wall seconds, and than the run's generation, is said before the run.
LONG_DRAIN_S = 600.0


def few_jobs_warning(experiment: Experiment, duration: float, time_unit: float) -> str | None:
    """A warning if the job classes' arrivals expect fewer than FEW_JOBS jobs in ``duration`` wall seconds (model
    time duration / time_unit), else None (a finite workload, a bag list or a trace, has its own count)."""
    rate = sum(experiment.arrival_rates)
    if rate <= 0:
        return None
    expected = rate * duration / time_unit
    if expected >= FEW_JOBS:
        return None
    return (f"the run generates about {expected:.3g} jobs (arrival rate {rate:g} a time unit over {duration:g} s of "
            f"{time_unit:g} s units: {duration / time_unit:.3g} time units): its figures will say next to nothing; "
            "give a longer --duration or a shorter --time-unit")


def long_drain_warning(experiment: Experiment, duration: float, time_unit: float) -> str | None:
    """A warning if the run may drain (mgst.testbed.run_result.drain_bound) longer than LONG_DRAIN_S and than its
    ``duration`` of generation, else None."""
    drain = drain_bound(experiment, time_unit)
    if drain <= max(LONG_DRAIN_S, duration):
        return None
    slowest = slowest_machine(experiment)
    return (f"after its {duration:g} s of generation the run may drain for up to {drain:,.0f} s (the jobs still in "
            f"the system finish first: the drain lasts up to {DRAIN_JOBS} times the biggest class's job on the slowest "
            f"machine, "
            f"{slowest.name}, at its CPU share {slowest.availability:g}); Ctrl-C ends the drain, the unfinished jobs "
            "cut off")
