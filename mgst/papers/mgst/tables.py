"""The MGST paper's published results (Tables 2, 4, 6, 8), to set mgst's figures beside.

Values are typed from the paper (Kokaly, Al-Azzoni & Down, "MGST: A Framework for Performance
Evaluation of Desktop Grids", IPDPS 2009; docs/readings.md): per
setting, the simulation column's 95 % intervals for classes 1-4 and overall, and
the MGST testbed column's single values.
"""

from __future__ import annotations

from dataclasses import dataclass

Interval = tuple[float, float]


@dataclass(frozen=True, slots=True)
class PaperResult:
    table: int
    simulation: tuple[Interval, ...]  # classes 1..4, then overall
    testbed: tuple[float, ...]  # classes 1..4, then overall
    note: str = ""


PAPER: dict[str, PaperResult] = {
    "hihi-mfd-fd": PaperResult(2, ((0.56, 0.57), (0.33, 0.34), (0.18, 0.18), (0.11, 0.11), (0.20, 0.21)),
                               (0.58, 0.34, 0.22, 0.17, 0.24)),
    "hihi-mpd-fd": PaperResult(2, ((0.97, 0.98), (0.22, 0.22), (0.27, 0.27), (0.16, 0.16), (0.27, 0.27)),
                               (0.99, 0.37, 0.29, 0.43, 0.42)),
    "hihi-mfd-fe": PaperResult(2, ((0.61, 0.61), (0.35, 0.35), (0.19, 0.20), (0.13, 0.13), (0.23, 0.23)),
                               (0.61, 0.45, 0.20, 0.15, 0.25)),
    "hihi-mpd-fe": PaperResult(2, ((1.10, 1.11), (1.10, 1.11), (0.32, 0.32), (0.26, 0.27), (0.35, 0.36)),
                               (1.03, 0.50, 0.46, 1.36, 0.94),
                               "class 2's interval repeats class 1's: almost certainly a copy error"),
    "lohi-mfd-fd": PaperResult(4, ((0.22, 0.22), (0.12, 0.12), (0.30, 0.30), (0.29, 0.29), (0.22, 0.22)),
                               (0.31, 0.22, 0.37, 0.35, 0.31)),
    "lohi-mpd-fd": PaperResult(4, ((0.24, 0.24), (0.13, 0.13), (0.37, 0.37), (0.35, 0.35), (0.26, 0.27)),
                               (0.36, 0.26, 0.44, 0.47, 0.37)),
    "hilo-mfd-fd": PaperResult(6, ((0.49, 0.49), (0.28, 0.28), (0.24, 0.24), (0.14, 0.14), (0.25, 0.25)),
                               (0.50, 0.31, 0.32, 0.35, 0.35)),
    "hilo-mpd-fd": PaperResult(6, ((0.79, 0.80), (0.42, 0.42), (0.27, 0.27), (0.19, 0.19), (0.35, 0.35)),
                               (1.22, 0.77, 0.53, 0.73, 0.74)),
    "lolo-mfd-fd": PaperResult(8, ((0.25, 0.25), (0.23, 0.23), (0.23, 0.23), (0.21, 0.22), (0.23, 0.23)),
                               (0.27, 0.28, 0.28, 0.25, 0.27)),
    "lolo-mpd-fd": PaperResult(8, ((0.28, 0.28), (0.30, 0.30), (0.27, 0.27), (0.32, 0.32), (0.30, 0.30)),
                               (0.39, 0.39, 0.35, 0.36, 0.37),
                               "the paper's MPD availabilities for LoLo are in doubt (0.5 printed twice)"),
    "lolo-mfd-fe": PaperResult(8, ((0.25, 0.25), (0.24, 0.24), (0.24, 0.24), (0.24, 0.24), (0.24, 0.24)),
                               (0.35, 0.34, 0.33, 0.29, 0.33)),
    "lolo-mpd-fe": PaperResult(8, ((0.31, 0.31), (0.32, 0.32), (0.32, 0.32), (0.34, 0.34), (0.32, 0.32)),
                               (0.52, 0.63, 0.57, 0.52, 0.56),
                               "the paper's MPD availabilities for LoLo are in doubt (0.5 printed twice)"),
}

# The acceptance rule: inside the printed interval, or within this fraction of its midpoint.
# The paper prints two decimals, so an interval like (0.18, 0.18) is itself +-0.005 wide.
TOLERANCE = 0.05


def agrees(value: float, interval: Interval, tolerance: float = TOLERANCE) -> bool:
    lo, hi = interval
    mid = (lo + hi) / 2
    return lo <= value <= hi or abs(value - mid) <= tolerance * mid


def deviation(value: float, interval: Interval) -> float:
    """Relative distance of ``value`` from the interval's midpoint."""
    mid = sum(interval) / 2
    return (value - mid) / mid
