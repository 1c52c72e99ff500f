"""Kondo et al.'s exclusion by a fixed clock-rate threshold: EXCL-S{x}."""

from __future__ import annotations

import dataclasses
import math
import statistics

from mgst.core.state import BagRecord, MachineRecord
from mgst.core.view import View
from mgst.papers.kondo.base import KondoPolicy, fastest_first, power
from mgst.policies import register
from mgst.policies.base import PolicyOptions


@dataclasses.dataclass(frozen=True)
class ExclSOptions(PolicyOptions):
    # x of EXCL-S{x}: hosts more than x standard deviations below the mean clock rate are excluded.
    # The slides try 1.5, 1, 0.5 and 0.25; EXCL-S.5 is the one their conclusions name.
    sd: float = 0.5
    # The order in which the hosts kept get tasks: "fastest" (the fastest ready host first, as PRI-CR: the slides
    # build exclusion on prioritisation, "Prioritization resulting in exclusion can improve performance") or
    # "ready" (ready-queue order, as FCFS: exclusion alone). docs/readings.md, "EXCL-S{x}".
    kept_order: str = "fastest"

    def validate(self) -> None:
        if not (self.sd >= 0.0 and math.isfinite(self.sd)):
            raise ValueError(f"sd: must be a number >= 0, got {self.sd}")
        if self.kept_order not in KEPT_ORDERS:
            raise ValueError(f"kept_order: must be one of {', '.join(KEPT_ORDERS)}, got {self.kept_order!r}")


KEPT_ORDERS = ("fastest", "ready")


def clock_threshold(powers: list[float], sd: float) -> float:
    """mean - sd x (population standard deviation) of the hosts' clock rates; never above the fastest host's (for
    sd >= 0 it cannot be, but a sum in floating point can: seven hosts of 0.9 summed to a mean of 0.9000000000000001,
    which excluded all seven and stalled the run)."""
    mean = statistics.fmean(powers)
    spread = statistics.pstdev(powers, mean)
    return min(mean - sd * spread, max(powers))


class ExclS(KondoPolicy):
    """EXCL-S{sd}: hosts whose clock rate is more than ``sd`` standard deviations below the platform's mean (over
    every host of the platform, population sd) never get a task; the others get them fastest first (PRI-CR), or
    with ``kept_order = "ready"`` in ready-queue order (FCFS)."""

    name = "excl_s"
    Options = ExclSOptions
    options: ExclSOptions

    def __init__(self, options: ExclSOptions | None = None, rng=None):
        super().__init__(options, rng)
        self.threshold: float | None = None  # set at the first decision: the platform does not change
        self.excluded = 0  # hosts below it

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        if self.threshold is None:
            self.threshold = clock_threshold([power(m) for m in view.machines], self.options.sd)
            self.excluded = sum(1 for m in view.machines if power(m) < self.threshold)
        threshold = self.threshold
        kept = [m for m in hosts if power(m) >= threshold]
        return fastest_first(kept) if self.options.kept_order == "fastest" else kept

    def report(self) -> dict[str, float]:
        return {"excluded_hosts": self.excluded}


register(ExclS)
