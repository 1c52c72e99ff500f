"""Casanova et al.'s experiment (its section VII) as `mgst sweep` runs it: one cell is one problem instance.

A cell is (m, n_com, w_min, scenario) and its replication is the trial: the scenario's platform (20 workers'
chains and speeds) is drawn from the sweep's seed and the cell, the trial's availability realisation from the
seed and the trial, and every heuristic runs on that same realisation (common random numbers) inside the
cell, which returns each one's makespan (empty: it hit the cap, a failure). mgst.papers.casanova.tables
turns sweep.csv into the paper's Tables I and II and Figure 2.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mgst.availability.markov3 import Markov3Availability, Markov3Group
from mgst.config.experiment import describe_value
from mgst.config.model_sections import MAX_MACHINES
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.papers.casanova.estimates import CREDITS, Estimates
from mgst.papers.casanova.heuristics import NAMES
from mgst.papers.casanova.instance import CAP, ITERATIONS, PROCESSORS, Scenario, realisation, run, scenario
from mgst.scenarios.scenario import Axis, Measures, RunSettings
from mgst.scenarios.scenario import Scenario as SweepScenario

TASKS = ("5", "10")
N_COM = ("5", "10", "20")
W_MIN = tuple(str(w) for w in range(1, 11))
SCENARIOS = tuple(str(i) for i in range(10))

MEASURES = Measures(
    columns=(*(f"makespan_{h}" for h in NAMES), "wall_s"),
    summarised=(),
)


# The most iterations of an application (the paper's have 10): each is a synchronisation of every worker.
MAX_ITERATIONS = 1_000_000


def _option_defaults() -> dict[str, Any]:
    return {"exact": False, "present_states": False, "credit": "all", "mu": 0, "cap": CAP, "iterations": ITERATIONS,
            "processors": PROCESSORS, "reuse_data": False}


def _check_option(name: str, value: Any) -> str | None:
    if name in ("exact", "present_states", "reuse_data"):
        return None if isinstance(value, bool) else f"must be true or false, got {describe_value(value)}"
    if name == "credit":
        names = ", ".join(map(repr, CREDITS))
        return None if value in CREDITS else f"must be one of {names}, got {describe_value(value)}"
    if name == "mu":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else f"must be an integer >= 0 (0: m, no limit), got {describe_value(value)}"
    if name in ("iterations", "processors"):
        most = MAX_ITERATIONS if name == "iterations" else MAX_MACHINES
        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= most
        return None if ok else f"must be an integer in 1..{most:,}, got {describe_value(value)}"
    if name == "cap":
        # in slots: under one, no run can finish (every makespan would be NaN)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 1 <= value <= 1e9
        return None if ok else f"must be a number of slots in [1, 1e9], got {describe_value(value)}"
    return ("not an option of this scenario; known: exact, present_states, credit, mu, cap, iterations, processors, "
            "reuse_data")


def _build(cell: Mapping[str, str], settings: RunSettings, seed: int, trial: int,
           options: Mapping[str, Any]) -> Experiment:
    """The instance as an Experiment: the workers (their slots per task) and their markov3 chains; the policy
    spec carries the instance's parameters and the trial. ValueError for limits that cannot hold an iteration's m
    tasks (processors x mu < m: every iteration of the cell would fail), which the sweep says before any cell runs."""
    m, processors, mu = int(cell["m"]), int(options["processors"]), int(options.get("mu", 0))
    if mu and processors * mu < m:
        raise ValueError(f"options.processors = {processors} workers holding at most options.mu = {mu} tasks each "
                         f"hold {processors * mu}, fewer than the m = {m} tasks of an iteration: raise either, or "
                         "leave mu at 0 (no limit)")
    s = scenario(int(cell["m"]), int(cell["n_com"]), int(cell["w_min"]), seed, int(cell["scenario"]),
                 p=int(options["processors"]))
    machines = tuple(Machine(f"P{q}", (1.0 / w,), attributes=(("group", q), ("work", w)))
                     for q, w in enumerate(s.work))
    return Experiment(
        name="casanova-m{m}-n{n_com}-w{w_min}-s{scenario}".format(**cell),
        classes=(JobClass("task", 0.0, 1.0),), machines=machines,
        policy=PolicySpec("casanova", {"m": s.m, "n_com": s.n_com, "w_min": s.w_min, "trial": trial,
                                       "exact": bool(options["exact"]),
                                       "present_states": bool(options.get("present_states", False)),
                                       "credit": str(options.get("credit", "all")), "mu": int(options.get("mu", 0)),
                                       "reuse_data": bool(options.get("reuse_data", False)),
                                       "cap": float(options["cap"]),
                                       "iterations": int(options["iterations"])}),
        failures=Markov3Availability(groups=tuple(Markov3Group(m, 1.0) for m in s.matrices)),
        simulation=SimulationSettings(seed=seed),
    )


def simulate_cell(experiment: Experiment, replication: int) -> dict[str, Any]:
    """Every heuristic on the cell's instance; makespan_H is NaN where H hit the cap."""
    o = experiment.policy.options
    groups = experiment.failures.groups  # type: ignore[union-attr]
    s = Scenario(o["m"], o["n_com"], o["w_min"], tuple(g.matrix for g in groups),
                 tuple(int(m.attribute("work")) for m in experiment.machines))
    est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data, exact=o["exact"],
                    present=o.get("present_states", False), credit=o.get("credit", "all"))
    seed, start = experiment.simulation.seed, time.perf_counter()
    chains = realisation(s, o["trial"], seed)  # drawn once, replayed for every heuristic
    out: dict[str, Any] = {}
    for h in NAMES:
        r = run(s, h, o["trial"], seed, exact=o["exact"], cap=o["cap"], iterations=o["iterations"], estimates=est,
                chains=chains, mu=o.get("mu", 0), reuse_data=o.get("reuse_data", False))
        out[f"makespan_{h}"] = r.makespan if r.makespan is not None else math.nan
    out["wall_s"] = time.perf_counter() - start
    return out


def estimated_cost(experiment: Experiment) -> float:
    """A cell's cost relative to the others, for the order cells start in (longest first): it grows with w_min
    (a slot's work; the cells that hit the cap are at large w_min) and with m. Fitted loosely to the cells' wall
    times of docs/reproduction-casanova.md's sweeps (medians from 0.1 s at m 5, w_min 1 to 250 s at m 10, w_min 10)."""
    o = experiment.policy.options
    return float(o["m"]) ** 2 * float(o["w_min"]) ** 3


def _figures(spec: Any, out_dir: Path) -> list[Path]:
    from mgst.papers.casanova.tables import write_outputs  # noqa: PLC0415 (matplotlib is slow to import)

    return write_outputs(out_dir)


SCENARIO = SweepScenario(
    name="casanova",
    doc="Casanova, Dufossé, Robert & Vivien: 17 heuristics x m x n_com x w_min x 10 scenarios x 10 trials",
    axes=(
        Axis("m", TASKS, "tasks per iteration"),
        Axis("n_com", N_COM, "transfers the master carries at once"),
        Axis("w_min", W_MIN, "the fastest speed: w_q ~ U[w_min, 10 w_min], T_data = w_min, T_prog = 5 w_min"),
        Axis("scenario", SCENARIOS, "a drawn platform (chains and speeds)"),
    ),
    build=_build,
    option_defaults=_option_defaults,
    check_option=_check_option,
    panels=("m",),
    groups="w_min",
    bars="n_com",
    cell=simulate_cell,
    measures=MEASURES,
    per_replication=True,
    figures=_figures,
    run_settings=False,
    cost=estimated_cost,
    later_options=("reuse_data",),
)
