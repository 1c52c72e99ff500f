"""An Experiment as plain JSON-able values and back: what a run's journal keeps of its setting.

Fields at their defaults (granularity 1, one slot and no attributes, Poisson classes, no
staging) are left out, so an experiment of the MGST paper encodes as it always did and
journals written before those fields existed still match and decode.
"""

from __future__ import annotations

from typing import Any

from mgst.availability import registry as availability
from mgst.model import (
    BagList,
    BagStream,
    Experiment,
    JobClass,
    Machine,
    PoissonClasses,
    PolicySpec,
    SimulationSettings,
    StagingModel,
    SwfTrace,
    TestbedSettings,
    Workload,
)


def _plain_value(v: Any) -> Any:
    return [_plain_value(x) for x in v] if isinstance(v, tuple | list) else v


def _frozen_value(v: Any) -> Any:
    return tuple(_frozen_value(x) for x in v) if isinstance(v, list) else v


def _plain_workload(w: Workload) -> dict[str, Any]:
    if isinstance(w, BagStream):
        return {"kind": "bags", "bag_rate": w.bag_rate, "application_size": w.application_size,
                "mix": list(w.mix), "spread": w.spread, "max_bags": w.max_bags}
    if isinstance(w, BagList):
        plain = {"kind": "bag_list", "bags": [[at, [[c, s] for c, s in tasks]] for at, tasks in w.bags]}
        if w.attributes:  # (only when the file gives some: a journal of a run without them is as it was)
            plain["attributes"] = [[[k, v] for k, v in pairs] for pairs in w.attributes]
        return plain
    if isinstance(w, SwfTrace):
        return {"kind": "swf", "path": w.path, "time_scale": w.time_scale, "work_scale": w.work_scale,
                "bags": w.bags}
    raise TypeError(f"unknown workload model {w!r}")


def _workload(d: dict[str, Any] | None) -> Workload:
    if d is None:
        return PoissonClasses()
    kind = d["kind"]
    if kind == "bags":
        return BagStream(d["bag_rate"], d["application_size"], tuple(d["mix"]), d["spread"], d["max_bags"])
    if kind == "bag_list":
        return BagList(tuple((at, tuple((c, s) for c, s in tasks)) for at, tasks in d["bags"]),
                       tuple(tuple((k, v) for k, v in pairs) for pairs in d.get("attributes", ())))
    if kind == "swf":
        return SwfTrace(d["path"], d["time_scale"], d["work_scale"], d["bags"])
    raise ValueError(f"unknown workload kind {kind!r}")


def _plain_machine(m: Machine) -> list[Any]:
    out = [m.name, list(m.rates), m.availability]
    if m.slots != 1 or m.attributes or m.cpus is not None:
        out += [m.slots, [[k, _plain_value(v)] for k, v in m.attributes]]
    if m.cpus is not None:  # (stores written before cpus existed stay comparable)
        out.append(m.cpus)
    return out


def _machine(d: list[Any]) -> Machine:
    name, rates, availability, *rest = d
    slots, attributes, *more = rest if rest else (1, [])
    cpus = more[0] if more else None
    return Machine(name, tuple(rates), availability, slots, tuple((k, _frozen_value(v)) for k, v in attributes),
                   cpus)


def to_plain(exp: Experiment) -> dict[str, Any]:
    tb = exp.testbed
    sim = exp.simulation
    d: dict[str, Any] = {
        "name": exp.name,
        "description": exp.description,
        "classes": [[c.name, c.arrival_rate] + ([c.granularity] if c.granularity != 1.0 else [])
                    for c in exp.classes],
        "machines": [_plain_machine(m) for m in exp.machines],
        "policy": {"name": exp.policy.name, "options": dict(exp.policy.options)},
        "failures": availability.to_plain(exp.failures),
        "simulation": [sim.horizon, sim.warmup, sim.replications, sim.seed, sim.checkpoint_interval],
        "testbed": [tb.time_unit, tb.duration, tb.timeout_factor, tb.executor,
                    [c if isinstance(c, str) else list(c) for c in tb.commands]],
    }
    if tb.detection != "heartbeat":  # stores written before detection existed stay comparable
        d["testbed"].append(tb.detection)
    if not isinstance(exp.workload, PoissonClasses):
        d["workload"] = _plain_workload(exp.workload)
    if exp.staging is not None:
        st = exp.staging
        d["staging"] = {"resume": None if st.resume is None else list(st.resume),
                        "start": None if st.start is None else list(st.start)}
    return d


def from_plain(d: dict[str, Any]) -> Experiment:
    tu, duration, k, executor, commands, *rest = d["testbed"]
    staging = d.get("staging")
    return Experiment(
        name=d["name"],
        description=d["description"],
        classes=tuple(JobClass(*c) for c in d["classes"]),
        machines=tuple(_machine(m) for m in d["machines"]),
        policy=PolicySpec(d["policy"]["name"], d["policy"]["options"]),
        failures=availability.from_plain(d["failures"]),
        workload=_workload(d.get("workload")),
        staging=None if staging is None else StagingModel(
            *(None if staging[key] is None else tuple(staging[key]) for key in ("resume", "start"))),
        simulation=SimulationSettings(*d["simulation"]),
        testbed=TestbedSettings(tu, duration, k, executor,
                                tuple(c if isinstance(c, str) else tuple(c) for c in commands),
                                rest[0] if rest else "heartbeat"),
    )


# The names of the fields to_plain lists by position (a section's, or an entry's of a list), for difference's paths.
_FIELDS = {
    "simulation": ("horizon", "warmup", "replications", "seed", "checkpoint_interval"),
    "testbed": ("time_unit", "duration", "timeout_factor", "executor", "commands", "detection"),
    "classes[]": ("name", "arrival_rate", "granularity"),
    "machines[]": ("name", "rates", "availability", "slots", "attributes", "cpus"),
}


def difference(ours: Any, theirs: Any, path: str = "") -> str | None:
    """Where two plain experiments (to_plain) first differ, said with both values (``ours`` first), or None if they are
    equal: a resumed run's file against the one the run began with."""
    if ours == theirs:
        return None
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for key in [*ours, *(k for k in theirs if k not in ours)]:
            where = f"{path}.{key}" if path else str(key)
            if key not in ours or key not in theirs:
                return f"{where}: {'only in the file' if key in ours else 'only in the run'}"
            found = difference(ours[key], theirs[key], where)
            if found is not None:
                return found
    elif isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            return f"{path}: {len(ours)} entries in the file, {len(theirs)} in the run"
        names = _FIELDS.get(path) or _FIELDS.get(path.split("[")[0] + "[]" if path.endswith("]") else "", ())
        for i, (a, b) in enumerate(zip(ours, theirs)):
            found = difference(a, b, f"{path}.{names[i]}" if i < len(names) else f"{path}[{i}]")
            if found is not None:
                return found
    return f"{path}: {str(ours)[:60]} in the file, {str(theirs)[:60]} in the run"
