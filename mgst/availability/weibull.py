"""Weibull up periods and truncated-Normal down periods per machine group (Anglano & Canonico, Table II)."""

from __future__ import annotations

import math

from mgst.model import WeibullGroup, WeibullNormalFailures
from mgst.streams import Purpose, generator

# The Weibull shape of every group when the file gives none. Anglano & Canonico (seed 000,
# Table II) print only MTTFs and cite Nurmi, Brevik & Wolski, "Modeling machine availability
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
