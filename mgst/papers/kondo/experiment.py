"""One Kondo run as an Experiment: a platform's hosts replaying its trace, one application of T tasks, one policy.

A platform directory holds ``hosts.csv`` (``host,clock_ghz``) and ``availability.csv`` (the CSV trace
format of docs/models.md, trace seconds from a Monday 00:00), as ``mgst traces generate`` writes them.
Model time 0 is trace time ``start - history``: the hosts live ``history`` seconds of their trace
before the application arrives (the core's per-host history, which PRI-HISTORY and EXCL-PRED read),
then one bag of ``tasks`` tasks of ``task_minutes`` on a dedicated 1.5 GHz host arrives at model time
``history``. The run ends when the bag's last task completes.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.availability.trace import TraceAvailability
from mgst.availability.trace_files import TraceError, guess_format, read_trace
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.papers.kondo.optimum import Optimum, host_traces
from mgst.traces.platform import TRACE_NAMES, trace_clocks

# The clock rate of the slides' reference host: a task "of 5 minutes" is 300 s of work on it, and a host of
# c GHz has power c / REFERENCE_GHZ (work units per second).
REFERENCE_GHZ = 1.5
# How long the hosts replay their trace before the application arrives, by default: one day holds a
# whole daily cycle of the host's availability for PRI-HISTORY and EXCL-PRED to read, for about a
# tenth of a run's events (docs/reproduction-kondo.md, "Speed").
DEFAULT_HISTORY = 86_400.0
# Bags arrive during [0, horizon): the horizon is this long after the application's arrival. The run ends
# when the application completes; nothing is left to do then. The drain (as long as the horizon) only
# bounds a run whose application never completes.
RUN_LIMIT = 7 * 86_400.0

# The slides' policy names -> (registered policy, its options).
POLICIES: dict[str, tuple[str, dict[str, Any]]] = {
    "FCFS": ("fcfs", {}),
    "PRI-CR": ("pri_cr", {}),
    "PRI-CR-WAIT": ("pri_cr_wait", {}),
    "PRI-HISTORY": ("pri_history", {}),
    "EXCL-S1.5": ("excl_s", {"sd": 1.5}),
    "EXCL-S1": ("excl_s", {"sd": 1.0}),
    "EXCL-S.5": ("excl_s", {"sd": 0.5}),
    "EXCL-S.25": ("excl_s", {"sd": 0.25}),
    "EXCL-PRED": ("excl_pred", {}),
    "EXCL-PRED-DUP": ("excl_pred_dup", {}),
    "EXCL-PRED-TO": ("excl_pred_to", {}),
}
# The other reading of each policy the slides leave open (docs/readings.md), by name, so that a sweep can set
# both side by side (`--only policy=EXCL-S.5,EXCL-S.5-READY`): EXCL-S serving the hosts it keeps in ready-queue
# order rather than fastest first; PRI-HISTORY counting a host's work per interval up to one task's.
OTHER_READINGS: dict[str, tuple[str, dict[str, Any]]] = {
    **{f"{name}-READY": (policy, {**options, "kept_order": "ready"})
       for name, (policy, options) in POLICIES.items() if policy == "excl_s"},
    "PRI-HISTORY-CAPPED": ("pri_history", {"score": "capped_at_task"}),
}
HOSTS_FILE = "hosts.csv"


def task_size(task_minutes: float) -> float:
    """A task's work: its minutes on a dedicated REFERENCE_GHZ host, in seconds."""
    return task_minutes * 60.0


def policy_spec(policy: str) -> PolicySpec:
    """The slides' policy name, another reading's (OTHER_READINGS) or a registered one (without options)."""
    name, options = POLICIES.get(policy) or OTHER_READINGS.get(policy, (policy, {}))
    return PolicySpec(name, options)


@dataclass(frozen=True)
class PlatformFiles:
    """A platform directory read once per process: its hosts, clock rates and trace."""

    directory: Path
    clock_ghz: dict[str, float]  # host -> GHz, in file order
    trace: Path
    optimum: Optimum
    span: float  # the trace's end (trace seconds): its latest interval's

    @property
    def machines(self) -> tuple[Machine, ...]:
        return tuple(Machine(name=h, rates=(c / REFERENCE_GHZ,), availability=1.0,
                             attributes=(("power", c / REFERENCE_GHZ), ("clock_ghz", c)))
                     for h, c in self.clock_ghz.items())


@functools.lru_cache(maxsize=8)
def _platform(directory: str, name: str, stamp: tuple[float, float]) -> PlatformFiles:
    d = Path(directory)
    trace = d / name
    intervals = read_trace(str(trace), guess_format(name))
    clock = trace_clocks(trace, intervals, d / HOSTS_FILE)  # (as mgst traces refuses a host without one)
    missing = [h for h in clock if h not in intervals]
    if missing:
        raise TraceError(str(trace), None, f"has no interval of host {missing[0]!r} (listed in {HOSTS_FILE})")
    optimum = Optimum(host_traces(intervals, {h: c / REFERENCE_GHZ for h, c in clock.items()}))
    span = max((iv.end for ivs in intervals.values() for iv in ivs), default=0.0)
    return PlatformFiles(d, clock, trace, optimum, span)


def read_platform_files(platform_dir: str | os.PathLike) -> PlatformFiles:
    """The platform in ``platform_dir``, cached per process (and per change of its files)."""
    d = Path(platform_dir).resolve()
    name = next((n for n in TRACE_NAMES if (d / n).exists()), TRACE_NAMES[0])  # (as mgst traces summary reads it)
    try:
        stamp = ((d / HOSTS_FILE).stat().st_mtime, (d / name).stat().st_mtime)
    except OSError as e:
        raise TraceError(str(d), None, f"is not a platform directory ({e.strerror}: {e.filename}; a platform "
                                       f"holds {HOSTS_FILE} and one of {', '.join(TRACE_NAMES)})") from None
    return _platform(str(d), name, stamp)


def kondo_experiment(platform_dir: str | os.PathLike, policy: str, tasks: int, task_minutes: float, start: float,
                     *, history: float = DEFAULT_HISTORY, seed: int = 1) -> Experiment:
    """One run: ``tasks`` tasks of ``task_minutes`` submitted at trace time ``start`` (module docstring)."""
    if tasks < 1:
        raise ValueError(f"tasks must be >= 1, got {tasks!r}")
    if not task_minutes > 0:
        raise ValueError(f"task_minutes must be > 0, got {task_minutes!r}")
    if not 0 <= history <= start:
        raise ValueError(f"history must be in [0, start = {start:g}], got {history!r}")
    platform = read_platform_files(platform_dir)
    size = task_size(task_minutes)
    return Experiment(
        name=f"kondo-{platform.directory.name}-{policy}-{tasks}x{task_minutes:g}min-at{start:.0f}",
        classes=(JobClass("task", 0.0, size),),
        machines=platform.machines,
        policy=policy_spec(policy),
        failures=TraceAvailability(file=str(platform.trace), format=guess_format(str(platform.trace)),
                                   offset=start - history, machines="name"),
        workload=BagList(((history, ((0, size),) * tasks),)),
        simulation=SimulationSettings(horizon=history + RUN_LIMIT, warmup=0.0, replications=1, seed=seed),
        description=(f"Kondo et al.: {tasks} tasks of {task_minutes:g} min on {platform.directory.name} "
                     f"({len(platform.clock_ghz)} hosts) at trace time {start:g} s, {history:g} s of history, "
                     f"policy {policy}"),
    )


def optimal_makespan_of(experiment: Experiment) -> float:
    """The optimal makespan of a kondo_experiment's application (cached with its platform)."""
    return optimal_schedule(experiment)[-1]


def optimal_schedule(experiment: Experiment) -> tuple[float, ...]:
    """The optimal schedule's task completions after the submission, sorted (for the cumulative curves)."""
    spec = experiment.failures
    if not isinstance(spec, TraceAvailability):
        raise ValueError(f"{experiment.name}: not a Kondo experiment (no trace)")
    (submitted, tasks), = experiment.workload.bags  # type: ignore[union-attr]
    size = tasks[0][1]
    return _schedule(str(Path(spec.file).parent), spec.offset, submitted, size, len(tasks))


@functools.lru_cache(maxsize=256)
def _schedule(directory: str, offset: float, submitted: float, size: float, tasks: int) -> tuple[float, ...]:
    optimum = read_platform_files(directory).optimum
    t0 = offset + submitted
    return tuple(float(t) - t0 for t in optimum.completions(t0, size, tasks))


def experiment_toml(platform_dir: str | os.PathLike, policy: str, tasks: int, task_minutes: float, start: float,
                    *, history: float = DEFAULT_HISTORY, seed: int = 1) -> str:
    """The same run as an experiment file's text (for ``mgst simulate`` and ``mgst run``); paths absolute."""
    exp = kondo_experiment(platform_dir, policy, tasks, task_minutes, start, history=history, seed=seed)
    spec: TraceAvailability = exp.failures  # type: ignore[assignment]
    size = task_size(task_minutes)
    q = json.dumps  # a TOML basic string or number is JSON's spelling of it
    lines = [
        f"# {exp.description} (mgst.papers.kondo.experiment)",
        "[experiment]", f"name = {q(exp.name)}", f"description = {q(exp.description)}", "",
        "[workload]", 'kind = "bag_list"', 'class_names = ["task"]', f"granularity = [{size!r}]",
        f"bags = [{{at = {history!r}, tasks = [{', '.join([f'[0, {size!r}]'] * tasks)}]}}]", "",
        "[machines]", f"names = [{', '.join(q(m.name) for m in exp.machines)}]",
        f"power = [{', '.join(repr(m.rates[0]) for m in exp.machines)}]",
        f"attributes = {{clock_ghz = [{', '.join(repr(m.attribute('clock_ghz')) for m in exp.machines)}]}}", "",
        "[availability]", 'kind = "trace"', f"file = {q(spec.file)}", 'format = "csv"', f"offset = {spec.offset!r}",
        'machines = "name"', "",
        "[policy]", f"name = {q(exp.policy.name)}",
        *(f"{k} = {v!r}" for k, v in exp.policy.options.items()), "",
        "[simulation]", f"horizon = {exp.simulation.horizon!r}", "warmup = 0.0", "replications = 1", f"seed = {seed}",
    ]
    return "\n".join(lines) + "\n"


def write_experiment_toml(path: str | os.PathLike, *args: Any, **kwargs: Any) -> Path:
    """Write :func:`experiment_toml` to ``path``; the path written."""
    p = Path(path)
    p.write_text(experiment_toml(*args, **kwargs), encoding="utf-8")
    return p


__all__ = ["DEFAULT_HISTORY", "OTHER_READINGS", "POLICIES", "REFERENCE_GHZ", "kondo_experiment", "experiment_toml",
           "optimal_makespan_of", "optimal_schedule", "read_platform_files", "task_size", "write_experiment_toml"]
