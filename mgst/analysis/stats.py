"""Means with Student-t confidence intervals across independent replications."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from scipy import stats as _scipy_stats


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` with a two-sided Student-t interval.

    With fewer than two values the interval is (nan, nan): one replication says
    nothing about its own variability.
    """
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = statistics.fmean(values)
    if n < 2:
        return (mean, math.nan, math.nan)
    half = float(_scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * statistics.stdev(values) / math.sqrt(n)
    return (mean, mean - half, mean + half)
