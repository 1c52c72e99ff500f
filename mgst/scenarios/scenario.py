"""What a scenario is: its grid's axes, the settings every cell shares, and how a cell becomes an Experiment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.model import Experiment

# A cell's metrics: (experiment, replication) -> metric name -> value (a module-level function: it is pickled).
CellFunction = Callable[[Experiment, int], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Measures:
    """What a scenario's cells measure, as `mgst sweep` writes, summarises and plots it."""

    columns: tuple[str, ...]  # sweep.csv's metric columns after the key, in order (other keys: extra columns)
    summarised: tuple[str, ...]  # summary.csv's mean and 95 % interval, and a plot each
    growing: tuple[str, ...] = ()  # meaningless where the cell's run is unbounded (they grow with the horizon)
    totals: tuple[str, ...] = ()  # summary.csv's plain mean over the replications
    labels: tuple[tuple[str, str], ...] = ()  # metric -> its plots' axis label (else mgst.sweep.plots' or its name)
    scale: tuple[tuple[str, float], ...] = ()  # metric -> the factor its plots multiply it by (a fraction as %)


# Anglano & Canonico's Bag-of-Tasks measures (mgst.sim.bag_cell.simulate_cell): AVT, makespan, waiting time and RWT.
BOT_MEASURES = Measures(
    columns=("avt", "avt_ci", "makespan", "makespan_ci", "waiting", "waiting_ci", "rwt", "bags", "tasks",
             "unbounded", "wall_s"),
    summarised=("avt", "makespan", "waiting", "rwt"),
    growing=("avt", "makespan", "waiting"),
    totals=("bags", "tasks"),
    scale=(("rwt", 100.0),),
)


@dataclass(frozen=True, slots=True)
class Axis:
    """One dimension of a scenario's grid: a key of the sweep file's ``[axes]`` and a CSV column."""

    name: str
    values: tuple[str, ...]  # the paper's values, in the order its figures use; the default is all of them
    doc: str = ""
    # An open axis also takes values outside ``values`` that Scenario.check_value accepts (a new policy).
    open: bool = False


@dataclass(frozen=True, slots=True)
class RunSettings:
    """What every cell of a sweep shares: model time (the scenario's unit) and where runs stop."""

    horizon: float  # bags arrive during [0, horizon)
    warmup: float  # bags submitted before this are not counted
    checkpoint_interval: float  # a running replica checkpoints this often
    max_bags: int | None = None  # stop the bag stream after this many bags (None: the horizon decides)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A paper's grid: its axes, its knobs, how to build one cell's Experiment, and how its figures are laid out.

    ``build(cell, settings, seed, replications, options)`` gets ``cell`` as axis name -> value
    (every axis), the run settings, the base seed, the replication count, and the options with
    every default filled in. One figure is drawn per combination of ``panels``, with one bar
    group per value of ``groups`` (per combination of them, if several) and one bar per value of ``bars``.

    The rest is optional (the defaults are Anglano & Canonico's Bag-of-Tasks sweep): ``cell`` computes a cell
    (None: mgst.sim.bag_cell.simulate_cell), ``measures`` says what it returns; ``per_replication``
    makes each replication its own Experiment (``build`` then gets the replication index in place of
    the count); ``prepare(values, options, out_dir)`` makes what the cells share in the sweep's folder
    (files) before any is built, given each axis's swept values, and returns the options the builds
    get; ``figures(spec, out_dir)`` draws the scenario's own figures after the bars, and returns their
    paths; ``run_settings`` False: the sweep file gives no horizon, warm-up or checkpoint interval; ``cost``
    estimates a cell's cost from its Experiment, relative to the other cells (None: the jobs it is expected to
    simulate), so that a sweep starts its longest cells first; ``later_options`` are left out of a sweep's manifest at
    their default.
    """

    name: str
    doc: str
    axes: tuple[Axis, ...]
    build: Callable[[Mapping[str, str], RunSettings, int, int, Mapping[str, Any]], Experiment]
    # Option name -> its default, read when a sweep is loaded (so a module constant can change).
    option_defaults: Callable[[], dict[str, Any]]
    # (option, value) -> the problem with it, or None.
    check_option: Callable[[str, Any], str | None]
    panels: tuple[str, ...]
    groups: str | tuple[str, ...]
    bars: str
    # (axis, value) -> the problem with a value outside an open axis's values, or None.
    check_value: Callable[[str, str], str | None] | None = None
    cell: CellFunction | None = None
    measures: Measures = BOT_MEASURES
    per_replication: bool = False
    prepare: Callable[[Mapping[str, tuple[str, ...]], Mapping[str, Any], Path], dict[str, Any]] | None = None
    figures: Callable[[Any, Path], list[Path]] | None = None
    run_settings: bool = True
    cost: Callable[[Experiment], float] | None = None
    # Options added after sweeps of the scenario were kept: at their default they are left out of a sweep's manifest,
    # so that a folder of before goes on with the same command (and one set otherwise is told apart).
    later_options: tuple[str, ...] = ()

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)


def registered_policy(axis: str, value: str) -> str | None:
    """An open ``policy`` axis's check (Scenario.check_value): any policy registered with mgst.policies."""
    if axis != "policy":
        return "not a value of this axis"
    from mgst import policies  # noqa: PLC0415 (checked when a sweep is loaded, never at import)

    known = policies.names()
    return None if value in known else f"not the paper's policy nor a registered one; registered: {', '.join(known)}"
