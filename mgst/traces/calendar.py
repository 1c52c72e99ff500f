"""The trace's calendar: trace second 0 is a Monday 00:00; business hours are weekdays 09:00-17:00."""

from __future__ import annotations

import math

import numpy as np

DAY = 86_400.0  # seconds
WEEK_DAYS = 7
WORK_DAYS = 5  # Monday to Friday: days 0-4 of each week (the trace starts on a Monday)
BUSINESS_OPEN = 9 * 3600.0  # 09:00, seconds into the day
BUSINESS_CLOSE = 17 * 3600.0  # 17:00


class NoBusinessHours(ValueError):
    """No weekday business-hours instant lies far enough before a trace's end (for the longest task asked)."""


def is_weekday(day: int) -> bool:
    """Day ``day`` (0 = the trace's first Monday) is Monday to Friday."""
    return day % WEEK_DAYS < WORK_DAYS


def is_business(t: float) -> bool:
    """Trace second ``t`` falls in weekday business hours, [09:00, 17:00)."""
    day, time_of_day = divmod(t, DAY)
    return day % WEEK_DAYS < WORK_DAYS and BUSINESS_OPEN <= time_of_day < BUSINESS_CLOSE


def next_opening(t: float) -> float:
    """The first weekday 09:00 strictly after trace second ``t``."""
    day = math.floor(t / DAY)
    while True:
        opening = day * DAY + BUSINESS_OPEN
        if is_weekday(day) and opening > t:
            return opening
        day += 1


def business_windows(span: float, *, margin: float = 0.0) -> list[tuple[float, float]]:
    """The weekday [09:00, 17:00) windows of [0, span - margin), clipped to it (empty ones left out)."""
    end = span - margin
    if not end > 0:  # (a margin as long as the trace or longer, an infinite one included)
        return []
    if math.isinf(end):
        raise ValueError("an endless trace has no list of business hours")
    windows = []
    for day in range(math.ceil(end / DAY)):
        if not is_weekday(day):
            continue
        left, right = day * DAY + BUSINESS_OPEN, min(day * DAY + BUSINESS_CLOSE, end)
        if right > left:
            windows.append((left, right))
    return windows


def business_starts(span: float, n: int, seed: int, *, margin: float) -> list[float]:
    """``n`` start points (trace seconds, whole seconds), uniform over the weekday business-hours instants of
    [0, span) that lie at least ``margin`` seconds before ``span``; NoBusinessHours if there is no such instant."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    windows = business_windows(span, margin=margin)
    if not windows:
        raise NoBusinessHours(f"no weekday business hours in a trace of {span:g} s at least {margin:g} s before its "
                              "end")
    left = np.array([w[0] for w in windows])
    lengths = np.array([w[1] - w[0] for w in windows])
    cumulative = np.cumsum(lengths)
    rng = np.random.default_rng(seed)
    u = rng.random(n) * cumulative[-1]  # a point of the windows laid end to end
    k = np.searchsorted(cumulative, u, side="right")
    k = np.minimum(k, len(windows) - 1)  # (u < cumulative[-1] always; a guard against rounding)
    within = u - (cumulative[k] - lengths[k])
    return np.floor(left[k] + within).tolist()  # (windows open on whole seconds: floor stays inside)


__all__ = ["BUSINESS_CLOSE", "BUSINESS_OPEN", "DAY", "NoBusinessHours", "business_starts", "business_windows",
           "is_business", "next_opening"]
