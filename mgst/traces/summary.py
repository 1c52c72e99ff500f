"""A trace's summary: its hosts, availability per hour of day, up and down durations, and the failure rate of a task
started at random business-hours instants on an up host (with 95 % Wilson intervals)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mgst.availability.process import State
from mgst.availability.trace_files import Interval
from mgst.traces.calendar import DAY, business_starts, is_weekday
from mgst.traces.platform import Platform

HOUR = 3600.0
MINUTE = 60.0
Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile: two-sided 95 % intervals
QUANTILES = (0.1, 0.5, 0.9, 0.99)
DEFAULT_TASK_MINUTES = (5.0, 15.0, 35.0)  # the slides' calibration task sizes (dedicated 1.5 GHz host)
DEFAULT_STARTS = 200_000  # task starts drawn per summary (on up hosts: about 80 % of draws are)
# What a summary goes through, checked before it starts: per_hour walks every hour of every host (some 3 s per
# 100,000,000 host-hours), business_windows every day of the trace.
MAX_SPAN_DAYS = 36_525  # 100 years
MAX_HOST_HOURS = 500_000_000  # e.g. 10,000 hosts over 5.7 years


class TooLargeToSummarise(ValueError):
    """A trace whose span, or hosts times hours, is beyond what a summary goes through (or spans no time)."""


@dataclass(frozen=True)
class HostArrays:
    """One host's trace as arrays: its merged DOWN periods, and its non-DOWN periods' lost share (1 - share)."""

    down_start: np.ndarray
    down_end: np.ndarray
    lost_start: np.ndarray  # intervals where grid work gets less than the whole CPU (RECLAIMED or UP < 1)
    lost_end: np.ndarray
    lost: np.ndarray  # 1 - share there


def _merged(items: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    starts: list[float] = []
    ends: list[float] = []
    for s, e in items:
        if ends and ends[-1] == s:
            ends[-1] = e
        else:
            starts.append(s)
            ends.append(e)
    return np.array(starts, dtype=float), np.array(ends, dtype=float)


def host_arrays(intervals: Sequence[Interval]) -> HostArrays:
    """A host's intervals as arrays (where the trace says nothing, the host is UP at share 1; an UP interval without
    a share has the machine's own, 1 here, a RECLAIMED one 0)."""
    down_start, down_end = _merged([(iv.start, iv.end) for iv in intervals if iv.state is State.DOWN])
    lossy = [(iv.start, iv.end, 1.0 - (iv.share if iv.share is not None else (1.0 if iv.state is State.UP else 0.0)))
             for iv in intervals if iv.state is not State.DOWN]
    lossy = [x for x in lossy if x[2] > 0]
    return HostArrays(down_start, down_end, np.array([x[0] for x in lossy], dtype=float),
                      np.array([x[1] for x in lossy], dtype=float), np.array([x[2] for x in lossy], dtype=float))


def _cumulative(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The integral over [0, t) of the weighted indicator of disjoint sorted intervals, at each t of ``at``."""
    if starts.size == 0:
        return np.zeros_like(at)
    xs = np.column_stack([starts, ends]).ravel()
    steps = np.column_stack([np.zeros_like(starts), weights * (ends - starts)]).ravel()
    return np.interp(at, xs, np.cumsum(steps), left=0.0)


def per_hour(arrays: Sequence[HostArrays], span: float) -> dict[str, list[float | None]]:
    """Per hour of day (0-23), over weekdays and over weekend days: the fraction of hosts up, and the mean CPU share
    grid work gets on an up host (None where the trace has no such hour)."""
    edges = np.arange(0.0, math.floor(span / HOUR) * HOUR + HOUR / 2, HOUR)
    up = np.zeros(len(edges) - 1)
    share = np.zeros(len(edges) - 1)
    for a in arrays:
        down = np.diff(_cumulative(a.down_start, a.down_end, np.ones_like(a.down_start), edges))
        lost = np.diff(_cumulative(a.lost_start, a.lost_end, a.lost, edges))
        up += HOUR - down
        share += HOUR - down - lost
    out: dict[str, list[float | None]] = {}
    hour_of_day = np.arange(len(up)) % 24
    weekday = np.array([is_weekday(int(k // 24)) for k in range(len(up))], dtype=bool)
    for name, days in (("weekday", weekday), ("weekend", ~weekday)):
        fraction: list[float | None] = []
        mean_share: list[float | None] = []
        for h in range(24):
            sel = days & (hour_of_day == h)
            total = sel.sum() * HOUR * len(arrays)
            u = float(up[sel].sum())
            fraction.append(round(float(u / total), 4) if total > 0 else None)
            mean_share.append(round(float(share[sel].sum()) / u, 4) if u > 0 else None)
        out[f"{name}_up_fraction"] = fraction
        out[f"{name}_cpu_share"] = mean_share
    return out


def duration_samples(arrays: Sequence[HostArrays], span: float) -> dict[str, np.ndarray]:
    """Every up and every down duration (minutes); periods cut by the trace's start or end (censored) left out."""
    ups: list[np.ndarray] = [np.empty(0)]
    downs: list[np.ndarray] = [np.empty(0)]
    for a in arrays:
        inner = (a.down_start > 0) & (a.down_end < span)
        downs.append((a.down_end - a.down_start)[inner])
        ups.append(a.down_start[1:] - a.down_end[:-1])  # up periods between two downs (never censored)
    return {"up": np.concatenate(ups) / MINUTE, "down": np.concatenate(downs) / MINUTE}


def durations(samples: dict[str, np.ndarray]) -> dict[str, dict[str, float | int | None]]:
    """Up and down durations (minutes): count, mean, quantiles."""
    out = {}
    for name, x in samples.items():
        row: dict[str, float | int | None] = {"count": int(x.size),
                                              "mean_min": round(float(x.mean()), 3) if x.size else None}
        for q in QUANTILES:
            row[f"q{round(q * 100)}_min"] = round(float(np.quantile(x, q)), 3) if x.size else None
        out[name] = row
    return out


def wilson(failures: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion."""
    if n == 0:
        return (0.0, 1.0)
    p = failures / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def failure_rates(arrays: Sequence[HostArrays], span: float, task_minutes: Sequence[float], *,
                  starts: int = DEFAULT_STARTS, seed: int = 1) -> list[dict[str, float | int]]:
    """Per task length d (minutes of dedicated wall time: a 1.5 GHz host at share 1), the fraction of tasks that
    fail, started at ``starts`` uniform business-hours instants (at least the longest d before the trace's end) on
    a uniform host, those on a down host left out: a task fails when its host goes DOWN within d. With 95 % Wilson
    intervals (binomial: they leave out the variation between traces, which starts on one host-day share)."""
    if not arrays:
        raise ValueError("no hosts")
    longest = max(task_minutes) * MINUTE
    times = np.array(business_starts(span, starts, seed, margin=longest))
    hosts = np.random.default_rng([seed, 1]).integers(len(arrays), size=times.size)
    lengths = np.array(task_minutes, dtype=float) * MINUTE
    fails = np.zeros(len(lengths), dtype=np.int64)
    n = 0
    # The starts grouped by host, each group in drawing order (a stable sort): one pass, where a mask per host
    # cost hosts x starts (a million hosts took for ever).
    order = np.argsort(hosts, kind="stable")
    bounds = np.searchsorted(hosts[order], np.arange(len(arrays) + 1))
    for k, a in enumerate(arrays):
        lo, hi = int(bounds[k]), int(bounds[k + 1])
        if lo == hi:
            continue
        t = times[order[lo:hi]]
        i = np.searchsorted(a.down_start, t, side="right")  # the downs starting at or before t
        previous_end = np.concatenate([[-np.inf], a.down_end])[i]  # (of the last of them)
        t, i = t[previous_end <= t], i[previous_end <= t]  # on an up host
        n += t.size
        remaining = np.append(a.down_start, np.inf)[i] - t  # until the next down
        fails += (remaining[:, None] < lengths[None, :]).sum(axis=0)
    out = []
    for d, f in zip(task_minutes, fails.tolist()):
        low, high = wilson(f, n)
        out.append({"task_minutes": d, "starts": n, "failures": f, "rate": f / n if n else math.nan,
                    "low": low, "high": high})
    return out


def clock_summary(clock_ghz: dict[str, float]) -> dict[str, float] | None:
    if not clock_ghz:
        return None
    c = np.array(list(clock_ghz.values()))
    return {"mean": round(float(c.mean()), 4), "sd": round(float(c.std()), 4), "min": float(c.min()),
            "p10": float(np.quantile(c, 0.1)), "median": float(np.median(c)), "p90": float(np.quantile(c, 0.9)),
            "max": float(c.max())}


def check_size(platform: Platform) -> None:
    """TooLargeToSummarise if the platform spans no time, more than MAX_SPAN_DAYS, or more than MAX_HOST_HOURS
    host-hours."""
    if not platform.span > 0:  # (every interval at or before time 0: nothing to summarise)
        raise TooLargeToSummarise(f"the trace spans no time (it ends at {platform.span:g} s): its times count from "
                                  "its start, at 0")
    days = platform.span / DAY
    if not days <= MAX_SPAN_DAYS:
        raise TooLargeToSummarise(f"the trace spans {days:.4g} days; a summary covers at most {MAX_SPAN_DAYS:,} days "
                                  "(100 years)")
    host_hours = len(platform.intervals) * platform.span / HOUR
    if host_hours > MAX_HOST_HOURS:
        raise TooLargeToSummarise(f"{len(platform.intervals):,} hosts over {platform.span / HOUR:,.0f} hours are "
                                  f"{host_hours:.3g} host-hours; a summary goes through at most {MAX_HOST_HOURS:,}: "
                                  "summarise part of the trace")


def summarise(platform: Platform, task_minutes: Sequence[float] = DEFAULT_TASK_MINUTES, *,
              starts: int = DEFAULT_STARTS, seed: int = 1) -> dict:
    """The whole summary, as plain JSON-able values; TooLargeToSummarise (check_size) before any work, NoBusinessHours
    if no task start fits before the trace's end."""
    check_size(platform)
    arrays = [host_arrays(items) for items in platform.intervals.values()]
    return {"name": platform.name, "hosts": len(platform.intervals), "span_days": round(platform.span / DAY, 4),
            "clock_ghz": clock_summary(platform.clock_ghz) if platform.clock_ghz else None,
            "per_hour": per_hour(arrays, platform.span),
            "durations": durations(duration_samples(arrays, platform.span)),
            "failure_rates": failure_rates(arrays, platform.span, task_minutes, starts=starts, seed=seed),
            "failure_rates_note": "tasks of d minutes of dedicated wall time (1.5 GHz, share 1) started at uniform "
                                  "weekday 09:00-17:00 instants on a uniform up host; 95 % Wilson intervals"}


__all__ = ["DEFAULT_TASK_MINUTES", "MAX_SPAN_DAYS", "HostArrays", "TooLargeToSummarise", "check_size",
           "duration_samples", "durations", "failure_rates", "host_arrays", "per_hour", "summarise", "wilson"]
