"""A platform: its hosts' clock rates and availability trace; generated, written to a folder, read back."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from mgst.availability.process import State
from mgst.availability.trace_files import Intervals, TraceError, guess_format, read_trace
from mgst.traces.calendar import DAY
from mgst.traces.generator import CLOCK_LAWS, KINDS, SDSC_LAW, clock_rates, host_intervals
from mgst.traces.hosts_file import read_hosts, write_hosts

log = logging.getLogger(__name__)

AVAILABILITY_CSV = "availability.csv"
AVAILABILITY_FTA = "availability.fta"
HOSTS_CSV = "hosts.csv"
PLATFORM_JSON = "platform.json"
# The availability file read_platform looks for, in this order (a user's own trace may be compressed).
TRACE_NAMES = (AVAILABILITY_CSV, AVAILABILITY_CSV + ".gz", AVAILABILITY_FTA, AVAILABILITY_FTA + ".gz")
MAX_HOSTS = 100_000  # a bound on a generated platform (220 is the slides')
MAX_DAYS = 3650


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


def generate_platform(kind: str, *, hosts: int = 220, days: int = 28, seed: int = 1) -> Platform:
    """Platform ``kind`` (one of KINDS): ``hosts`` hosts over ``days`` days from a Monday 00:00, the SDSC-like
    availability law and the kind's clock rates. Host k's availability depends on (seed, k) only."""
    if kind not in KINDS:
        raise ValueError(f"unknown platform kind {kind!r}; one of {', '.join(KINDS)}")
    if not 1 <= hosts <= MAX_HOSTS:
        raise ValueError(f"hosts must be in 1..{MAX_HOSTS:,}, got {hosts}")
    if not 1 <= days <= MAX_DAYS:
        raise ValueError(f"days must be in 1..{MAX_DAYS}, got {days}")
    span = days * DAY
    names = host_names(hosts)
    clocks = clock_rates(kind, hosts, seed)
    intervals = {name: host_intervals(seed, k, span) for k, name in enumerate(names)}
    return Platform(kind, dict(zip(names, clocks)), intervals, span, seed)


def _number(x: float) -> str:
    """A time or share as written: whole numbers without a point, others exactly (repr round-trips)."""
    return str(int(x)) if x == int(x) else repr(x)


def write_csv_trace(intervals: Intervals, path: Path) -> None:
    """mgst's CSV trace format (mgst.availability.trace_files.parse_csv reads it)."""
    with open(path, "w", encoding="ascii") as f:
        f.write("machine,start,end,state,cpu_share\n")
        for host, items in intervals.items():
            f.writelines(f"{host},{_number(iv.start)},{_number(iv.end)},{iv.state.name.lower()},"
                         f"{'' if iv.share is None else _number(iv.share)}\n" for iv in items)


def write_fta_trace(intervals: Intervals, path: Path) -> None:
    """The Failure Trace Archive's event_trace format (tab-separated, FTA_COLUMNS, no header): one event per
    unavailable (0) or available (1) interval. The FTA has no CPU share: an UP interval's share is dropped, and
    consecutive UP intervals are one available event (RECLAIMED counts as available)."""
    event = 0
    with open(path, "w", encoding="ascii") as f:
        for node, (host, items) in enumerate(intervals.items()):
            merged: list[list[float]] = []  # [start, end, event_type]
            for iv in items:
                kind = 0 if iv.state is State.DOWN else 1
                if merged and merged[-1][2] == kind and merged[-1][1] == iv.start:
                    merged[-1][1] = iv.end
                else:
                    merged.append([iv.start, iv.end, kind])
            for start, end, kind in merged:
                event += 1
                f.write(f"{event}\t0\t{node}\t0\t{host}\t{int(kind)}\t{_number(start)}\t{_number(end)}\t0\n")


def write_platform(platform: Platform, directory: Path | str, *, fta: bool = False) -> Path:
    """``directory`` (made if need be) with availability.csv, hosts.csv, platform.json and, with ``fta``,
    availability.fta; returns the directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_csv_trace(platform.intervals, out / AVAILABILITY_CSV)
    write_hosts(platform.clock_ghz, out / HOSTS_CSV)
    if fta:
        write_fta_trace(platform.intervals, out / AVAILABILITY_FTA)
    meta = {"kind": platform.name, "hosts": len(platform.clock_ghz), "span_s": platform.span,
            "days": platform.span / DAY, "start": "Monday 00:00 (trace second 0)",
            "clock_law": CLOCK_LAWS.get(platform.name), "availability_law": SDSC_LAW.as_plain(),
            "files": {"trace": AVAILABILITY_CSV, "hosts": HOSTS_CSV, **({"fta": AVAILABILITY_FTA} if fta else {})}}
    if platform.seed is not None:
        meta["seed"] = platform.seed
    (out / PLATFORM_JSON).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return out


def _meta(directory: Path) -> dict:
    path = directory / PLATFORM_JSON
    if not path.exists():
        return {}
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TraceError(str(path), None, f"cannot read: {e}") from None
    if not isinstance(meta, dict):
        raise TraceError(str(path), None, "is not a JSON object")
    return meta


def read_platform(directory: Path | str, *, trace: str | None = None) -> Platform:
    """The platform in ``directory``: hosts.csv, the first of TRACE_NAMES there (or ``trace``, a file name in
    it), platform.json if present (else the name is the folder's, the span the trace's last end). TraceError
    naming the file and line for anything malformed, or a trace host without a clock rate."""
    folder = Path(directory)
    if not folder.is_dir():
        raise TraceError(str(folder), None, "is not a folder")
    names = (trace,) if trace is not None else TRACE_NAMES
    found = next((folder / n for n in names if (folder / n).exists()), None)
    if found is None:
        raise TraceError(str(folder), None, f"has no availability trace ({' or '.join(names)})")
    intervals = read_trace(str(found), guess_format(str(found)))
    clocks = read_hosts(folder / HOSTS_CSV)
    unknown = [h for h in intervals if h not in clocks]
    if unknown:
        raise TraceError(str(found), None, f"host {unknown[0][:64]!r} has no clock rate in {folder / HOSTS_CSV}"
                                           + (f" (nor {len(unknown) - 1} more)" if len(unknown) > 1 else ""))
    meta = _meta(folder)
    last = max((items[-1].end for items in intervals.values() if items), default=0.0)
    span = float(meta.get("span_s", last)) if isinstance(meta.get("span_s"), int | float) else last
    if not math.isfinite(span) or span < last:
        span = last
    name = meta["kind"] if isinstance(meta.get("kind"), str) else folder.name
    seed = meta.get("seed") if isinstance(meta.get("seed"), int) else None
    return Platform(name, clocks, {h: intervals.get(h, []) for h in clocks}, span, seed)


__all__ = ["AVAILABILITY_CSV", "AVAILABILITY_FTA", "HOSTS_CSV", "PLATFORM_JSON", "Platform", "generate_platform",
           "host_names", "read_platform", "write_platform"]
