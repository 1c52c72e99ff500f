"""Checks on a loaded experiment: overload warnings and run lengths a run can afford."""

from __future__ import annotations

import math

from mgst.availability import registry as availability_kinds
from mgst.config.experiment import (
    MAX_DURATION,
    MAX_TIME_UNIT,
    MIN_TIME_UNIT,
    ConfigError,
    _check_length,
    _check_range,
    _is_number,
    describe_value,
)
from mgst.model import BagList, BagStream, Experiment, PoissonClasses
from mgst.workload.bags import normalised_mix

__all__ = [
    "check_run_length", "check_sweep_run_length", "check_testbed_overrides", "overload_warning",
    "simultaneous_bags_warning",
]


def overload_warning(exp: Experiment) -> str | None:
    """A warning if the experiment's workload exceeds its grid's capacity in the long run, else None.

    Poisson classes: the LPAS_DG allocation LP (rates mu'_ij / X_i, jobs of mean size X_i)
    finds the system overloaded. A bag stream: Anglano & Canonico's load factor
    L = bag_rate x application_size / sum_j EP_j is >= 1 (EP_j: machine j's work rate for
    the mix, times a_j and its up fraction). A bag list or a trace is finite: None. With
    failures, each a_j is scaled by the machine's long-run up fraction.
    """
    if isinstance(exp.workload, BagStream):
        return _bag_overload(exp, exp.workload)
    if not isinstance(exp.workload, PoissonClasses):
        return None
    from mgst.policies.allocation import AllocationError, solve_allocation

    availability, note = _effective_availability(exp)
    try:
        alloc = solve_allocation(exp.job_rates, list(exp.arrival_rates), availability)
    except AllocationError as err:
        key = "workload.arrival_rates" if err.argument == "arrival_rates" else "machines.rates"
        scaled = key == "machines.rates" and any(c.granularity != 1.0 for c in exp.classes)
        if scaled:  # (the LP's rates are jobs a time unit: each machine rate over its class's granularity)
            key = "machines.rates, workload.granularity"
        raise ConfigError(key, f"the allocation LP cannot be solved: {err}" + (
            " (the LP's rates are jobs a time unit: machines.rates over workload.granularity)" if scaled else "")
        ) from None
    if not alloc.overloaded:
        return None
    lam = float(alloc.lam)
    share = 100.0 / lam if lam > 0 else math.inf  # (a law of failures every 1e-300 time units: 1e305 %)
    load = ((f"{share:.1f}" if share < 1e6 else f"{share:.3g}") + " % of capacity" if math.isfinite(share)
            else "beyond any capacity")
    return (
        f"overloaded: the allocation LP gives lambda* = {lam:.2f} <= 1, the load is "
        f"{load}{note}; response times will grow without bound"
    )


def _effective_availability(exp: Experiment) -> tuple[list[float], str]:
    """Each machine's a_j times its long-run fraction of it (its up fraction, for up/down laws), and a note."""
    fractions, note = availability_kinds.capacity(exp)
    return [a * f for a, f in zip(exp.availability, fractions)], note


def _bag_overload(exp: Experiment, spec: BagStream) -> str | None:
    availability, note = _effective_availability(exp)
    mix = normalised_mix(spec.mix)
    work = mix * [c.granularity for c in exp.classes]
    work = work / work.sum()  # fraction of the work in each class
    power = 0.0
    for j, m in enumerate(exp.machines):  # the mix's work rate on machine j: 1 / sum_i w_i / mu_ij
        power += availability[j] / sum(w / m.rates[i] for i, w in enumerate(work) if w > 0)
    load = spec.bag_rate * spec.application_size / power
    if load < 1:
        return None
    return (
        f"overloaded: the load factor L = bag_rate x application_size / sum of effective powers = "
        f"{spec.bag_rate:g} x {spec.application_size:g} / {power:.2f} = {load:.2f} >= 1{note}; "
        "bag turnaround times will grow without bound"
    )


def check_run_length(experiment: Experiment, horizon: float, key: str) -> None:
    """Check a simulation horizon given outside the file (``key``: "--horizon").

    Raises ConfigError naming ``key`` unless ``horizon`` (model time units) is positive,
    finite and within MAX_JOBS jobs per replication (and as many failure cycles and
    checkpoints).
    """
    if not _is_number(horizon) or not math.isfinite(horizon) or horizon <= 0:
        raise ConfigError(key, f"must be a positive number, got {describe_value(horizon)}")
    _check_length(experiment, float(horizon), "per replication", key, key, key)


def check_sweep_run_length(experiment: Experiment, path: str | None, cell: str) -> None:
    """Check one sweep cell's run: within MAX_JOBS jobs, failure cycles and checkpoints per replication, as an
    experiment file's is. ConfigError naming the sweep file's key (``simulation.horizon``, or
    ``simulation.checkpoint_interval``) and, in its text, the cell (``cell``: its axis values)."""
    _check_length(experiment, experiment.simulation.horizon, f"per replication (cell {cell})", "simulation.horizon",
                  "simulation.horizon", "simulation.checkpoint_interval", path)


def check_testbed_overrides(
    experiment: Experiment, duration: float | None, time_unit: float | None
) -> None:
    """Check the testbed's --duration and --time-unit (None: not given, the file's value).

    Raises ConfigError naming "--duration" or "--time-unit" unless each given value is
    positive, finite and within bounds (MAX_DURATION; MIN_TIME_UNIT to MAX_TIME_UNIT),
    and the run they make stays within MAX_JOBS jobs (and failure cycles); a run too
    long blames --duration if it was given.
    """
    tb = experiment.testbed
    if duration is not None:
        _check_range(duration, "--duration", 0.0, MAX_DURATION, "s", None)
    if time_unit is not None:
        _check_range(time_unit, "--time-unit", MIN_TIME_UNIT, MAX_TIME_UNIT, "s", None)
    if duration is None and time_unit is None:
        key = "testbed.duration"
    else:
        key = "--duration" if duration is not None else "--time-unit"
    d = tb.duration if duration is None else float(duration)
    tu = tb.time_unit if time_unit is None else float(time_unit)
    _check_length(experiment, d / tu, "in the testbed run", key, key, None, note=f" ({d:g} s / {tu:g} s each)")


# The policies whose default Rank is a bag's Priority (docs/policies.md, "GridBot").
_PRIORITY_POLICIES = frozenset({"gridbot"})


def simultaneous_bags_warning(exp: Experiment) -> str | None:
    """A warning if a bag list has two bags arriving at the same instant, the higher Priority listed after the lower,
    under a policy that ranks by Priority: bags that arrive together are seen one at a time in the listed order
    (docs/readings.md), so a host idle then takes a task of the first, whatever the priorities. Else None."""
    workload = exp.workload
    if exp.policy.name not in _PRIORITY_POLICIES or not isinstance(workload, BagList) or not workload.attributes:
        return None
    lowest: dict[float, tuple[int, float]] = {}  # arrival time -> the bag of lowest priority listed at it so far
    for i, ((at, _), attributes) in enumerate(zip(workload.bags, workload.attributes)):
        priority = dict(attributes).get("Priority", 0)
        if not _is_number(priority):
            continue
        if at not in lowest or priority < lowest[at][1]:
            lowest[at] = (i, priority)
        elif priority > lowest[at][1]:
            k, lower = lowest[at]
            return (f"workload.bags[{i}] (Priority {priority:g}) arrives at {at:g} with workload.bags[{k}] "
                    f"(Priority {lower:g}), listed after it: bags that arrive together are seen in the listed order, "
                    f"so a host idle then takes a task of bags[{k}] first; list them highest Priority first "
                    "(docs/readings.md, GridBot)")
    return None
