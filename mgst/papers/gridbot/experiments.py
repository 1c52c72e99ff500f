"""GridBot's six experiments (section 7 of the paper) as mgst runs them: each experiment file, its policies (the
variants the paper compares, written as expressions) and the readings a finding may depend on.

An experiment file (experiments/gridbot/<name>.toml) holds the setting and its headline policy; a variant replaces
[policy] expressions and options (and for the naive server and plain Condor, the failure detection and the per-job
start delay); a reading changes what the paper leaves open (docs/readings.md, "GridBot"). ``scaled`` takes a share
of every bag's tasks and of every grid's hosts, and of the thresholds that count jobs, for runs that fit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from mgst.availability.grid_size import DEFAULT_IDLE_LEAVE, GridSize
from mgst.availability.grids import GridsAvailability
from mgst.availability.kind import group_of
from mgst.model import BagList, Experiment, PolicySpec, StagingModel

EXPERIMENTS_FOLDER: Final = Path(__file__).resolve().parents[3] / "experiments" / "gridbot"

# Restrictive replication: a second copy only of a job whose copy runs on an unreliable host or has run 30 minutes.
# UNRELIABLE and RELIABLE are filled by the reading of "unreliable" (both conditions, or either).
_R_REPLICATION = "Job.Replicas < 2 && (Job.Running > 1800 || {unreliable_copy})"
_PERMISSIVE_REPLICATION = "true"  # up to max_replicas (5) copies
_RESTRICTIVE_SCHEDULING = "!Tail || ({reliable_host})"

# Each experiment's variants: policy option -> value (expressions as text), plus "detection", "timeout_factor",
# "start" (a per-replica start delay [a, b]) for the servers GridBot is compared with.
VARIANTS: Final[dict[str, dict[str, dict[str, Any]]]] = {
    "replication": {
        "PP": {"ReplicationRequirements": _PERMISSIVE_REPLICATION, "JobRequirements": "true"},
        "RR": {"ReplicationRequirements": _R_REPLICATION, "JobRequirements": _RESTRICTIVE_SCHEDULING},
        "PR": {"ReplicationRequirements": _PERMISSIVE_REPLICATION, "JobRequirements": _RESTRICTIVE_SCHEDULING},
        "DP": {"ReplicationRequirements": "false", "JobRequirements": "true"},
        "DR": {"ReplicationRequirements": "false", "JobRequirements": _RESTRICTIVE_SCHEDULING},
    },
    "naive": {
        # the unmodified BOINC server: no replication but at the deadline, no tail policy
        "naive": {"ReplicationRequirements": "false", "JobRequirements": "true"},
        "gridbot": {},
    },
    "condor": {
        # plain Condor in the same pool: every job is matched by the negotiator and waits in the pool's queue (a
        # start delay), and the schedd learns of a preemption at once; no replication
        "condor": {"ReplicationRequirements": "false", "Deadline": None, "detection": "heartbeat",
                   "start": (60.0, 600.0)},
        "gridbot": {},
    },
    "priorities": {"gridbot": {}},
    "small-bags": {"gridbot": {}},
    "community": {"gridbot": {}},
}
# The paper's order of the variants in its tables.
EXPERIMENTS: Final = tuple(VARIANTS)
ALL_VARIANTS: Final = tuple(dict.fromkeys(v for variants in VARIANTS.values() for v in variants))

# The readings a finding may move with (docs/readings.md, "GridBot"): "default" is mgst's choice for every question;
# each other changes one of them.
READINGS: Final = ("default", "waiting-first", "either", "immediate", "short-timeout")
READING_DOC: Final = {
    "default": "an unreliable host: error rate above 1 % and no recent result (both); at equal Rank a bag's pending "
               "replicas before its waiting tasks; a lost job found when its host returns or at the experiment "
               "file's time-out",
    "waiting-first": "a bag's waiting tasks before its pending replicas at equal Rank",
    "either": "an unreliable host: error rate above 1 % or no recent result (either)",
    "immediate": "the server learns of a lost job at once (no time-out)",
    "short-timeout": "a job of a silent host is given up on after 3 times its expected time (the file: 6)",
}
SHORT_TIMEOUT: Final = 3.0
_UNRELIABLE_BOTH = ("Job.RunningOn[0].ErrorRate > 0.01 && Job.RunningOn[0].RecentSuccesses == 0",
                    "Host.ErrorRate <= 0.01 || Host.RecentSuccesses > 0")
_UNRELIABLE_EITHER = ("Job.RunningOn[0].ErrorRate > 0.01 || Job.RunningOn[0].RecentSuccesses == 0",
                      "Host.ErrorRate <= 0.01 && Host.RecentSuccesses > 0")
# Policy options and bag attributes that count jobs, scaled with the bags (``scaled``).
_COUNTS: Final = ("tail_threshold", "replicate_below")
STATIC_TAIL: Final = "StaticTail"  # a bag attribute: R4's static tail threshold, in jobs


def experiment_file(name: str) -> Path:
    return EXPERIMENTS_FOLDER / f"{name}.toml"


def fill(text: Any, reading: str) -> Any:
    """An expression with the reading's unreliable and reliable host filled in (other values unchanged)."""
    if not isinstance(text, str):
        return text
    copy, host = _UNRELIABLE_EITHER if reading == "either" else _UNRELIABLE_BOTH
    return text.replace("{unreliable_copy}", f"({copy})").replace("{reliable_host}", host)


def variant(exp: Experiment, experiment: str, name: str, reading: str = "default") -> Experiment:
    """``exp`` (the experiment's file) with variant ``name``'s policy and the reading's choices applied."""
    variants = VARIANTS[experiment]
    if name not in variants:
        raise ValueError(f"variant {name!r} is not one of experiment {experiment!r}'s: {', '.join(variants)}")
    if reading not in READINGS:
        raise ValueError(f"unknown reading {reading!r}; the readings: {', '.join(READINGS)}")
    options = dict(exp.policy.options)
    testbed = exp.testbed
    staging = exp.staging
    for key, value in variants[name].items():
        if key == "detection":
            testbed = dataclasses.replace(testbed, detection=value)
        elif key == "start":
            staging = StagingModel(start=value)
        elif value is None:
            options.pop(key, None)
        else:
            options[key] = value
    options = {k: fill(v, reading) for k, v in options.items()}
    if reading == "immediate":
        testbed = dataclasses.replace(testbed, detection="heartbeat")
    if reading == "waiting-first":
        options["replicas_first"] = False
    if reading == "short-timeout":
        testbed = dataclasses.replace(testbed, timeout_factor=SHORT_TIMEOUT)
    workload = exp.workload
    if isinstance(workload, BagList) and workload.attributes:
        workload = BagList(workload.bags, tuple(tuple((k, fill(v, reading)) for k, v in attrs)
                                                for attrs in workload.attributes))
    return dataclasses.replace(exp, policy=PolicySpec(exp.policy.name, options), testbed=testbed, staging=staging,
                               workload=workload)


def scaled(exp: Experiment, scale: float) -> Experiment:
    """A share ``scale`` of every bag's tasks (its first ones) and of every grid's hosts (the first of each group),
    and of the policy's thresholds that count jobs and the bags' static tail (at least 1 each)."""
    if scale == 1.0:
        return exp
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be in (0, 1], got {scale:g}")
    workload = exp.workload
    if isinstance(workload, BagList):
        bags = tuple((at, tasks[:max(1, round(len(tasks) * scale))]) for at, tasks in workload.bags)
        attributes = tuple(tuple((k, max(1, round(v * scale)) if k == STATIC_TAIL else v) for k, v in attrs)
                           for attrs in workload.attributes)
        workload = BagList(bags, attributes)
    by_group: dict[Any, list[int]] = {}
    for j, m in enumerate(exp.machines):
        by_group.setdefault(m.attribute("group"), []).append(j)
    keep = sorted(j for members in by_group.values() for j in members[:max(1, round(len(members) * scale))])
    options = {k: (max(1, round(v * scale)) if k in _COUNTS and isinstance(v, int | float) else v)
               for k, v in exp.policy.options.items()}
    return dataclasses.replace(exp, workload=workload, machines=tuple(exp.machines[j] for j in keep),
                               policy=PolicySpec(exp.policy.name, options))


# The sweeps' ``overlay`` option: the grids the experiment's file keeps fixed grow with GridBot's overlay instead, each
# starting with OVERLAY_START of its hosts and asking for one more at a pace that would fill it in OVERLAY_FILL of
# steady demand (experiments/gridbot/overlay.toml's pace: OSG's 190 hosts at one per 15 s, 47.5 minutes; UW
# Madison's 100 at one per 30 s, 50 minutes), so that the ramp keeps its share of a bag's turnaround at any scale.
# The community grid's clients stay static (they contact the server at will). docs/readings.md, "The overlay".
OVERLAY_START: Final = 0.05
OVERLAY_FILL: Final = 3000.0


def with_overlay(exp: Experiment) -> Experiment:
    """``exp`` with each fixed grid but the community grid's sized by the overlay (OVERLAY_START, OVERLAY_FILL); an
    experiment without grids, unchanged."""
    spec = exp.failures
    if not isinstance(spec, GridsAvailability):
        return exp
    hosts = [0] * len(spec.grids)
    for j in range(len(exp.machines)):
        hosts[group_of(exp, j, len(spec.grids))] += 1
    grids = []
    for g, n in zip(spec.grids, hosts):
        if g.size is None and g.preset != "community" and n > 0:
            start = max(1, round(OVERLAY_START * n))
            g = dataclasses.replace(g, size=GridSize(start, None, OVERLAY_FILL / max(1, n - start), DEFAULT_IDLE_LEAVE))
        grids.append(g)
    return dataclasses.replace(exp, failures=dataclasses.replace(spec, grids=tuple(grids)))


def build(experiment: str, name: str, reading: str, scale: float, seed: int, replications: int,
          load: Any = None, overlay: bool = False) -> Experiment:
    """The Experiment of one cell: the file, the variant and reading, the scale, the seed; with ``overlay``, its fixed
    grids sized by the overlay (:func:`with_overlay`, after the scale)."""
    from mgst.config import load_experiment  # noqa: PLC0415

    exp = (load or load_experiment)(experiment_file(experiment))
    exp = scaled(variant(exp, experiment, name, reading), scale)
    if overlay:
        exp = with_overlay(exp)
    return dataclasses.replace(exp, simulation=dataclasses.replace(exp.simulation, seed=seed,
                                                                   replications=replications))


def describe(options: Mapping[str, Any]) -> str:
    """A policy's expressions, for a line of text."""
    return "; ".join(f"{k} = {v}" for k, v in options.items() if isinstance(v, str))


__all__ = ["ALL_VARIANTS", "EXPERIMENTS", "OVERLAY_FILL", "OVERLAY_START", "READINGS", "READING_DOC", "STATIC_TAIL",
           "VARIANTS", "build", "fill", "scaled", "variant", "with_overlay"]
