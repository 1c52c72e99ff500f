"""Experiment files (TOML) -> Experiment; every error names the key."""

from __future__ import annotations

import datetime
import difflib
import math
import os
import re
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from mgst import policies
from mgst.availability import registry as availability
from mgst.config.machine_sections import MachineSections
from mgst.config.model_sections import (
    AVAILABILITY_KINDS,
    MACHINE_KEYS,
    STAGING_KEYS,
    WORKLOAD_KINDS,
    ModelSections,
)
from mgst.config.names import MAX_NAME, name_problem
from mgst.model import (
    DETECTIONS,
    EXECUTORS,
    BagList,
    BagStream,
    Experiment,
    PolicySpec,
    SimulationSettings,
    SwfTrace,
    TestbedSettings,
)
from mgst.toml_file import TomlFileError, read_toml
from mgst.workload.bags import mean_task_size
from mgst.workload.swf import SwfError, read_swf

__all__ = [
    "MAX_DURATION",
    "MAX_JOBS",
    "MAX_NAME",
    "MAX_REPLICATIONS",
    "MAX_WORKERS",
    "MAX_RATE",
    "MAX_TIME",
    "MAX_TIME_UNIT",
    "MIN_RATE",
    "MIN_TIME_UNIT",
    "ConfigError",
    "load_experiment",
    "parse_experiment",
]

# Bounds on an experiment's numbers: beyond them a value is a typo, and would give a
# solver traceback or a run that never ends instead of an error naming the key.

# Rates (arrival rates and machine rates, jobs per model time unit) are the allocation
# LP's coefficients: HiGHS rejects coefficients outside [1e-9, 1e15) and works to an
# absolute tolerance of 1e-7. With rates in [1e-4, 1e4] every LP solves, and its answer
# serves every class unless the load is beyond 1000 x the capacity (tests/test_allocation.py
# tries the corners); choose the time unit to bring rates into this range.
MIN_RATE = 1e-4
MAX_RATE = 1e4
# Jobs in one replication (simulation.horizon x the total arrival rate) or one testbed
# run (testbed.duration / testbed.time_unit x the total arrival rate). The simulator
# runs some 60,000 jobs a second and keeps a record of ~0.6 kB per job, so 1e7 jobs are
# already ~3 minutes and ~6 GB per replication; a horizon of 1e300 would run forever.
# Failure cycles (up + down periods, over all machines) and checkpoints cost about as
# much as a job each and share the bound.
MAX_JOBS = 1e7
# Other model times (failure means, checkpoint interval), in model time units.
MAX_TIME = 1e9
# Testbed, in wall-clock seconds: a message round trip takes ~0.1 ms, so a shorter
# time unit would measure messaging more than scheduling; a day per time unit and a
# month of job generation are already far beyond any planned run.
MIN_TIME_UNIT = 1e-3
MAX_TIME_UNIT = 86400.0
MAX_DURATION = 30 * 86400.0
# Replications of one simulation, or of one sweep cell: each is a whole run, and 100,000 of the smallest already
# take hours; a mistyped count (1e20 ran for ever, or overflowed a C integer) is refused when it is read.
MAX_REPLICATIONS = 100_000
# Local worker processes (--workers): far beyond any machine's cores; a larger count overflowed a C integer.
MAX_WORKERS = 1024
# A run's seed is kept in its journal (SQLite's integers) and sent to its pullers (msgpack's): both are 64-bit signed,
# so a larger seed is refused when it is read, not by a traceback once the run has begun.
MAX_SEED = 2**63 - 1
SEED_RULE = "must be an integer from 0 to 2**63 - 1"


class ConfigError(ValueError):
    """A problem with an experiment file, naming the offending key.

    ``key`` is dotted (``machines.rates[2][3]``, ``simulation.horizon``), or
    ``"(file)"`` when the file itself cannot be read or parsed.
    """

    def __init__(self, key: str, problem: str, path: str | None = None):
        self.key = key
        self.problem = problem
        self.path = path
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{key}: {problem}")


# Known keys of each section. [policy] takes any key besides "name" (the
# policy's options), so it is not listed here.
_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "experiment": ("name", "description"),
    "workload": tuple(dict.fromkeys(k for keys in WORKLOAD_KINDS.values() for k in keys)),  # per kind: config_models
    "machines": MACHINE_KEYS,
    "failures": ("mean_up", "mean_down"),
    "availability": tuple(dict.fromkeys(k for keys in AVAILABILITY_KINDS.values() for k in keys)),
    "staging": STAGING_KEYS,
    "simulation": ("horizon", "warmup", "replications", "seed", "checkpoint_interval"),
    "testbed": ("time_unit", "duration", "timeout_factor", "executor", "commands", "detection"),
}
_SECTIONS = (
    "experiment",
    "workload",
    "machines",
    "failures",
    "availability",
    "staging",
    "policy",
    "simulation",
    "testbed",
)


def load_experiment(path: str | os.PathLike, policy: str | None = None,
                    lengths_not_used: Collection[str] = ()) -> Experiment:
    """Read and validate the experiment file at ``path``; with ``policy``, that policy in place of the file's
    ``[policy]`` (the file's options if it names the same one, else the policy's defaults), checked against the
    file as the file's own would be (``mgst simulate --policy``). ``lengths_not_used``: the run lengths
    ("simulation", "testbed") the command does not take from the file (its command line gives them, and it checks
    them itself: mgst.config.checks; or it does not run that kind at all), whose limits the file's values are then not
    held to (a long horizon in the file does not refuse a short --horizon, nor a testbed run)."""
    p = Path(path)
    where = str(p)
    try:
        data = read_toml(p)
    except TomlFileError as err:
        raise ConfigError("(file)", str(err), where) from None
    if policy is not None:
        known = policies.names()
        if policy not in known:
            raise ConfigError("--policy", f"unknown policy {policy!r}{_suggest(policy, known) or _OWN_POLICY}; "
                                          f"known: {', '.join(known)}")
        table = data.get("policy")
        same = isinstance(table, dict) and table.get("name") == policy
        data = {**data, "policy": dict(table) if same else {"name": policy}}  # type: ignore[arg-type]
    return parse_experiment(data, p.stem, where, lengths_not_used)


# An unknown policy's name that is close to none known: perhaps one of the user's own, not imported.
_OWN_POLICY = (" (a policy of your own: --import the module that registers it, its class decorated with @register "
               "and its name that one)")


def parse_experiment(
    data: Mapping[str, Any], name: str, path: str | None = None, lengths_not_used: Collection[str] = ()
) -> Experiment:
    """Validate parsed TOML ``data``; ``name`` is used when [experiment] has none (``lengths_not_used``: as in
    load_experiment)."""
    unknown = set(lengths_not_used) - {"simulation", "testbed"}
    if unknown:
        raise ValueError(f"not a run length: {sorted(unknown)}")
    return _Parser(path, frozenset(lengths_not_used)).experiment(data, name)


def _check_range(
    value: Any, key: str, low: float, high: float, unit: str, path: str | None
) -> float:
    """``value`` as a float if a finite number in (low, high] (low == 0) or [low, high]."""
    if not _is_number(value) or not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a positive number, got {describe_value(value)}", path)
    if not low <= value <= high:
        # (in full where :g would print the value as its bound: 2592001 s against 2592000, '2.592e+06' each)
        show = _plain if f"{value:g}" in (f"{low:g}", f"{high:g}") else (lambda x: f"{x:g}")
        where = f"at most {show(high)}" if low == 0 else f"between {show(low)} and {show(high)}"
        raise ConfigError(key, f"must be {where} {unit}, got {show(value)}", path)
    return float(value)


def _plain(x: float) -> str:
    """A number in full: an integer with its thousands, else all its digits."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


def _check_length(
    exp: Experiment,
    length: float,
    what: str,
    key: str,
    failures_key: str,
    checkpoint_key: str | None,
    path: str | None = None,
    note: str = "",
) -> None:
    """Raise ConfigError unless ``length`` model time units of ``exp`` stay within MAX_JOBS
    jobs, failure cycles and (``checkpoint_key`` not None) checkpoints."""
    jobs, how, unit = _expected_jobs(exp, length)
    if not jobs <= MAX_JOBS:
        raise ConfigError(
            key,
            f"{length:g} time units{note} {how} imply {jobs:.3g} {unit} {what}; "
            f"at most {MAX_JOBS:g} are allowed (MAX_JOBS): use a shorter run",
            path,
        )
    n = len(exp.machines)
    if exp.failures is not None:
        cycles, how = availability.cycles(exp, length)
        if not cycles <= MAX_JOBS:
            raise ConfigError(
                failures_key,
                f"{how} over {length:g} time units{note} on {n} "
                f"machines imply {cycles:.3g} failure cycles {what}; at most {MAX_JOBS:g} are allowed "
                "(MAX_JOBS)",
                path,
            )
    _check_policy_periods(exp, length, what, path, note)
    ck = exp.simulation.checkpoint_interval
    if checkpoint_key is not None and ck is not None:
        checkpoints = n * length / ck
        if not checkpoints <= MAX_JOBS:
            raise ConfigError(
                checkpoint_key,
                f"a checkpoint every {ck:g} time units over {length:g} time units{note} on {n} machines "
                f"implies up to {checkpoints:.3g} checkpoints {what}; at most {MAX_JOBS:g} are allowed "
                "(MAX_JOBS)",
                path,
            )


def _check_policy_periods(exp: Experiment, length: float, what: str, path: str | None, note: str) -> None:
    """Raise ConfigError at ``policy.NAME`` if one of the policy's periodic options (its Options' ``period_options``:
    LPAS_DG's periodic re-solve, GridBot's replication cycle) makes more than MAX_JOBS timer events in ``length``
    model time units: each is a pass of the policy, and a period of 1e-300 would never let the run end."""
    try:
        kind: Any = policies.policy_class(exp.policy.name).Options
    except (KeyError, ValueError):  # (an unknown policy is the policy check's to report)
        return
    for name in getattr(kind, "period_options", ()):
        period = exp.policy.options.get(name, getattr(kind, name, None))
        if isinstance(period, int | float) and not isinstance(period, bool) and period > 0.0:
            events = length / period
            if not events <= MAX_JOBS:
                raise ConfigError(
                    f"policy.{name}",
                    f"a period of {period:g} time units over {length:g} time units{note} implies {events:.3g} of the "
                    f"policy's timer events {what}; at most {MAX_JOBS:g} are allowed (MAX_JOBS)",
                    path,
                )


def _expected_jobs(exp: Experiment, length: float) -> tuple[float, str, str]:
    """Jobs (tasks) that ``length`` model time units of ``exp``'s workload bring, and how that was found."""
    spec = exp.workload
    if isinstance(spec, BagStream):
        per_bag = spec.application_size / mean_task_size(spec.mix, [c.granularity for c in exp.classes]) + 1
        bags = length * spec.bag_rate
        cap = ""
        if spec.max_bags is not None and spec.max_bags < bags:
            bags, cap = float(spec.max_bags), f" (at most max_bags = {spec.max_bags})"
        return bags * per_bag, (
            f"x bag rate {spec.bag_rate:g}{cap} x {per_bag:.4g} tasks per bag "
            "(application_size / mean task size, + 1)"
        ), "tasks"
    if isinstance(spec, BagList):
        tasks = sum(len(tasks) for at, tasks in spec.bags if at < length)
        return float(tasks), "of the bag list", "tasks"
    if isinstance(spec, SwfTrace):
        try:
            jobs = read_swf(spec.path)
        except SwfError as err:
            raise ConfigError("workload.file", str(err)) from None
        arrivals = jobs.times(spec.time_scale)
        return float(int((arrivals < length).sum())), f"of the trace {spec.path}", "jobs"
    total = sum(exp.arrival_rates)
    return length * total, f"x total arrival rate {total:g}", "jobs"


# --------------------------------------------------------------------------- parsing


def _suggest(word: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def describe_value(value: Any) -> str:
    """A value as an error message shows it, in the file's own words: ``true (a boolean)``, ``'x' (a string)``, ``a
    table``, ``a list``, a date as ISO 8601, a number as it is."""
    if isinstance(value, Mapping):
        return "a table"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f"{value!r} (a string)"
    if isinstance(value, datetime.datetime):  # (TOML's dates and times)
        return f"{value.isoformat()} (a date and time)"
    if isinstance(value, datetime.date):
        return f"{value.isoformat()} (a date)"
    if isinstance(value, datetime.time):
        return f"{value.isoformat()} (a time)"
    return repr(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Parser(ModelSections, MachineSections):
    # Bounds and helpers the model sections (config_models, config_machines) use through self.
    max_rate = MAX_RATE
    max_time = MAX_TIME
    max_jobs = MAX_JOBS
    describe = staticmethod(describe_value)
    suggest = staticmethod(_suggest)
    is_number = staticmethod(_is_number)

    def __init__(self, path: str | None, lengths_not_used: frozenset[str] = frozenset()):
        self.path = path
        self.lengths_not_used = lengths_not_used  # (load_experiment's)
        self.defaults: dict[str, bool] = {}  # key -> whether the file left it at its default
        self.failures_key = "failures.mean_up"  # what a too-frequent failure process is blamed on

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(key, problem, self.path)

    # ---------------------------------------------------------------- primitives

    def table(
        self, data: Mapping[str, Any], section: str, required: bool
    ) -> Mapping[str, Any] | None:
        if section not in data:
            if required:
                raise self.error(section, f"missing required section [{section}]")
            return None
        value = data[section]
        if not isinstance(value, Mapping):
            raise self.error(
                section, f"must be a table ([{section}]), got {describe_value(value)}"
            )
        return value

    def check_keys(self, table: Mapping[str, Any], section: str) -> None:
        known = _SECTION_KEYS[section]
        for key in table:
            if key not in known:
                raise self.error(
                    f"{section}.{key}", f"unknown key{_suggest(key, known)}"
                )

    def require(self, table: Mapping[str, Any], section: str, key: str) -> Any:
        if key not in table:
            raise self.error(f"{section}.{key}", f"missing (required in [{section}])")
        return table[key]

    def number(self, value: Any, key: str) -> float:
        if not _is_number(value) or not math.isfinite(value):
            raise self.error(key, f"must be a number, got {describe_value(value)}")
        return float(value)

    def positive(self, value: Any, key: str) -> float:
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise self.error(key, f"must be a positive number, got {describe_value(value)}")
        return float(value)

    def rate(self, value: Any, key: str, unit: str = "jobs per time unit") -> float:
        """A rate (jobs, or work, per model time unit), within [MIN_RATE, MAX_RATE]."""
        return _check_range(value, key, MIN_RATE, MAX_RATE, unit, self.path)

    def bounded(self, value: Any, key: str, low: float, high: float, unit: str) -> float:
        return _check_range(value, key, low, high, unit, self.path)

    def integer(self, value: Any, key: str, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.error(key, f"must be an integer, got {describe_value(value)}")
        if value < minimum:
            raise self.error(key, f"must be an integer >= {minimum}, got {value}")
        return value

    def seed(self, value: Any, key: str) -> int:
        """A run's seed (MAX_SEED)."""
        seed = self.integer(value, key, 0)
        if seed > MAX_SEED:
            raise self.error(key, f"{SEED_RULE}, got {seed}")
        return seed

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {describe_value(value)}")
        return value

    def file_name(self, value: Any, key: str) -> str:
        """A file's name from the experiment file (a path, relative to it): a string, not empty (an empty one named the
        experiment's own folder, said as "is a folder")."""
        text = self.string(value, key)
        if not text.strip():
            raise self.error(key, "must name a file (a path, relative to the experiment file), got an empty string")
        return text

    def name(self, value: Any, key: str) -> str:
        """A string that passes the names' rule (mgst.config.names)."""
        text = self.string(value, key)
        problem = name_problem(text)
        if problem is not None:
            raise self.error(key, problem)
        return text

    def nonempty_list(self, value: Any, key: str, what: str) -> list[Any]:
        if not isinstance(value, list):
            raise self.error(key, f"must be a list of {what}, got {describe_value(value)}")
        if not value:
            raise self.error(key, f"must be a non-empty list of {what}")
        return value

    def names(
        self, value: Any, key: str, count: int, count_text: str
    ) -> tuple[str, ...]:
        items = self.nonempty_list(value, key, "strings")
        if len(items) != count:
            raise self.error(key, f"has {len(items)} entries but {count_text}")
        seen: dict[str, int] = {}
        for k, item in enumerate(items):
            text = self.name(item, f"{key}[{k}]")
            folded = text.casefold()  # (a machine's key files are named after it: M1 and m1 are one on some disks)
            if folded in seen:
                i = seen[folded]
                if items[i] == text:
                    raise self.error(key, f"duplicate name {text!r} (entries {i} and {k})")
                why = ": a machine's key files are named after it, and some disks ignore case" \
                    if key.startswith("machines") else ""
                raise self.error(key, f"names that differ only in case, {items[i]!r} and {text!r} (entries {i} and "
                                      f"{k}){why}")
            seen[folded] = k
        return tuple(items)

    # ---------------------------------------------------------------- sections

    def experiment(self, data: Mapping[str, Any], default_name: str) -> Experiment:
        if not isinstance(data, Mapping):
            raise self.error(
                "(file)", f"must be a table of sections, got {describe_value(data)}"
            )
        for key in data:
            if key not in _SECTIONS:
                raise self.error(key, f"unknown key{self.top_level_hint(key)}")

        name, description = self.header(data, default_name)
        workload = self.workload(data)
        failures, self.failures_key = self.availability(data)
        machines = self.machines(data, workload, failures)
        exp = Experiment(
            name=name,
            classes=workload.classes,
            machines=machines,
            policy=self.policy(data),
            failures=failures,
            workload=workload.spec,
            staging=self.staging(data),
            simulation=self.simulation(data),
            testbed=self.testbed(data, len(workload.classes)),
            description=description,
        )
        try:
            availability.check(exp)
        except ValueError as e:
            raise self.error(getattr(e, "key", self.failures_key), str(e)) from None  # (a grid's size: its key)
        self.check_policy_names(exp)
        self.check_lengths(exp)
        return exp

    def check_policy_names(self, exp: Experiment) -> None:
        """The policy's options that name a class or a machine name one of the experiment's."""
        options = dict(exp.policy.options)
        try:
            policies.check_names(exp.policy.name, options, tuple(c.name for c in exp.classes),
                                 tuple(m.name for m in exp.machines))
        except ValueError as err:
            raise self.error(*_option_error(str(err), options)) from None
        try:
            policies.check_experiment(exp)
        except policies.ExperimentKeyError as err:  # the problem is at a key of its own (a bag's expression)
            raise self.error(err.key, err.problem) from None
        except ValueError as err:
            raise self.error("policy.name", str(err)) from None

    def check_lengths(self, exp: Experiment) -> None:
        """The simulation and the testbed run stay within MAX_JOBS jobs (failure cycles, checkpoints)."""
        default = " (the default)"
        if "simulation" not in self.lengths_not_used:
            _check_length(
                exp, exp.simulation.horizon, "per replication", "simulation.horizon", self.failures_key,
                "simulation.checkpoint_interval", self.path,
                note=default if self.defaults.get("simulation.horizon") else "",
            )
        if "testbed" in self.lengths_not_used:
            return
        tb = exp.testbed
        defaults = ", the defaults" if self.defaults.get("testbed.duration") else ""
        note = f" ({tb.duration:g} s / {tb.time_unit:g} s each{defaults})"
        _check_length(
            exp, tb.duration / tb.time_unit, "in the testbed run", "testbed.duration", self.failures_key, None,
            self.path, note=note,
        )

    def top_level_hint(self, key: str) -> str:
        if key == "scenario":
            return " (a sweep file's: run it with 'mgst sweep FILE')"
        for section, keys in _SECTION_KEYS.items():
            if key in keys:
                return f" (did you mean '{section}.{key}', inside [{section}]?)"
        return _suggest(key, _SECTIONS)

    def header(self, data: Mapping[str, Any], default_name: str) -> tuple[str, str]:
        table = self.table(data, "experiment", required=False) or {}
        self.check_keys(table, "experiment")
        name = default_name
        if "name" in table:
            name = self.string(table["name"], "experiment.name")
            problem = name_problem(name, folder=True)
            if problem is not None:
                raise self.error("experiment.name", problem)
        description = ""
        if "description" in table:
            description = self.string(table["description"], "experiment.description")
        return name, description

    def policy(self, data: Mapping[str, Any]) -> PolicySpec:
        table = self.table(data, "policy", required=True)
        assert table is not None
        name = self.string(self.require(table, "policy", "name"), "policy.name")
        known = policies.names()
        if name not in known:
            hint = _suggest(name, known) or _OWN_POLICY
            raise self.error("policy.name", f"unknown policy {name!r}{hint}; known: {', '.join(known)}")
        options = {k: v for k, v in table.items() if k != "name"}
        try:
            policies.check_options(name, MappingProxyType(dict(options)))
        except (ValueError, TypeError) as err:
            raise self.error(*_option_error(str(err), options)) from None
        return PolicySpec(name, MappingProxyType(options))

    def simulation(self, data: Mapping[str, Any]) -> SimulationSettings:
        table = self.table(data, "simulation", required=False) or {}
        self.check_keys(table, "simulation")
        d = SimulationSettings()
        horizon = self.positive(table.get("horizon", d.horizon), "simulation.horizon")
        self.defaults["simulation.horizon"] = "horizon" not in table
        warmup = d.warmup
        if "warmup" in table:
            warmup = self.number(table["warmup"], "simulation.warmup")
            if warmup < 0:
                raise self.error(
                    "simulation.warmup", f"must be >= 0, got {table['warmup']!r}"
                )
        if warmup >= horizon:
            default = "" if "warmup" in table else " (its default: give a smaller one)"
            raise self.error(
                "simulation.warmup",
                f"must be less than simulation.horizon ({horizon:g}), got {warmup:g}{default}",
            )
        replications = self.integer(
            table.get("replications", d.replications), "simulation.replications", 1
        )
        if replications > MAX_REPLICATIONS:
            raise self.error("simulation.replications", f"must be at most {MAX_REPLICATIONS:,}, got {replications}")
        seed = self.seed(table.get("seed", d.seed), "simulation.seed")
        checkpoint = d.checkpoint_interval
        if "checkpoint_interval" in table:
            checkpoint = self.bounded(
                table["checkpoint_interval"], "simulation.checkpoint_interval", 0.0, MAX_TIME, "time units"
            )
        return SimulationSettings(horizon, warmup, replications, seed, checkpoint)

    def testbed(self, data: Mapping[str, Any], n_classes: int) -> TestbedSettings:
        table = self.table(data, "testbed", required=False) or {}
        self.check_keys(table, "testbed")
        self.defaults["testbed.duration"] = "duration" not in table and "time_unit" not in table
        d = TestbedSettings()
        return TestbedSettings(
            time_unit=self.bounded(
                table.get("time_unit", d.time_unit), "testbed.time_unit", MIN_TIME_UNIT, MAX_TIME_UNIT, "s"
            ),
            duration=self.bounded(
                table.get("duration", d.duration), "testbed.duration", 0.0, MAX_DURATION, "s"
            ),
            timeout_factor=self.positive(
                table.get("timeout_factor", d.timeout_factor), "testbed.timeout_factor"
            ),
            executor=self.executor(table.get("executor", d.executor)),
            commands=self.commands(table, n_classes),
            detection=self.detection(table.get("detection", d.detection)),
        )

    def detection(self, value: Any) -> str:
        if value not in DETECTIONS:
            raise self.error("testbed.detection",
                             f"must be one of {', '.join(DETECTIONS)}, got {describe_value(value)}")
        return value

    def executor(self, value: Any) -> str:
        if value not in EXECUTORS:
            raise self.error("testbed.executor", f"must be one of {', '.join(EXECUTORS)}, got {describe_value(value)}")
        return value

    def commands(self, table: Mapping[str, Any], n_classes: int) -> tuple[str | tuple[str, ...], ...]:
        """One command per job class, for the command executor: a key of the pullers' allow-lists
        (a string) or an exact argv (a non-empty list of strings); pullers run only what they allow."""
        if "commands" not in table:
            if table.get("executor") == "command":
                raise self.error("testbed.commands", "the command executor needs one command per job class "
                                                     "(an allow-list key, or an argv as a list of strings)")
            return ()
        value = table["commands"]
        if not isinstance(value, list) or len(value) != n_classes:
            got = f"a list of {len(value)}" if isinstance(value, list) else describe_value(value)
            raise self.error("testbed.commands", f"must be a list of {n_classes} commands, one per job class, "
                                                 f"got {got}")
        out: list[str | tuple[str, ...]] = []
        for i, command in enumerate(value):
            if isinstance(command, str) and command.strip():
                out.append(command)
            elif isinstance(command, list) and command and all(isinstance(a, str) and a for a in command):
                out.append(tuple(command))
            else:
                raise self.error(f"testbed.commands[{i}]", "must be an allow-list key (a non-empty string) or an "
                                                           "argv (a non-empty list of non-empty strings), got "
                                                           f"{describe_value(command)}")
        return tuple(out)


def _option_error(message: str, options: Mapping[str, Any]) -> tuple[str, str]:
    """The key and the message of a policy's complaint about its options: ``policy.Rank`` and what is wrong, without
    the option's name again when the message began with it ("Rank: ...")."""
    key = _option_key(message, options)
    name = key.removeprefix("policy.")
    return key, message.removeprefix(f"{name}: ") if key != "policy" else message


def _option_key(message: str, options: Mapping[str, Any]) -> str:
    """``policy.<option>``: the given option the message begins with ("Rank: ..."), else the one option named in it."""
    first = message.split(":", 1)[0]
    if first in options:
        return f"policy.{first}"
    named = [
        k for k in options if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", message)
    ]
    if len(named) > 1:  # prefer options the message quotes
        quoted = [k for k in named if f"'{k}'" in message or f'"{k}"' in message]
        named = quoted or named
    return f"policy.{named[0]}" if len(named) == 1 else "policy"
