"""Several grids (GridBot's collaborative grids, community grid and dedicated cluster): each machine group is a grid
with its own hosts' arrival, preemptions or failures, speeds and returned-result delay, from a documented preset.

A host of a grid is a client the overlay submitted to it: it waits in the grid's queue before it joins (``join``),
is preempted or fails after an up period (``mean_up``; a share ``unreliable`` of the grid's hosts much sooner,
``unreliable_mean_up``), is replaced by a new client after ``mean_down``, computes at a share of the fastest host
drawn once for it (``speed = [low, high]``), and its results reach the server ``return_delay`` after they are
computed (exponential; the simulator holds the replica on the host meanwhile). Machine j is in the grid its
``group`` names; its ``grid`` attribute is the grid's name (docs/models.md, "Grids"). A grid whose table gives
``start_hosts`` grows and shrinks with the overlay's demand instead (mgst.availability.grid_size).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from mgst.availability.grid_size import (
    DEFAULT_IDLE_LEAVE,
    DEFAULT_REQUEST_EVERY,
    SIZE_KEYS,
    GridSize,
    OverlayGrid,
    OverlayHostProcess,
    check_size,
)
from mgst.availability.kind import AvailabilityKind, ConfigHost, group_of
from mgst.availability.process import AvailabilityProcess, Period, State
from mgst.availability.trace import KIND as TRACE
from mgst.availability.trace import MAX_WIRE_PERIODS
from mgst.model import AvailabilityModel, Experiment
from mgst.streams import Purpose, python_random

MAX_GRIDS: Final = 100
# How many values stand for a grid's returned-result delay in the simulator's per-machine overheads: the quantiles
# of its exponential law at (k + 1/2) / QUANTILES, drawn uniformly (mgst.sim.overheads).
QUANTILES: Final = 256


@dataclass(frozen=True, slots=True)
class Grid:
    """One grid's parameters (model time units are seconds in GridBot's experiments)."""

    name: str
    preset: str
    join: float  # mean wait of a new client in the grid's queue before its host joins (exponential; 0: at once)
    mean_up: float  # mean up period of a host before it is preempted or fails (exponential; inf: never)
    mean_down: float  # mean time before the client that replaces it joins (exponential)
    unreliable: float  # the share of the grid's hosts that fail often
    unreliable_mean_up: float  # their mean up period
    speed: tuple[float, float]  # a host's CPU share of the fastest host's, uniform in [low, high], drawn once
    return_delay: float  # mean delay from a result computed to the server having it (exponential; 0: none)
    size: GridSize | None = None  # its size over time, the overlay's (None: a fixed set of hosts)


# The presets: GridBot's grid kinds ("GridBot: Execution of Bags of Tasks in Multiple Grids", sections 2.2 and 7),
# in seconds. docs/models.md, "Grids", says where each number comes from.
PRESETS: Final[dict[str, Grid]] = {
    # OSG, EGEE, UW Madison: fair-share preemption loses about 10 % of 20-60 minute jobs (Figure 1(c)): a 40-minute
    # job survives an exponential up period of mean 22,800 s with probability exp(-2400/22800) = 0.90. Queue waits
    # from seconds to hours (Figure 1(b)): a new client waits 15 minutes on average. Misconfigured hosts are rare.
    "collaborative": Grid("collaborative", "collaborative", 900.0, 22_800.0, 900.0, 0.02, 1800.0, (0.5, 1.0), 0.0),
    # Superlink@Technion: clients are there (they contact the server at will), preemption is rare but hardware and
    # software failures are frequent (a share of black-hole hosts), speeds vary widely, and results come back late:
    # execution over turnaround averages 0.3 (section 7), a delay of about 2.3 job times (30 minutes for 12.5).
    "community": Grid("community", "community", 0.0, 36_000.0, 43_200.0, 0.15, 600.0, (0.25, 1.0), 1800.0),
    # The Technion cluster: dedicated, preemption-free, short queues, every host as fast as the fastest.
    "cluster": Grid("cluster", "cluster", 0.0, math.inf, 0.0, 0.0, math.inf, (1.0, 1.0), 0.0),
}
GRID_KEYS: Final = ("name", "preset", "join", "mean_up", "mean_down", "unreliable", "unreliable_mean_up", "speed",
                    "return_delay", *SIZE_KEYS)


@dataclass(frozen=True, slots=True)
class GridsAvailability(AvailabilityModel):
    """The grids, one per machine group; machine j is in ``grids[g - 1]``, g its ``group`` attribute."""

    grids: tuple[Grid, ...]


class HostTraits:
    """What one host draws once, when it joins its grid: its speed and whether it is unreliable."""

    __slots__ = ("share", "mean_up")

    def __init__(self, grid: Grid, a: float, seed: int, replication: int, machine: int):
        rng = python_random(seed, replication, Purpose.REPAIRS, machine)
        low, high = grid.speed
        self.share = a * (low + (high - low) * rng.random())
        self.mean_up = grid.unreliable_mean_up if rng.random() < grid.unreliable else grid.mean_up


def arrival_stream(seed: int, machine: int, since: float) -> Any:
    """The stream of a testbed host's up period after it arrives at model time ``since`` (to the millisecond of model
    time: each arrival of the same machine draws its own)."""
    return python_random(seed, round(since * 1000.0), Purpose.OVERLAY_ARRIVALS, machine)


class GridProcess:
    """One host's periods: DOWN while its first client waits in the grid's queue (``join``), then UP (at its speed)
    and DOWN (preempted or failed, until a new client joins: ``mean_down``) in turn, from the machine's own
    stream."""

    __slots__ = ("_rng", "_grid", "_traits", "_up_next", "_joined")

    def __init__(self, grid: Grid, a: float, seed: int, replication: int, machine: int):
        self._rng = python_random(seed, replication, Purpose.FAILURES, machine)
        self._grid = grid
        self._traits = HostTraits(grid, a, seed, replication, machine)
        self._up_next = grid.join <= 0
        self._joined = False

    def _exp(self, mean: float) -> float:
        if math.isinf(mean):
            return math.inf
        return self._rng.expovariate(1.0 / mean) if mean > 0 else 0.0

    def next(self) -> Period:
        if not self._up_next:
            self._up_next = True
            mean = self._grid.mean_down if self._joined else self._grid.join
            self._joined = True
            return Period(max(self._exp(mean), 1e-9), State.DOWN, 0.0)
        self._joined = True
        self._up_next = False
        return Period(max(self._exp(self._traits.mean_up), 1e-9), State.UP, self._traits.share)


class GridsKind(AvailabilityKind):
    """``kind = "grids"``: ``grids = [{name = ..., preset = ..., <overrides>}, ...]``, one per machine group.

    Wire: a puller plays the host's drawn periods as a trace (``("trace", ...)``, MAX_WIRE_PERIODS at most); the
    returned-result delay is the simulator's alone.
    """

    name = "grids"
    spec_type = GridsAvailability
    keys = ("kind", "grids")
    grouped = True

    # ---------------------------------------------------------------- experiment file and store

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str
                    ) -> tuple[GridsAvailability, str]:
        key = f"{section}.grids"
        raw = host.nonempty_list(host.require(table, section, "grids"), key,
                                 'tables {name = "...", preset = "collaborative" | "community" | "cluster"} '
                                 "(one per machine group)")
        if len(raw) > MAX_GRIDS:
            raise host.error(key, f"has {len(raw)} grids; at most {MAX_GRIDS} are allowed")
        grids: list[Grid] = []
        for g, entry in enumerate(raw):
            gkey = f"{key}[{g}]"
            if not isinstance(entry, Mapping):
                raise host.error(gkey, f'must be a table {{name = "...", preset = "..."}}, got {host.describe(entry)}')
            for k in entry:
                if k not in GRID_KEYS:
                    raise host.error(f"{gkey}.{k}", f"unknown key{host.suggest(k, GRID_KEYS)}")
            grids.append(_grid(host, entry, gkey, [x.name for x in grids]))
        return GridsAvailability(tuple(grids)), key

    def to_plain(self, spec: GridsAvailability) -> Any:
        return {"kind": self.name, "grids": [[g.name, g.preset, g.join, _plain(g.mean_up), g.mean_down, g.unreliable,
                                              _plain(g.unreliable_mean_up), list(g.speed), g.return_delay]
                                             + ([g.size.to_plain()] if g.size is not None else [])
                                             for g in spec.grids]}

    def from_plain(self, plain: Any) -> GridsAvailability:
        grids = []
        for name, preset, join, up, down, unreliable, unreliable_up, speed, delay, *size in plain["grids"]:
            grids.append(Grid(name, preset, join, _unplain(up), down, unreliable, _unplain(unreliable_up),
                              (speed[0], speed[1]), delay, GridSize.from_plain(size[0]) if size else None))
        return GridsAvailability(tuple(grids))

    def check(self, spec: GridsAvailability, experiment: Experiment) -> None:
        for g, grid in enumerate(spec.grids):
            if grid.size is not None:
                count = sum(1 for j in range(len(experiment.machines)) if self.grid(spec, experiment, j) is grid)
                check_size(grid.size, f"availability.grids[{g}]", grid.name, count)

    def overlay_grids(self, spec: GridsAvailability, experiment: Experiment) -> list[OverlayGrid]:
        members: list[list[int]] = [[] for _ in spec.grids]
        for j in range(len(experiment.machines)):
            members[group_of(experiment, j, len(spec.grids))].append(j)
        return [OverlayGrid(g, grid.name, tuple(members[g]), grid.size, grid.join)
                for g, grid in enumerate(spec.grids) if grid.size is not None]

    def group_count(self, spec: GridsAvailability) -> int:
        return len(spec.grids)

    def group_names(self, spec: GridsAvailability) -> tuple[str, ...]:
        return tuple(g.name for g in spec.grids)

    def result_delays(self, spec: GridsAvailability, experiment: Experiment) -> list[float]:
        return [self.grid(spec, experiment, j).return_delay for j in range(len(experiment.machines))]

    # ---------------------------------------------------------------- simulation and wire

    def grid(self, spec: GridsAvailability, experiment: Experiment, machine: int) -> Grid:
        return spec.grids[group_of(experiment, machine, len(spec.grids))]

    def process(self, spec: GridsAvailability, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        g = group_of(experiment, machine, len(spec.grids))
        grid = spec.grids[g]
        a = experiment.machines[machine].availability
        if grid.size is None:
            return GridProcess(grid, a, seed, replication, machine)
        rank = sum(1 for j in range(machine) if group_of(experiment, j, len(spec.grids)) == g)
        traits = HostTraits(grid, a, seed, replication, machine)
        return OverlayHostProcess(python_random(seed, replication, Purpose.FAILURES, machine), traits.mean_up,
                                  traits.share, rank < grid.size.start_hosts)

    def to_wire(self, spec: GridsAvailability, experiment: Experiment, machine: int, seed: int, until: float,
                since: float = 0.0) -> tuple:
        g = group_of(experiment, machine, len(spec.grids))
        grid = spec.grids[g]
        proc: AvailabilityProcess
        if grid.size is not None:
            # On the testbed a host of a sized grid has a puller only once it is there (one of the start_hosts, or
            # granted by the mapper's overlay: mgst.testbed.overlay): it plays from its arrival, ``since``, one up
            # period of its law, then DOWN to the end (preempted: the overlay may grant the machine again).
            traits = HostTraits(grid, experiment.machines[machine].availability, seed, 0, machine)
            proc = OverlayHostProcess(arrival_stream(seed, machine, since), traits.mean_up, traits.share, True)
        else:
            proc = self.process(spec, experiment, seed, 0, machine)
        sent: list[list[float]] = []
        at = since if grid.size is not None else 0.0
        while at < until:
            p = proc.next()
            end = at + p.duration
            if end > since:
                sent.append([min(end, max(until, since) + 1.0) - max(at, since), int(p.state), p.cpu_share])
            if len(sent) > MAX_WIRE_PERIODS:
                raise ValueError(f"machine {experiment.machines[machine].name!r} has more than {MAX_WIRE_PERIODS:,} "
                                 f"periods in the testbed run's {until:g} time units; a puller takes at most "
                                 f"{MAX_WIRE_PERIODS:,} (MAX_WIRE_PERIODS): use a shorter run or longer up periods")
            at = end
        return (TRACE.name, sent)

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        return TRACE.wire_problem(form)

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        return TRACE.wire_times(form)

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        return TRACE.from_wire(form, machine, share)

    # ---------------------------------------------------------------- long-run figures

    def _up_fraction(self, grid: Grid) -> float:
        if math.isinf(grid.mean_up):
            return 1.0
        up = (1.0 - grid.unreliable) * grid.mean_up + grid.unreliable * grid.unreliable_mean_up
        return up / (up + grid.mean_down)

    def capacity(self, spec: GridsAvailability, experiment: Experiment) -> tuple[list[float], str]:
        fractions = []
        for j in range(len(experiment.machines)):
            g = self.grid(spec, experiment, j)
            fractions.append(self._up_fraction(g) * (g.speed[0] + g.speed[1]) / 2)
        return fractions, (" (availabilities scaled by each grid's long-run up fraction and mean speed, "
                           f"{min(fractions):.3f} to {max(fractions):.3f})")

    def cycles(self, spec: GridsAvailability, experiment: Experiment, length: float) -> tuple[float, str]:
        total = 0.0
        for j in range(len(experiment.machines)):
            g = self.grid(spec, experiment, j)
            cycle = min(g.mean_up, g.unreliable_mean_up if g.unreliable > 0 else math.inf) + g.mean_down
            total += 1 + (length / cycle if cycle > 0 and math.isfinite(cycle) else 0.0)
        turns = sum(length / g.size.request_every for g in spec.grids if g.size is not None)  # the overlay's
        return total + turns, ("each grid's mean up period (of its unreliable hosts, if it has some) plus mean_down"
                               + (", and the overlay's turns at the grids with start_hosts (one per request_every)"
                                  if turns else ""))

    def shortest_cycle(self, spec: GridsAvailability, experiment: Experiment) -> float:
        cycles = [min(g.mean_up, g.unreliable_mean_up if g.unreliable > 0 else math.inf) + g.mean_down
                  for g in spec.grids]
        return min(cycles)

    def longest_down(self, spec: GridsAvailability, experiment: Experiment) -> float:
        return max(max(g.join, g.mean_down) for g in spec.grids)


def _plain(x: float) -> float | None:
    return None if math.isinf(x) else x


def _unplain(x: float | None) -> float:
    return math.inf if x is None else x


def _nonnegative(host: ConfigHost, value: Any, key: str) -> float:
    v = host.number(value, key)
    if not 0 <= v <= host.max_time:
        raise host.error(key, f"must be a number of time units in [0, {host.max_time:g}], got {v:g}")
    return v


def _grid(host: ConfigHost, entry: Mapping[str, Any], key: str, taken: list[str]) -> Grid:
    """One grid from its table: its preset's values, each key given overriding its own."""
    name = host.name(host.require(entry, key, "name"), f"{key}.name")  # (Host.Grid and Grid.Name in GridBot's ads)
    if name in taken:
        raise host.error(f"{key}.name", f"{name!r} names an earlier grid too")
    preset_name = host.string(host.require(entry, key, "preset"), f"{key}.preset")
    if preset_name not in PRESETS:
        raise host.error(f"{key}.preset", f"unknown preset {preset_name!r}; the presets are "
                                          f"{', '.join(repr(p) for p in PRESETS)}")
    grid = replace(PRESETS[preset_name], name=name)
    values: dict[str, Any] = {}
    for k in ("join", "mean_down", "return_delay"):
        if k in entry:
            values[k] = _nonnegative(host, entry[k], f"{key}.{k}")
    for k in ("mean_up", "unreliable_mean_up"):
        if k in entry:
            if entry[k] == "inf" or entry[k] == math.inf:  # (never: the string, or TOML's own inf, a float)
                values[k] = math.inf
            else:
                values[k] = host.bounded(entry[k], f"{key}.{k}", 0.0, host.max_time, 'time units (or "inf": never)')
    if "unreliable" in entry:
        u = host.number(entry["unreliable"], f"{key}.unreliable")
        if not 0 <= u <= 1:
            raise host.error(f"{key}.unreliable", f"must be a share of the grid's hosts in [0, 1], got {u:g}")
        values["unreliable"] = u
    if "speed" in entry:
        raw = entry["speed"]
        if not isinstance(raw, list) or len(raw) != 2:
            raise host.error(f"{key}.speed", f"must be [low, high], CPU shares in (0, 1], got {host.describe(raw)}")
        low, high = (host.number(v, f"{key}.speed[{i}]") for i, v in enumerate(raw))
        if not 0 < low <= high <= 1:
            raise host.error(f"{key}.speed", f"must be [low, high] with 0 < low <= high <= 1, got [{low:g}, {high:g}]")
        values["speed"] = (low, high)
    values["size"] = parse_size(host, entry, key)
    grid = replace(grid, **values)
    if not math.isinf(grid.mean_up) and grid.mean_down <= 0:
        raise host.error(f"{key}.mean_down", "must be > 0 for a grid whose hosts go down (mean_up is finite)")
    return grid


def parse_size(host: ConfigHost, entry: Mapping[str, Any], key: str) -> GridSize | None:
    """The grid's size parameters from its table (None: the grid keeps its hosts, as before); errors name the key."""
    if "start_hosts" not in entry:
        for k in SIZE_KEYS[1:]:
            if k in entry:
                raise host.error(f"{key}.{k}", "needs start_hosts in the same grid (the overlay drives a grid's size "
                                               "only when it starts with a given number of hosts)")
        return None
    start = _count(host, entry["start_hosts"], f"{key}.start_hosts", 0)
    most: int | None = None
    if "max_hosts" in entry:
        most = _count(host, entry["max_hosts"], f"{key}.max_hosts", 1)
        if most < start:
            raise host.error(f"{key}.max_hosts", f"must be at least start_hosts ({start}), got {most}")
    every = DEFAULT_REQUEST_EVERY
    if "request_every" in entry:
        every = host.bounded(entry["request_every"], f"{key}.request_every", 0.0, host.max_time,
                             "time units between two requests for a host")
    idle = DEFAULT_IDLE_LEAVE
    if "idle_leave" in entry:
        idle = host.bounded(entry["idle_leave"], f"{key}.idle_leave", 0.0, host.max_time,
                            "time units a host's client holds no job before it leaves")
    return GridSize(start, most, every, idle)


def _count(host: ConfigHost, value: Any, key: str, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= 1_000_000:
        raise host.error(key, f"must be a whole number of hosts in [{least}, 1000000], got {host.describe(value)}")
    return value


KIND = GridsKind()
