"""What a scenario is: its grid's axes, the settings every cell shares, and how a cell becomes an Experiment."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mgst.model import Experiment


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
    group per value of ``groups`` and one bar per value of ``bars``.
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
    groups: str
    bars: str
    # (axis, value) -> the problem with a value outside an open axis's values, or None.
    check_value: Callable[[str, str], str | None] | None = None

    def axis(self, name: str) -> Axis:
        for a in self.axes:
            if a.name == name:
                return a
        raise KeyError(name)
