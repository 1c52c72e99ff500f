"""Means with Student-t confidence intervals: across independent replications, or by batch means within one run."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def _t_quantile(df: int, p: float) -> float:
    """Student-t quantile, from scipy.special (what scipy.stats.t.ppf calls; scipy.stats takes about
    0.9 s to import, which every sweep worker paid). Imported at first use: scipy.special takes 0.1 s
    more, which `mgst simulate` of one replication (no interval) paid for nothing."""
    from scipy.special import stdtrit  # noqa: PLC0415

    return float(stdtrit(df, p))


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
    half = float(_t_quantile(n - 1, 0.5 + confidence / 2)) * statistics.stdev(values) / math.sqrt(n)
    return (mean, mean - half, mean + half)


def batch_means_ci(values: Sequence[float], batches: int, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of one run's ``values`` (in order) by the method of batch means.

    ``values`` are split, in order, into ``batches`` consecutive batches whose sizes
    differ by at most one and that cover every value (with fewer values than batches,
    one value per batch). The point estimate is the mean of all values; the interval
    is centred on it, with half-width t(k - 1) * stdev(batch means) / sqrt(k) over the
    k batches, so it always contains the estimate. With fewer than two values the
    interval is (nan, nan).
    """
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    mean = statistics.fmean(values)
    k = min(batches, n)
    if k < 2:
        return (mean, math.nan, math.nan)
    means = [statistics.fmean(values[b * n // k:(b + 1) * n // k]) for b in range(k)]
    half = float(_t_quantile(k - 1, 0.5 + confidence / 2)) * statistics.stdev(means) / math.sqrt(k)
    return (mean, mean - half, mean + half)
