"""Means of positive quantities with 95 % intervals that stay positive: across replications, or by batch means."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from mgst.student_t import T975
from mgst.student_t import P as T975_LEVEL

# How an interval was made (docs/sweeps.md, "Intervals"). Every quantity summarised here (response
# times, AVT, makespan, waiting, RWT) is >= 0, so an interval must not reach below 0:
STUDENT_T = "student-t"  # mean +- t(n-1) s / sqrt(n), kept whenever its lower bound is >= 0
LOG_SCALE = "log-scale"  # m exp(+-t(n-1) s / (m sqrt(n))): the delta method on log(mean), always > 0
# the Student-t interval reaches below 0 and there are fewer than MIN_LOG_SCALE values: "too few replications"
# (or "too few batches", for batch means)
TOO_FEW = "too few"
NO_INTERVAL = "none"  # fewer than 2 values (or a mean of 0 with spread): nothing to say about variability
# Values (replications, or batches) needed before a log-scale interval is given. With 2, t(1) = 12.7 and
# the interval m exp(+-12.7 s / (m sqrt 2)) spans orders of magnitude (AVT 5,595 s and 12,594 s: 68 s to
# 1.2 million s): it says nothing that the two values do not, so "too few replications" is said instead.
# From 3 on, t(n - 1) <= 4.3 (a third of t(1)) and the interval narrows as 1/sqrt(n) with each value added.
MIN_LOG_SCALE = 3
# Batch means of one run: how many batches (a testbed run's of its jobs, a simulation's of windows of model time)
BATCHES = 10


class Interval(tuple[float, float, float]):
    """(mean, low, high): a mean and its interval ((nan, nan) where there is none), unpacked as three values;
    ``method`` says how the interval was made."""

    method: str

    def __new__(cls, mean: float, low: float, high: float, method: str) -> Interval:
        self = super().__new__(cls, (mean, low, high))
        self.method = method
        return self

    @property
    def mean(self) -> float:
        return self[0]

    @property
    def low(self) -> float:
        return self[1]

    @property
    def high(self) -> float:
        return self[2]


def _t_quantile(df: int, p: float) -> float:
    """Student-t quantile: for a 95 % interval of up to 101 values, from mgst.student_t's table (scipy's own
    values); else from scipy.special (what scipy.stats.t.ppf calls; scipy.stats takes about 0.9 s to import,
    which every sweep worker paid), imported at first use (0.24 s)."""
    if p == T975_LEVEL and 1 <= df <= len(T975):
        return T975[df - 1]
    from scipy.special import stdtrit  # noqa: PLC0415

    return float(stdtrit(df, p))


def positive_interval(mean: float, sample: Sequence[float], confidence: float, what: str = "replications"
                      ) -> Interval:
    """The interval of ``mean`` from ``sample`` (values whose mean is ``mean``: replications, or batch means),
    for a quantity that cannot be negative: Student-t when its lower bound is >= 0; else the log-scale
    interval from 3 values on (MIN_LOG_SCALE); else no interval, said so (TOO_FEW)."""
    k = len(sample)
    if k < 2:
        return Interval(mean, math.nan, math.nan, NO_INTERVAL)
    t = _t_quantile(k - 1, 0.5 + confidence / 2)
    s = statistics.stdev(sample)
    half = t * s / math.sqrt(k)
    if mean - half >= 0:
        return Interval(mean, mean - half, mean + half, STUDENT_T)
    if k < MIN_LOG_SCALE:
        return Interval(mean, math.nan, math.nan, f"{TOO_FEW} {what}")
    if mean <= 0:  # a spread around a mean of 0 has no log scale (a negative value: not a positive quantity)
        return Interval(mean, math.nan, math.nan, NO_INTERVAL)
    factor = math.exp(t * s / (mean * math.sqrt(k)))
    # (a mean among the subnormal floats, near 5e-324, divides to 0: the low bound stays the least positive float)
    return Interval(mean, max(mean / factor, math.ulp(0.0)), mean * factor, LOG_SCALE)


def mean_ci(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """The mean of ``values`` (independent replications of a quantity >= 0) and its interval
    (:func:`positive_interval`). With fewer than two values the interval is (nan, nan): one replication
    says nothing about its own variability."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, NO_INTERVAL)
    return positive_interval(statistics.fmean(values), values, confidence)


def batch_means_ci(values: Sequence[float], batches: int, confidence: float = 0.95) -> Interval:
    """The mean of one run's ``values`` (in order, each >= 0) and its interval by the method of batch means.

    ``values`` are split, in order, into ``batches`` consecutive batches whose sizes
    differ by at most one and that cover every value (with fewer values than batches,
    one value per batch). The point estimate is the mean of all values; the interval
    is centred on it, with half-width t(k - 1) * stdev(batch means) / sqrt(k) over the
    k batches, so it always contains the estimate; where that reaches below 0, the
    log-scale interval over the batch means (:func:`positive_interval`). With fewer
    than two values the interval is (nan, nan).
    """
    n = len(values)
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, NO_INTERVAL)
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    mean = statistics.fmean(values)
    k = min(batches, n)
    means = [statistics.fmean(values[b * n // k:(b + 1) * n // k]) for b in range(k)]
    return positive_interval(mean, means, confidence, "batches")


def method_note(method: str) -> str:
    """What a table prints after an interval made otherwise than by Student-t ("" for Student-t or none)."""
    if method == LOG_SCALE:
        return " [log-scale]"
    return f" ({method})" if method.startswith(TOO_FEW) else ""


def interval_label(made_of: str, method: str) -> str:
    """How one figure's interval was made, for a CSV cell: what it is made of ("replications", "batch means"), and
    its kind where it is not Student-t ("replications, log-scale"), or why there is none ("too few batches",
    "none")."""
    if method == STUDENT_T:
        return made_of
    if method == LOG_SCALE:
        return f"{made_of}, {LOG_SCALE}"
    return method


def is_default(method: str) -> bool:
    """Whether an interval needs no word on how it was made (Student-t, or no interval at all): JSON then
    carries no ``interval_method``, as before positive intervals existed."""
    return method in (STUDENT_T, NO_INTERVAL)


def interval_places(mean: float, low: float, high: float, places: int = 3) -> int:
    """The decimal places to print an interval with (its mean with one more): ``places``, or as many more as it
    takes for the printed mean to lie within the printed interval and a real interval not to print as one point
    (with times of a ten-thousandth of a unit, 0.0007 printed beside (0.001, 0.001))."""
    for p in range(places, 13):
        lo, hi, m = round(low, p), round(high, p), round(mean, p + 1)
        if lo <= m <= hi and (lo < hi or not low < high):
            return p
    return 12
