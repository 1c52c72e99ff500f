"""An Experiment as plain JSON-able values and back: what a run's journal keeps of its setting."""

from __future__ import annotations

from typing import Any

from mgst.model import (
    Experiment,
    FailureModel,
    JobClass,
    Machine,
    PolicySpec,
    SimulationSettings,
    TestbedSettings,
)


def to_plain(exp: Experiment) -> dict[str, Any]:
    tb = exp.testbed
    sim = exp.simulation
    return {
        "name": exp.name,
        "description": exp.description,
        "classes": [[c.name, c.arrival_rate] for c in exp.classes],
        "machines": [[m.name, list(m.rates), m.availability] for m in exp.machines],
        "policy": {"name": exp.policy.name, "options": dict(exp.policy.options)},
        "failures": None if exp.failures is None else [exp.failures.mean_up, exp.failures.mean_down],
        "simulation": [sim.horizon, sim.warmup, sim.replications, sim.seed, sim.checkpoint_interval],
        "testbed": [tb.time_unit, tb.duration, tb.timeout_factor, tb.executor,
                    [c if isinstance(c, str) else list(c) for c in tb.commands]],
    }


def from_plain(d: dict[str, Any]) -> Experiment:
    tu, duration, k, executor, commands = d["testbed"]
    return Experiment(
        name=d["name"],
        description=d["description"],
        classes=tuple(JobClass(n, a) for n, a in d["classes"]),
        machines=tuple(Machine(n, tuple(r), a) for n, r, a in d["machines"]),
        policy=PolicySpec(d["policy"]["name"], d["policy"]["options"]),
        failures=None if d["failures"] is None else FailureModel(*d["failures"]),
        simulation=SimulationSettings(*d["simulation"]),
        testbed=TestbedSettings(tu, duration, k, executor,
                                tuple(c if isinstance(c, str) else tuple(c) for c in commands)),
    )
