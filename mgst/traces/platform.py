"""A platform: its hosts' clock rates and availability trace; generated, written to a folder, read back."""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.availability.trace_files import (
    CSV_HEADER,
    MAX_TRACE_LINES,
    Intervals,
    TraceError,
    csv_rows,
    fta_rows,
    guess_format,
    read_trace,
    write_csv_trace,
    write_fta_trace,
)
from mgst.bounded_read import read_text
from mgst.traces.calendar import DAY, business_starts, is_weekday
from mgst.traces.generator import CLOCK_LAWS, KINDS, SDSC_LAW, clock_rates, host_intervals
from mgst.traces.hosts_file import read_hosts, write_hosts

AVAILABILITY_CSV = "availability.csv"
AVAILABILITY_FTA = "availability.fta"
HOSTS_CSV = "hosts.csv"
PLATFORM_JSON = "platform.json"
# The availability file read_platform looks for, in this order (a user's own trace may be compressed).
TRACE_NAMES = (AVAILABILITY_CSV, AVAILABILITY_CSV + ".gz", AVAILABILITY_FTA, AVAILABILITY_FTA + ".gz")
MAX_HOSTS = 100_000  # a bound on a generated platform (220 is the slides')
MAX_DAYS = 3650
# A generated platform's trace must read back: at most MAX_TRACE_LINES intervals. Its size is estimated before it is
# made from the intervals a host has per day under the SDSC-like law (measured: 52 a weekday, 26 a weekend day, 43.8
# over a week; these are a little above), and checked again as it is written.
INTERVALS_PER_WEEKDAY, INTERVALS_PER_WEEKEND_DAY = 55, 28
MAX_PLATFORM_INTERVALS = MAX_TRACE_LINES


class PlatformTooLarge(ValueError):
    """A platform whose trace would hold more intervals than a trace may (MAX_PLATFORM_INTERVALS)."""
MAX_META_BYTES = 1 << 20  # platform.json: some 600 bytes as written


@dataclass(frozen=True)
class Platform:
    """Hosts' clock rates (GHz, host order) and their availability intervals (trace seconds, covering [0, span)
    for a generated platform; a read trace covers what its file gives)."""

    name: str
    clock_ghz: dict[str, float]
    intervals: Intervals
    span: float
    seed: int | None = None  # a generated platform's (it is in platform.json)


def host_names(hosts: int) -> list[str]:
    """h001, h002, ... (zero-padded to at least three digits, so that names sort in host order)."""
    width = max(3, len(str(hosts)))
    return [f"h{k + 1:0{width}d}" for k in range(hosts)]


def estimated_intervals(hosts: int, days: int) -> int:
    """About how many intervals (lines) the trace of ``hosts`` hosts over ``days`` days has, a little above the mean."""
    weekdays = sum(1 for day in range(days) if is_weekday(day))
    return hosts * (weekdays * INTERVALS_PER_WEEKDAY + (days - weekdays) * INTERVALS_PER_WEEKEND_DAY)


def check_platform(kind: str, hosts: int, days: int) -> None:
    """ValueError for an unknown kind, hosts or days out of bounds; PlatformTooLarge if the trace would be over
    MAX_PLATFORM_INTERVALS lines (estimated_intervals)."""
    if kind not in KINDS:
        raise ValueError(f"unknown platform kind {kind!r}; one of {', '.join(KINDS)}")
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be in 1..{MAX_HOSTS:,}, got {hosts}")
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be in 1..{MAX_DAYS}, got {days}")
    estimate = estimated_intervals(hosts, days)
    if estimate > MAX_PLATFORM_INTERVALS:
        raise PlatformTooLarge(f"{hosts:,} hosts over {days:,} days make some {estimate:,} intervals; a trace holds "
                               f"at most {MAX_PLATFORM_INTERVALS:,}, to be read back: give fewer hosts or days")


def generate_platform(kind: str, *, hosts: int = 220, days: int = 28, seed: int = 1) -> Platform:
    """Platform ``kind`` (one of KINDS): ``hosts`` hosts over ``days`` days from a Monday 00:00, the SDSC-like
    availability law and the kind's clock rates. Host k's availability depends on (seed, k) only. In memory (some
    280 MB per million intervals): write_generated_platform writes one without holding it."""
    check_platform(kind, hosts, days)
    span = days * DAY
    names = host_names(hosts)
    clocks = clock_rates(kind, hosts, seed)
    intervals = {name: host_intervals(seed, k, span) for k, name in enumerate(names)}
    return Platform(kind, dict(zip(names, clocks)), intervals, span, seed)


def write_platform(platform: Platform, directory: Path | str, *, fta: bool = False) -> Path:
    """``directory`` (made if need be) with availability.csv, hosts.csv, platform.json and, with ``fta``,
    availability.fta; returns the directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_csv_trace(platform.intervals, out / AVAILABILITY_CSV)
    write_hosts(platform.clock_ghz, out / HOSTS_CSV)
    if fta:
        write_fta_trace(platform.intervals, out / AVAILABILITY_FTA)
    _write_meta(out, platform.name, len(platform.clock_ghz), platform.span, platform.seed, fta)
    return out


def write_generated_platform(kind: str, directory: Path | str, *, hosts: int = 220, days: int = 28, seed: int = 1,
                             fta: bool = False) -> int:
    """write_platform(generate_platform(...)), the same files, made host by host: one host's trace in memory at a
    time. Checked first (check_platform: nothing is made for a platform too large), and as it is written: a trace
    reaching MAX_PLATFORM_INTERVALS after all is PlatformTooLarge, its files removed. The intervals written."""
    check_platform(kind, hosts, days)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    names, span = host_names(hosts), days * DAY
    written = []
    intervals = 0
    try:
        with contextlib.ExitStack() as files:
            written.append(out / AVAILABILITY_CSV)
            trace = files.enter_context(open(written[-1], "w", encoding="ascii"))
            trace.write(",".join(CSV_HEADER) + "\n")
            if fta:
                written.append(out / AVAILABILITY_FTA)
                events = files.enter_context(open(written[-1], "w", encoding="ascii"))
            event = 1
            for k, name in enumerate(names):
                items = host_intervals(seed, k, span)
                intervals += len(items)
                if intervals > MAX_PLATFORM_INTERVALS:
                    raise PlatformTooLarge(f"the trace of {hosts:,} hosts over {days:,} days reached "
                                           f"{MAX_PLATFORM_INTERVALS:,} intervals at host {k + 1:,}, the most a trace "
                                           "holds to be read back: give fewer hosts or days")
                trace.writelines(csv_rows(name, items))
                if fta:
                    rows = fta_rows(k, name, items, event)
                    events.writelines(rows)
                    event += len(rows)
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    write_hosts(dict(zip(names, clock_rates(kind, hosts, seed))), out / HOSTS_CSV)
    _write_meta(out, kind, hosts, span, seed, fta)
    return intervals


def _write_meta(out: Path, name: str, hosts: int, span: float, seed: int | None, fta: bool) -> None:
    meta = {"kind": name, "hosts": hosts, "span_s": span, "days": span / DAY, "start": "Monday 00:00 (trace second 0)",
            "clock_law": CLOCK_LAWS.get(name), "availability_law": SDSC_LAW.as_plain(),
            "files": {"trace": AVAILABILITY_CSV, "hosts": HOSTS_CSV, **({"fta": AVAILABILITY_FTA} if fta else {})}}
    if seed is not None:
        meta["seed"] = seed
    (out / PLATFORM_JSON).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")


def _meta(directory: Path) -> dict:
    path = directory / PLATFORM_JSON
    if not path.exists():
        return {}
    try:
        meta = json.loads(read_text(path, MAX_META_BYTES))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(str(path), None, f"cannot read: {e}") from None
    if not isinstance(meta, dict):
        raise TraceError(str(path), None, "is not a JSON object")
    return meta


def _meta_value(meta: dict, key: str, kind: Any, what: str, where: str, default: Any) -> Any:
    """``meta[key]`` if it is a ``kind`` (never a bool), ``default`` if absent or null; TraceError naming the key
    for a value of another type (it is not ignored in silence)."""
    value = meta.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TraceError(where, None, f"{key}: {value!r:.64} is not {what}")
    return value


def read_platform(directory: Path | str, *, trace: str | None = None, hosts_file: Path | str | None = None
                  ) -> Platform:
    """The platform in ``directory``: the first of TRACE_NAMES there (or ``trace``, a file name in it), its hosts.csv
    (or ``hosts_file``), platform.json if present (else the name is the folder's, the span the trace's last end).
    TraceError naming the file and line for anything malformed, or a trace host without a clock rate."""
    folder = Path(directory)
    if not folder.is_dir():
        raise TraceError(str(folder), None, "is not a folder")
    names = (trace,) if trace is not None else TRACE_NAMES
    found = next((folder / n for n in names if (folder / n).exists()), None)
    if found is None:
        raise TraceError(str(folder), None, f"has no availability trace ({' or '.join(names)})")
    intervals = read_trace(str(found), guess_format(str(found)))
    meta = _meta(folder)
    last = max((items[-1].end for items in intervals.values() if items), default=0.0)
    where = str(folder / PLATFORM_JSON)
    span = float(_meta_value(meta, "span_s", int | float, "a number of seconds", where, last))
    if not math.isfinite(span) or span < 0:
        raise TraceError(where, None, f"span_s: {span!r} is not a finite number of seconds")
    span = max(span, last)  # (a span that ends before the trace's last interval is the trace's)
    name = _meta_value(meta, "kind", str, "a name", where, folder.name)
    seed = _meta_value(meta, "seed", int, "a whole number", where, None)
    clocks = trace_clocks(found, intervals, Path(hosts_file) if hosts_file is not None else folder / HOSTS_CSV)
    return Platform(name, clocks, {h: intervals.get(h, []) for h in clocks}, span, seed)


def trace_clocks(trace: Path, intervals: Intervals, hosts_file: Path) -> dict[str, float]:
    """The clock rates of ``hosts_file`` (read_hosts); TraceError naming ``trace`` for a host of its ``intervals``
    that has none (a trace host is never left out unsaid), and naming ``hosts_file`` for a host of it that has no
    interval in the trace (none is made up)."""
    clocks = read_hosts(hosts_file)
    unknown = [h for h in intervals if h not in clocks]
    if unknown:
        raise TraceError(str(trace), None, f"host {unknown[0][:64]!r} has no clock rate in {hosts_file}"
                                           + (f" (nor {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    unseen = [h for h in clocks if h not in intervals]
    if unseen:  # (it would be summarised as a host the trace says nothing of: never up, never failing)
        raise TraceError(str(hosts_file), None, f"host {unseen[0][:64]!r} has no interval in {trace}"
                                                + (f" (nor {len(unseen) - 1} more)" if len(unseen) > 1 else ""))
    return clocks


def load_platform(path: Path | str, *, fmt: str | None = None, hosts_file: Path | str | None = None) -> Platform:
    """A platform folder (read_platform; ``fmt`` picks its CSV or FTA trace), or a trace file in ``fmt`` ("csv" or
    "fta"; by default from its name) with, if given, a machine file of its hosts' clock rates (without one they are
    unknown: an empty ``clock_ghz``, every host of the trace kept). TraceError naming the file for a bad one."""
    where = Path(path)
    if where.is_dir():
        trace = None
        if fmt is not None:
            names = [n for n in TRACE_NAMES if guess_format(n) == fmt]
            trace = next((n for n in names if (where / n).exists()), names[0])
        return read_platform(where, trace=trace, hosts_file=hosts_file)
    intervals = read_trace(str(where), fmt or guess_format(str(where)))
    span = max((items[-1].end for items in intervals.values() if items), default=0.0)
    if hosts_file is None:
        return Platform(where.name, {}, dict(intervals), span)
    clocks = trace_clocks(where, intervals, Path(hosts_file))
    return Platform(where.name, clocks, {h: intervals.get(h, []) for h in clocks}, span)


# business_starts is the calendar's, offered here with the rest of the platform interface.
__all__ = ["AVAILABILITY_CSV", "AVAILABILITY_FTA", "HOSTS_CSV", "PLATFORM_JSON", "Platform", "PlatformTooLarge",
           "business_starts", "check_platform", "estimated_intervals", "generate_platform", "host_names",
           "load_platform", "read_platform", "trace_clocks", "write_generated_platform", "write_platform"]
