"""Whether a simulation's response times grow through its counted window, from each replication's batches: the
allocation LP's overload check says whether any policy could keep up with the workload; this, whether the policy
simulated did (FCFS on a grid the LP loads at 67 % can fall behind for good, its means growing with the horizon)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from mgst.intervals import BATCHES
from mgst.results import ReplicationResult

WINDOWS = BATCHES  # windows of equal model time a run's counted window is cut into, by submission
EDGE = 3  # windows compared at each end of the counted window: the first EDGE against the last EDGE
GROWTH_RATIO = 1.5  # the last windows' mean response at least this many times the first windows'...
GROWTH_P = 0.001  # ...and a growth this unlikely (one-sided) in a steady state


def _edges(counts: Sequence[Sequence[int]], sums: Sequence[Sequence[float]]) -> tuple[float, float] | None:
    """The mean response in the first EDGE windows and in the last EDGE (None: a side without jobs), from the
    counted jobs' counts and response sums per class and window."""
    first = range(EDGE)
    last = range(BATCHES - EDGE, BATCHES)
    n_first = sum(c[k] for c in counts for k in first)
    n_last = sum(c[k] for c in counts for k in last)
    s_first = sum(s[k] for s in sums for k in first)
    s_last = sum(s[k] for s in sums for k in last)
    if not n_first or not n_last or s_first <= 0.0 or s_last <= 0.0:
        return None
    return s_first / n_first, s_last / n_last


def _upper_t(df: int) -> float:
    """Student's t exceeded with probability GROWTH_P."""
    from scipy.special import stdtrit  # noqa: PLC0415  (imported at first use, as mgst.intervals does)

    return float(stdtrit(df, 1.0 - GROWTH_P))


def _t(values: Sequence[float]) -> float:
    """The one-sample t statistic of ``values``' mean against 0 (infinite for equal positive values)."""
    mean = statistics.fmean(values)
    sd = statistics.stdev(values)
    if sd == 0.0:
        return math.inf if mean > 0 else 0.0
    return mean / (sd / math.sqrt(len(values)))


def windows_growth_warning(counts: Sequence[Sequence[int]], sums: Sequence[Sequence[float]]) -> str | None:
    """A sentence when one run's windows (BATCHES of equal model time, by submission; per class, the counted jobs and
    the sum of their response times) have a mean response in the last EDGE GROWTH_RATIO times or more the first
    EDGE's, and their log means rise with the window's index beyond chance (the slope of a least-squares line, by
    its t); None otherwise, or with fewer than 5 windows holding jobs."""
    points = []
    for k in range(BATCHES):
        n = sum(c[k] for c in counts)
        s = sum(x[k] for x in sums)
        if n and s > 0.0:
            points.append((float(k), math.log(s / n)))
    edges = _edges(counts, sums)
    if edges is None or len(points) < 5 or edges[1] / edges[0] < GROWTH_RATIO:
        return None
    mx, my = statistics.fmean(p[0] for p in points), statistics.fmean(p[1] for p in points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    residual = sum((y - my - slope * (x - mx)) ** 2 for x, y in points) / (len(points) - 2)
    t = math.inf if residual == 0.0 else slope / math.sqrt(residual / sxx)
    if slope <= 0 or t <= _upper_t(len(points) - 2):
        return None
    return (f"response times grow through the run under this policy (the last {EDGE} of {BATCHES} windows' mean "
            f"{edges[1] / edges[0]:.3g} times the first {EDGE}'s, rising window by window)")


def growth_warning(results: Sequence[ReplicationResult]) -> str | None:
    """A sentence when the mean response of the counted window's last EDGE windows (of BATCHES, by submission
    time) is GROWTH_RATIO times or more its first EDGE windows', beyond chance: across replications, by a one-sided
    t-test of the log ratio; in one replication, by the rise of its windows' log means. None otherwise, or where the
    replications kept no batches."""
    if not results or any(r.batches is None for r in results):
        return None
    if len(results) == 1:
        assert results[0].batches is not None
        return windows_growth_warning(*results[0].batches)
    edges = [e for r in results if r.batches is not None and (e := _edges(*r.batches)) is not None]
    if len(edges) < 3:
        return None
    logs = [math.log(late / early) for early, late in edges]
    ratio = math.exp(statistics.fmean(logs))
    if ratio < GROWTH_RATIO or _t(logs) <= _upper_t(len(logs) - 1):
        return None
    grew = sum(1 for x in logs if x > 0)
    return (f"response times grow through the run under this policy (the last {EDGE} of {BATCHES} windows' mean "
            f"{ratio:.3g} times the first {EDGE}'s, in a replication's geometric mean; larger in {grew} of "
            f"{len(logs)} replications)")


__all__ = ["EDGE", "WINDOWS", "GROWTH_P", "GROWTH_RATIO", "growth_warning", "windows_growth_warning"]
