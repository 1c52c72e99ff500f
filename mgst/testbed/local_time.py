"""A testbed run's local times: one UTC offset for the whole run, its head node's at the run's start."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

# UTC offsets in use reach -12:00 and +14:00; a journal's recorded one beyond a day is not one.
MAX_OFFSET_S = 86_400.0


def zone_offset(t: float) -> float:
    """The UTC offset, in seconds, of this machine's local time zone at wall time ``t`` (0 where no calendar has it)."""
    try:
        offset = dt.datetime.fromtimestamp(t).astimezone().utcoffset()
    except (OverflowError, ValueError, OSError):
        return 0.0
    return offset.total_seconds() if offset is not None else 0.0


def recorded_offset(value: Any, t: float) -> float:
    """The offset a journal recorded for its run (``value``), or, if it recorded none (a journal of before) or not a
    number of seconds, the local zone's at ``t``."""
    if type(value) in (int, float) and math.isfinite(value) and abs(value) < MAX_OFFSET_S:
        return float(value)
    return zone_offset(t)


def _at(t: float | None, offset: float) -> dt.datetime | None:
    if t is None:
        return None
    try:
        return dt.datetime.fromtimestamp(t, dt.timezone(dt.timedelta(seconds=offset)))
    except (OverflowError, ValueError, OSError):  # no calendar has it (a journal of a puller's absurd clock): none
        return None


def wall_iso(t: float | None, offset: float) -> str:
    """A wall-clock time as an ISO 8601 local timestamp with microseconds, at the run's UTC offset ``offset`` (the
    same through a change to or from daylight saving: a spreadsheet subtracts them), without the offset (spreadsheets
    read it); "" for none."""
    at = _at(t, offset)
    return "" if at is None else at.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")


def wall_iso_offset(t: float, offset: float) -> str:
    """As :func:`wall_iso`, with its UTC offset (+HH:MM)."""
    at = _at(t, offset)
    return "" if at is None else at.isoformat(sep=" ", timespec="microseconds")


def offset_iso(offset: float) -> str:
    """A UTC offset in seconds as ISO 8601 writes it: +05:30, -03:00, +00:00."""
    minutes = round(offset / 60)
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
