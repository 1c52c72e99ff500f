"""Sweep files (TOML) -> SweepSpec: a scenario's axes, seeds and replications, run settings; errors name the key."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
import os
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst import scenarios
from mgst.config import MAX_REPLICATIONS, MAX_SEED, MAX_TIME, SEED_RULE, ConfigError
from mgst.config.checks import check_sweep_run_length
from mgst.config.experiment import describe_value
from mgst.config.names import name_problem
from mgst.model import Experiment
from mgst.scenarios import RunSettings, Scenario
from mgst.toml_file import TomlFileError, read_toml

__all__ = ["Cell", "SweepSpec", "load_sweep", "parse_sweep"]

_TOP = ("scenario", "name", "axes", "simulation", "options", "quick")
_SIMULATION = ("horizon", "warmup", "checkpoint_interval", "max_bags", "replications", "seed", "seeds")
_REPLICATIONS = ("replications", "seed", "seeds")  # [simulation] of a scenario without run settings
_QUICK = ("axes", "simulation", "options")
RUN_COLUMNS = ("seed", "replication")  # after the scenario's axes, in every cell key


@dataclass(frozen=True, slots=True)
class Cell:
    """One simulation of a sweep: a value per scenario axis, a base seed, a replication index."""

    values: tuple[str, ...]  # in the scenario's axis order
    seed: int
    replication: int

    @property
    def key(self) -> tuple[str, ...]:
        """The cell's identity in sweep.csv: its column values as the CSV spells them."""
        return (*self.values, str(self.seed), str(self.replication))


@dataclass(frozen=True)
class SweepSpec:
    name: str
    scenario: Scenario
    axes: tuple[tuple[str, tuple[str, ...]], ...]  # every scenario axis, with the values swept
    seeds: tuple[int, ...]
    replications: int
    settings: RunSettings
    options: Mapping[str, Any]  # every scenario option, defaults filled in
    only: tuple[tuple[str, tuple[str, ...]], ...] = ()  # column -> values kept (`--only`)
    path: str | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def columns(self) -> tuple[str, ...]:
        """The key columns of sweep.csv: the scenario's axes, then seed and replication."""
        return (*(a.name for a in self.scenario.axes), *RUN_COLUMNS)

    def values(self, column: str) -> tuple[str, ...]:
        """The values swept on one key column, as the CSV spells them."""
        if column == "seed":
            return tuple(map(str, self.seeds))
        if column == "replication":
            return tuple(map(str, range(self.replications)))
        return dict(self.axes)[column]

    def cells(self) -> list[Cell]:
        """Every cell of the grid that passes the ``only`` filters, in grid order."""
        keep = dict(self.only)
        out = []
        for combo in itertools.product(*(v for _, v in self.axes), self.seeds, range(self.replications)):
            cell = Cell(tuple(combo[:-2]), combo[-2], combo[-1])
            if all(k in keep.get(c, (k,)) for c, k in zip(self.columns, cell.key)):
                out.append(cell)
        return out

    def experiment(self, cell: Cell) -> Experiment:
        """The cell's Experiment (shared by its replications, unless the scenario builds one per replication)."""
        each = self.scenario.per_replication
        k = (cell.values, cell.seed, cell.replication if each else None)
        if k not in self._cache:
            names = [a.name for a in self.scenario.axes]
            described = ", ".join(f"{n}={v}" for n, v in zip(names, cell.values))
            path = str(self.path) if self.path is not None else None
            try:
                exp = self.scenario.build(dict(zip(names, cell.values)), self.settings, cell.seed,
                                          cell.replication if each else self.replications, self.options)
            except ConfigError:
                raise
            except (ValueError, OSError) as e:  # (a value each option allows alone, not together: a trace too short)
                where = f"{described}, seed {cell.seed}" + (f", replication {cell.replication}" if each else "")
                raise ConfigError("options", f"the cell {where} cannot be built: {e}", path) from None
            if self.scenario.run_settings:  # (the sweep's [simulation] sets its runs' length)
                check_sweep_run_length(exp, path, described)
            self._cache[k] = exp
        return self._cache[k]

    def manifest(self) -> dict[str, Any]:
        """What every row of one sweep.csv must share (the axes, seeds and replications may grow)."""
        s = self.settings
        defaults = self.scenario.option_defaults()
        later = self.scenario.later_options
        return {"format": 1, "scenario": self.scenario.name,
                "settings": {"horizon": s.horizon, "warmup": s.warmup, "checkpoint_interval": s.checkpoint_interval,
                             "max_bags": s.max_bags},
                "options": {k: v for k, v in self.options.items() if k not in later or v != defaults.get(k)}}


def load_sweep(path: str | os.PathLike, *, quick: bool = False, replications: int | None = None,
               only: Sequence[str] = (), options: Sequence[str] = ()) -> SweepSpec:
    """Read and check the sweep file at ``path``; ``quick`` applies its [quick] table.

    ``replications`` overrides the file's; ``only`` holds ``column=value[,value...]`` filters; ``options`` holds
    ``key=value`` settings of the scenario's options (a TOML value), over the file's and its [quick] table's.
    """
    p = Path(path)
    where = str(p)
    try:
        data = read_toml(p)
    except TomlFileError as err:
        raise ConfigError("(file)", str(err), where) from None
    return parse_sweep(data, p.stem, where, quick=quick, replications=replications, only=only, options=options)


def parse_sweep(data: Mapping[str, Any], name: str, path: str | None = None, *, quick: bool = False,
                replications: int | None = None, only: Sequence[str] = (), options: Sequence[str] = (),
                _other_checked: bool = False) -> SweepSpec:
    """Check parsed TOML ``data`` (see load_sweep); ``name`` is used when the file has none."""
    p = _Checker(path)
    if "scenario" not in data and ("workload" in data or "machines" in data):  # (an experiment file's sections)
        raise p.error("scenario", "missing: this is an experiment file, not a sweep file (run it with 'mgst simulate "
                                  "FILE', or 'mgst run FILE' on the testbed; a sweep file names a scenario: "
                                  "docs/sweeps.md)")
    p.keys(data, _TOP, "")
    # Every value of the file is checked, used or not: [quick]'s in a full sweep, the values [quick] replaces in a
    # quick one (a quick try first must not hide what the full sweep would refuse).
    if not _other_checked and "quick" in data:
        parse_sweep(data, name, path, quick=not quick, _other_checked=True)
    scenario_name = data.get("scenario")
    if scenario_name is None:
        raise p.error("scenario", f"missing; one of: {', '.join(scenarios.names())}")
    if not isinstance(scenario_name, str) or scenario_name not in scenarios.names():
        raise p.error("scenario", f"{scenario_name!r} is not a scenario; known: {', '.join(scenarios.names())}")
    scenario = scenarios.get(scenario_name)
    if "name" in data:  # (a sweep's name names its folder, runs/sweep-NAME: the rule of an experiment's name)
        name = data["name"]
        problem = name_problem(name, folder=True) if isinstance(name, str) else "must be a string"
        if problem is not None:
            raise p.error("name", problem if isinstance(name, str) else f"must be a non-empty string, got {name!r}")

    axes_t, sim_t, opt_t = (dict(p.table(data, k)) for k in ("axes", "simulation", "options"))
    where = {"axes": "axes", "simulation": "simulation", "options": "options"}
    if quick:
        if "quick" not in data:
            raise ConfigError("--quick", f"{path or 'the sweep file'} has no [quick] table")
        q = p.table(data, "quick")
        p.keys(q, _QUICK, "quick.")
        for k, t in (("axes", axes_t), ("simulation", sim_t), ("options", opt_t)):
            sub = p.table(q, k, "quick.")
            t.update(sub)
            for key in sub:
                where[f"{k}.{key}"] = f"quick.{k}"
    elif "quick" in data:
        q = p.table(data, "quick")
        p.keys(q, _QUICK, "quick.")

    def key(section: str, k: str) -> str:
        return f"{where.get(f'{section}.{k}', section)}.{k}"

    p.keys(axes_t, [a.name for a in scenario.axes], "axes.", lambda k: key("axes", k))
    axes = tuple((a.name, p.axis(scenario, a.name, axes_t[a.name], key("axes", a.name)) if a.name in axes_t
                  else a.values) for a in scenario.axes)

    p.keys(sim_t, _SIMULATION if scenario.run_settings else _REPLICATIONS, "simulation.",
           lambda k: key("simulation", k))
    if not scenario.run_settings:  # (the scenario's runs end by themselves)
        sim_t = {"horizon": 1.0, "checkpoint_interval": 1.0, **sim_t}
    if "horizon" not in sim_t:
        raise p.error("simulation.horizon", "missing (model time during which bags arrive)")
    horizon = p.number(sim_t["horizon"], key("simulation", "horizon"), 0.0, MAX_TIME)
    warmup = p.number(sim_t.get("warmup", 0.0), key("simulation", "warmup"), 0.0, MAX_TIME, strict=False)
    if warmup >= horizon:
        raise p.error(key("simulation", "warmup"), f"must be less than the horizon ({horizon:g}), got {warmup:g}")
    if "checkpoint_interval" not in sim_t:
        raise p.error("simulation.checkpoint_interval", "missing (model time between a replica's checkpoints)")
    checkpoint = p.number(sim_t["checkpoint_interval"], key("simulation", "checkpoint_interval"), 0.0, MAX_TIME)
    max_bags = sim_t.get("max_bags")
    if max_bags is not None:
        max_bags = p.integer(max_bags, key("simulation", "max_bags"), 1)
    reps = p.integer(sim_t.get("replications", 1), key("simulation", "replications"), 1)
    if reps > MAX_REPLICATIONS:
        raise p.error(key("simulation", "replications"), f"must be at most {MAX_REPLICATIONS:,}, got {reps}")
    if replications is not None:
        if isinstance(replications, bool) or not isinstance(replications, int) or replications < 1:
            raise ConfigError("--replications", f"must be an integer >= 1, got {describe_value(replications)}")
        if replications > MAX_REPLICATIONS:
            raise ConfigError("--replications", f"must be at most {MAX_REPLICATIONS:,}, got {replications}")
        reps = replications
    if "seed" in sim_t and "seeds" in sim_t:
        raise p.error(key("simulation", "seeds"), "give seed or seeds, not both")
    if "seeds" in sim_t:
        k = key("simulation", "seeds")
        raw = sim_t["seeds"]
        if not isinstance(raw, list) or not raw:
            raise p.error(k, f"must be a non-empty list of integers, got {raw!r}")
        seeds = tuple(p.seed(s, f"{k}[{i}]") for i, s in enumerate(raw))
        if len(set(seeds)) != len(seeds):
            raise p.error(k, "has a seed twice")
    else:
        seeds = (p.seed(sim_t.get("seed", 1), key("simulation", "seed")),)

    settings = scenario.option_defaults()
    p.keys(opt_t, list(settings), "options.", lambda k: key("options", k))
    for k, v in opt_t.items():
        problem = scenario.check_option(k, v)
        if problem:
            raise p.error(key("options", k), problem)
        settings[k] = v
    for k, v in _option_settings(options, list(settings)):
        problem = scenario.check_option(k, v)
        if problem:
            raise ConfigError("--option", f"{k}: {problem}")
        settings[k] = v
    options = settings

    spec = SweepSpec(name, scenario, axes, seeds, reps, RunSettings(horizon, warmup, checkpoint, max_bags),
                     options, path=path)
    return dataclasses.replace(spec, only=_filters(spec, only))


def _option_settings(items: Iterable[str], known: Sequence[str]) -> list[tuple[str, Any]]:
    """``key=value`` items (``--option``): each key one of the scenario's options, each value a TOML value."""
    out = []
    for item in items:
        k, sep, text = item.partition("=")
        k = k.strip()
        if not sep or not k or not text.strip():
            raise ConfigError("--option", f"{item!r} is not KEY=VALUE (a TOML value: true, 0.5, \"text\")")
        if k not in known:
            raise ConfigError("--option", f"{k!r} is not an option of this sweep's scenario; one of: "
                                          f"{', '.join(known)}")
        try:
            value = tomllib.loads(f"value = {text.strip()}")["value"]
        except tomllib.TOMLDecodeError:
            raise ConfigError("--option", f"{item!r}: the value is not a TOML value (true, 0.5, \"text\")") from None
        out.append((k, value))
    return out


def _filters(spec: SweepSpec, only: Iterable[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: dict[str, tuple[str, ...]] = {}
    for item in only:
        column, sep, text = item.partition("=")
        column = column.strip()
        if not sep or not column or not text.strip():
            raise ConfigError("--only", f"{item!r} is not COLUMN=VALUE[,VALUE...]")
        if column not in spec.columns:
            raise ConfigError("--only", f"{column!r} is not a column; one of: {', '.join(spec.columns)}")
        swept = spec.values(column)
        values = tuple(v.strip() for v in text.split(","))
        for v in values:
            if v not in swept:
                raise ConfigError("--only", f"{column}={v} is not in this sweep; it sweeps {', '.join(swept)}")
        # Several filters on one column: a cell must pass each.
        before = out.get(column, values)
        out[column] = tuple(v for v in before if v in values)
        if not out[column]:  # (it ran no cell, and said nothing but "0 cells")
            raise ConfigError("--only", f"{item!r} keeps none of the {column} values an earlier --only kept "
                                        f"({', '.join(before)}): filters on one column must all hold; give the "
                                        f"values in one: --only {column}={','.join((*before, *values))}")
    return tuple(out.items())


class _Checker:
    def __init__(self, path: str | None):
        self.path = path

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(key, problem, self.path)

    def keys(self, table: Mapping[str, Any], known: Sequence[str], prefix: str, name=None) -> None:
        for k in table:
            if k not in known:
                close = difflib.get_close_matches(k, known, 1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(known)}"
                raise self.error(name(k) if name else f"{prefix}{k}", f"unknown key{hint}")

    def table(self, data: Mapping[str, Any], key: str, prefix: str = "") -> Mapping[str, Any]:
        t = data.get(key, {})
        if not isinstance(t, Mapping):
            raise self.error(f"{prefix}{key}", f"must be a table, got {describe_value(t)}")
        return t

    def axis(self, scenario: Scenario, axis: str, raw: Any, key: str) -> tuple[str, ...]:
        a = scenario.axis(axis)
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not raw:
            raise self.error(key, f"must be a non-empty list of values, got {raw!r}")
        out: list[str] = []
        for i, v in enumerate(raw):
            if not isinstance(v, str):
                raise self.error(f"{key}[{i}]", f"must be a string, got {describe_value(v)}")
            if v in out:
                raise self.error(f"{key}[{i}]", f"{v!r} is listed twice")
            if v not in a.values:
                problem = "not a value of this axis"
                if a.open and scenario.check_value is not None:
                    problem = scenario.check_value(axis, v)
                if problem:
                    raise self.error(f"{key}[{i}]", f"{v!r}: {problem}; the paper's: {', '.join(a.values)}")
            out.append(v)
        return tuple(out)

    def number(self, v: Any, key: str, low: float, high: float, strict: bool = True) -> float:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > low if strict else v >= low) and v <= high
        if not ok:
            bound = f"{'>' if strict else '>='} {low:g} and <= {high:g}"
            raise self.error(key, f"must be a number {bound}, got {describe_value(v)}")
        return float(v)

    def integer(self, v: Any, key: str, low: int) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise self.error(key, f"must be an integer >= {low}, got {describe_value(v)}")
        return v

    def seed(self, v: Any, key: str) -> int:
        """A seed (MAX_SEED: the experiment files' rule)."""
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
            raise self.error(key, f"{SEED_RULE}, got {describe_value(v)}")
        return v
