"""Weibull up periods and truncated-Normal down periods per machine group (Anglano & Canonico, Table II)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from mgst.availability.kind import (
    WIRE_REPLICATION,
    AvailabilityKind,
    ConfigHost,
    UpDownProcess,
    group_of,
    numeric_law_problem,
    up_fraction_note,
)
from mgst.availability.process import AvailabilityProcess
from mgst.model import Experiment, WeibullGroup, WeibullNormalFailures
from mgst.streams import Purpose, generator

# The Weibull shape of every group when the file gives none. Anglano & Canonico
# (Table II) print only MTTFs and cite Nurmi, Brevik & Wolski, "Modeling machine availability
# in enterprise and wide-area distributed computing environments" (Euro-Par 2005, pp. 432-441,
# doi:10.1007/11549468_50) for them. We could not read that paper's fitted shapes (see
# docs/models.md), so 0.5 is a documented assumption, not a published value: a decreasing
# hazard rate (shape < 1), as reported for grid resources. Override with [availability] shape.
DEFAULT_SHAPE = 0.5
MIN_SHAPE = 0.1  # below, Gamma(1 + 1/shape) overflows soon and one up period dwarfs the run
MAX_SHAPE = 100.0

# Table II, High-Avail MTTFs in seconds, groups 1..15 (as printed). Medium and Low are these
# x 0.03 and x 0.01 (the paper's text; its Medium and Low columns are these rounded).
ANGLANO_MTTF = (
    773119.0, 1044610.0, 997908.0, 816990.0, 330479.0, 1288810.0, 426508.0, 487921.0,
    779938.0, 997908.0, 600641.0, 331339.0, 315787.0, 319848.0, 407545.0,
)
# preset -> (MTTF factor, repair mean, repair standard deviation); Table II's repair "variance"
# values (300 s, 800 s) read as standard deviations (docs/models.md).
ANGLANO_PRESETS = {
    "anglano-high": (1.0, 1800.0, 300.0),
    "anglano-medium": (0.03, 5400.0, 800.0),
    "anglano-low": (0.01, 5400.0, 800.0),
}
MAX_GROUPS = 10_000
GROUP_KEYS = ("mttf", "shape", "repair_mean", "repair_sd")


def anglano_preset(name: str, shape: float = DEFAULT_SHAPE) -> WeibullNormalFailures:
    """The 15 groups of Table II at one availability level ("anglano-high", "-medium", "-low")."""
    factor, repair_mean, repair_sd = ANGLANO_PRESETS[name]
    return WeibullNormalFailures(
        tuple(WeibullGroup(m * factor, shape, repair_mean, repair_sd) for m in ANGLANO_MTTF)
    )


def weibull_scale(mttf: float, shape: float) -> float:
    """The scale giving mean ``mttf``: mttf / Gamma(1 + 1/shape)."""
    return mttf / math.gamma(1.0 + 1.0 / shape)


def mean_repair(group: WeibullGroup) -> float:
    """E[down period]: the mean of Normal(repair_mean, repair_sd) truncated to > 0."""
    mu, sd = group.repair_mean, group.repair_sd
    if sd == 0:
        return mu
    a = mu / sd
    pdf = math.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + math.erf(a / math.sqrt(2.0)))
    return mu + sd * pdf / cdf


class WeibullNormalUpDown:
    """Up- and down-period lengths of one machine of ``group``.

    Up periods are Weibull(shape, scale = mttf / Gamma(1 + 1/shape)) from stream FAILURES,
    down periods Normal(repair_mean, repair_sd) redrawn until positive from stream REPAIRS,
    both indexed by the machine: changing the repair law leaves the up periods unchanged.
    """

    __slots__ = ("_up_rng", "_down_rng", "_scale", "_group", "_ups", "_downs", "_batch")

    def __init__(self, group: WeibullGroup, seed: int, replication: int, machine: int, batch: int = 64):
        if not group.mttf > 0 or not MIN_SHAPE <= group.shape <= MAX_SHAPE:
            raise ValueError(f"need mttf > 0 and shape in [{MIN_SHAPE}, {MAX_SHAPE}], got {group!r}")
        if not group.repair_mean > 0 or not group.repair_sd >= 0:
            raise ValueError(f"need repair_mean > 0 and repair_sd >= 0, got {group!r}")
        self._up_rng = generator(seed, replication, Purpose.FAILURES, machine)
        self._down_rng = generator(seed, replication, Purpose.REPAIRS, machine)
        self._scale = weibull_scale(group.mttf, group.shape)
        self._group = group
        self._ups: list[float] = []
        self._downs: list[float] = []
        self._batch = batch

    def next_up(self) -> float:
        if not self._ups:
            draws = self._up_rng.weibull(self._group.shape, self._batch) * self._scale
            self._ups.extend(draws[::-1].tolist())
        return self._ups.pop()

    def next_down(self) -> float:
        while True:
            if not self._downs:
                g = self._group
                draws = self._down_rng.normal(g.repair_mean, g.repair_sd, self._batch)
                self._downs.extend(draws[::-1].tolist())
            d = self._downs.pop()
            if d > 0:  # truncation by redrawing: repair_mean > 0, so at least half the draws pass
                return d


class WeibullKind(AvailabilityKind):
    """``kind = "weibull"``: groups (or a preset) of mttf, shape, repair_mean, repair_sd; machine j follows
    the group its ``group`` attribute names.

    Wire: ``("weibull", mttf, shape, repair_mean, repair_sd, seed)``, the machine's group.
    """

    name = "weibull"
    spec_type = WeibullNormalFailures
    keys = ("kind", "preset", "groups", "shape", "repair_mean", "repair_sd")
    grouped = True

    # ---------------------------------------------------------------- experiment file and store

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str
                    ) -> tuple[WeibullNormalFailures, str]:
        shape = DEFAULT_SHAPE
        if "shape" in table:
            shape = _shape(host, table["shape"], f"{section}.shape")
        repair = {}
        for k in ("repair_mean", "repair_sd"):
            if k in table:
                repair[k] = _repair(host, table[k], f"{section}.{k}", k)
        if "preset" in table:
            preset = table["preset"]
            if not isinstance(preset, str) or preset not in ANGLANO_PRESETS:
                raise host.error(f"{section}.preset", f"must be one of {', '.join(map(repr, ANGLANO_PRESETS))}, "
                                                      f"got {host.describe(preset)}")
            if "groups" in table:
                raise host.error(f"{section}.groups", f"give {section}.preset or {section}.groups, not both")
            groups = anglano_preset(preset, shape).groups
            groups = tuple(WeibullGroup(g.mttf, g.shape, repair.get("repair_mean", g.repair_mean),
                                        repair.get("repair_sd", g.repair_sd)) for g in groups)
            return WeibullNormalFailures(groups), f"{section}.preset"
        key = f"{section}.groups"
        raw = host.nonempty_list(host.require(table, section, "groups"), key,
                                 "tables {mttf = ..., shape = ...} (one per machine group)")
        if len(raw) > MAX_GROUPS:
            raise host.error(key, f"has {len(raw)} groups; at most {MAX_GROUPS} are allowed")
        parsed = []
        for g, entry in enumerate(raw):
            gkey = f"{key}[{g}]"
            if not isinstance(entry, Mapping):
                raise host.error(gkey, f"must be a table {{mttf = ..., shape = ...}}, got {host.describe(entry)}")
            for k in entry:
                if k not in GROUP_KEYS:
                    raise host.error(f"{gkey}.{k}", f"unknown key{host.suggest(k, GROUP_KEYS)}")
            mttf = host.bounded(host.require(entry, gkey, "mttf"), f"{gkey}.mttf", 0.0, host.max_time, "time units")
            values = {}
            for k in ("repair_mean", "repair_sd"):
                if k in entry:
                    values[k] = _repair(host, entry[k], f"{gkey}.{k}", k)
                elif k in repair:
                    values[k] = repair[k]
                else:
                    raise host.error(f"{gkey}.{k}", f"missing (give it here or as {section}.{k})")
            gshape = _shape(host, entry["shape"], f"{gkey}.shape") if "shape" in entry else shape
            parsed.append(WeibullGroup(mttf, gshape, values["repair_mean"], values["repair_sd"]))
        return WeibullNormalFailures(tuple(parsed)), key

    def to_plain(self, spec: WeibullNormalFailures) -> Any:
        return {"kind": "weibull", "groups": [[g.mttf, g.shape, g.repair_mean, g.repair_sd] for g in spec.groups]}

    def from_plain(self, plain: Any) -> WeibullNormalFailures:
        return WeibullNormalFailures(tuple(WeibullGroup(*g) for g in plain["groups"]))

    def group_count(self, spec: WeibullNormalFailures) -> int:
        return len(spec.groups)

    # ---------------------------------------------------------------- simulation and wire

    def group(self, spec: WeibullNormalFailures, experiment: Experiment, machine: int) -> WeibullGroup:
        return spec.groups[group_of(experiment, machine, len(spec.groups))]

    def process(self, spec: WeibullNormalFailures, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        draws = WeibullNormalUpDown(self.group(spec, experiment, machine), seed, replication, machine)
        return UpDownProcess(draws, experiment.machines[machine].availability)

    def to_wire(self, spec: WeibullNormalFailures, experiment: Experiment, machine: int, seed: int,
                until: float, since: float = 0.0) -> tuple:
        g = self.group(spec, experiment, machine)
        return (self.name, g.mttf, g.shape, g.repair_mean, g.repair_sd, seed)

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        problem = numeric_law_problem(self.name, form,
                                      "a weibull failure model is (mttf, shape, repair_mean, repair_sd, seed)", 5)
        if problem is None and not (form[1] > 0 and form[2] > 0 and form[3] > 0 and form[4] >= 0):
            problem = ("weibull failure model: need mttf > 0, shape > 0, repair_mean > 0 and repair_sd >= 0, "
                       f"got {tuple(form[1:])!r:.80}")
        return problem

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        return (form[1], form[3], form[4])

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        problem = self.wire_problem(form)
        if problem is not None:
            raise ValueError(problem)
        group = WeibullGroup(*(float(x) for x in form[1:5]))
        draws = WeibullNormalUpDown(group, form[5], WIRE_REPLICATION, machine)  # (ValueError: a law it cannot draw)
        return UpDownProcess(draws, share)

    # ---------------------------------------------------------------- long-run figures

    def capacity(self, spec: WeibullNormalFailures, experiment: Experiment) -> tuple[list[float], str]:
        ups = [_up_fraction(self.group(spec, experiment, j)) for j in range(len(experiment.machines))]
        return ups, up_fraction_note(ups, "MTTF/(MTTF+MTTR)")

    def cycles(self, spec: WeibullNormalFailures, experiment: Experiment, length: float) -> tuple[float, str]:
        groups = (self.group(spec, experiment, j) for j in range(len(experiment.machines)))
        return sum(length / (g.mttf + g.repair_mean) for g in groups), "the groups' MTTF + repair_mean"

    def shortest_cycle(self, spec: WeibullNormalFailures, experiment: Experiment) -> float:
        return min(g.mttf + g.repair_mean for g in spec.groups)

    def longest_down(self, spec: WeibullNormalFailures, experiment: Experiment) -> float:
        return max(mean_repair(g) for g in spec.groups)


def _up_fraction(group: WeibullGroup) -> float:
    """E[up] / (E[up] + E[down]) (Anglano & Canonico's A_i, Eq. 3), E[down] the truncated Normal's mean."""
    return group.mttf / (group.mttf + mean_repair(group))


def _shape(host: ConfigHost, value: Any, key: str) -> float:
    return host.bounded(value, key, MIN_SHAPE, MAX_SHAPE, "(Weibull shape)")


def _repair(host: ConfigHost, value: Any, key: str, which: str) -> float:
    if which == "repair_sd":
        v = host.number(value, key)
        if not 0 <= v <= host.max_time:
            raise host.error(key, f"must be in [0, {host.max_time:g}] time units, got {v:g}")
        return v
    return host.bounded(value, key, 0.0, host.max_time, "time units")


KIND = WeibullKind()
