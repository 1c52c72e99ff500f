"""Availability trace files: the Failure Trace Archive's tab-separated event traces, and a plain CSV.

Both read to (and are written from), per machine identifier, the intervals the file gives, in trace seconds:
``Interval(start, end, state, share)``, ``share`` None where the file leaves it to the
machine (its a_j when UP, 0 otherwise). docs/models.md describes the formats.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from mgst.availability.process import State
from mgst.bounded_read import FileReadError, numbered_lines
from mgst.wording import plural

# Bounds on what a trace may hold (mgst.config's MAX_JOBS bounds the events of one run likewise).
# Reading 1,000,000 lines takes some 280 MB and 4 s, so the most a trace may hold takes about 2.8 GB.
MAX_TRACE_LINES = 10_000_000
MAX_LINE = 4096  # bytes; a CSV line is ~40 bytes, an FTA event ~100
MAX_TRACE_BYTES = 1 << 30  # 1 GiB, read (decompressed: a gzip file is bounded by what it inflates to)
FORMATS = ("csv", "fta")
# The Failure Trace Archive's event_trace table, in its column order (http://fta.scem.uws.edu.au/, page
# "FTAFormat"; Javadi, Kondo, Iosup and Epema, "The Failure Trace Archive", JPDC 73(8), 2013). A header line
# naming the columns, if the file has one, takes precedence over this order.
FTA_COLUMNS = ("event_id", "component_id", "node_id", "platform_id", "node_name", "event_type",
               "event_start_time", "event_end_time", "event_end_reason")
# The columns parse_fta reads (node_name, else node_id, names the host).
_FTA_READ = frozenset({"node_id", "node_name", "event_type", "event_start_time", "event_end_time"})
# event_type: 0 the node is unavailable, 1 available.
FTA_EVENT_STATES = {0: State.DOWN, 1: State.UP}
# The names of the archive's files (a file of another name, not .csv, is read as one too: guess_format).
FTA_SUFFIXES = (".tab", ".txt", ".fta")
CSV_STATES = {"up": State.UP, "reclaimed": State.RECLAIMED, "down": State.DOWN}
# The CSV format's header line (its first four names alone are a header too); any other first line is data.
CSV_HEADER = ["machine", "start", "end", "state", "cpu_share"]
# The latest time a trace may give, in trace seconds (some 317 years): the archive's epoch seconds are ~1.7e9; beyond
# this is a slip (epoch milliseconds, or an "until for ever" of 1e308), which would play as one period for ever.
MAX_TRACE_TIME = 1e10


class TraceError(ValueError):
    """A trace that cannot be read, naming the file and (when it is one line's fault) the line."""

    def __init__(self, path: str, line: int | None, problem: str):
        self.path = path
        self.line = line
        self.problem = problem
        super().__init__(f"{path}:{line}: {problem}" if line is not None else f"{path}: {problem}")


class Interval(NamedTuple):
    start: float  # trace seconds
    end: float
    state: State
    share: float | None  # None: the machine's own (a_j UP, 0 otherwise)


Intervals = dict[str, list[Interval]]  # machine identifier -> its intervals, sorted by start


def data_lines(path: str | os.PathLike, *, max_line: int = MAX_LINE, max_lines: int = MAX_TRACE_LINES,
               max_bytes: int = MAX_TRACE_BYTES) -> Iterator[tuple[int, str]]:
    """(line number, text) of an ASCII file's data lines, blank lines and ``#`` comments skipped; the bounds checked
    as the file is read (a regular file only; ``.gz`` decompressed). TraceError naming the file (and line)."""
    where = os.fspath(path)
    try:
        for number, raw in numbered_lines(path, max_line=max_line, max_lines=max_lines, max_bytes=max_bytes):
            try:
                # (blanks and line ends stripped, not tabs: an FTA line's empty first or last field is a field)
                text = raw.decode("ascii").strip(" \r\n")
            except UnicodeDecodeError:
                if raw.startswith(b"\xef\xbb\xbf"):
                    raise TraceError(where, number, "not ASCII: it begins with a UTF-8 byte-order mark (as a "
                                                    "spreadsheet saves 'CSV UTF-8'): save it as plain CSV") from None
                raise TraceError(where, number, "not ASCII") from None
            bare = text.strip()
            if bare and not bare.startswith("#"):
                yield number, text
    except FileReadError as e:
        raise TraceError(where, e.line, e.problem) from None
    except OSError as e:
        raise TraceError(where, None, f"cannot read: {e.strerror or e}") from None


def _time(path: str, number: int, text: str, what: str) -> float:
    try:
        value = plain_float(text)
    except ValueError:
        raise TraceError(path, number, f"{what} is not a number: {text[:40]!r}") from None
    if not math.isfinite(value):
        raise TraceError(path, number, f"{what} is not finite: {text[:40]!r}")
    return value


def _trace_time(path: str, number: int, text: str, what: str) -> float:
    """Column ``what`` of line ``number``: a time in trace seconds, in [0, MAX_TRACE_TIME]."""
    value = _time(path, number, text, what)
    if not 0.0 <= value <= MAX_TRACE_TIME:
        raise TraceError(path, number, f"{what} {value:g} is not a time in trace seconds: give one in [0, "
                                       f"{MAX_TRACE_TIME:g}] (model time 0 is the trace time availability.offset)")
    return value


def plain_float(text: str) -> float:
    """``text`` as a number the way CSV readers take one: Python's float() but for its digit separators
    (``1_000`` is 1000 to Python, a string to a spreadsheet): ValueError for those."""
    if "_" in text:
        raise ValueError(text)
    return float(text)


# A machine's intervals as read, each with its line number (for an overlap's error).
Numbered = dict[str, list[tuple[Interval, int]]]


def _add(out: Numbered, path: str, number: int, machine: str, interval: Interval) -> None:
    if not machine:
        raise TraceError(path, number, "no machine")
    if not interval.start < interval.end:
        raise TraceError(path, number, f"start {interval.start:g} is not before end {interval.end:g}")
    out.setdefault(machine, []).append((interval, number))


def _ordered(path: str, numbered: Numbered) -> Intervals:
    """Each machine's intervals sorted by start; TraceError naming the later line of two that overlap."""
    out: Intervals = {}
    for machine, items in numbered.items():
        items.sort(key=lambda item: (item[0].start, item[0].end, item[1]))
        for (a, a_line), (b, line) in zip(items, items[1:]):
            if b.start < a.end:
                raise TraceError(path, line, f"machine {machine[:64]!r}: [{b.start:g}, {b.end:g}) overlaps "
                                             f"[{a.start:g}, {a.end:g}) of line {a_line}")
        out[machine] = [interval for interval, _ in items]
    return out


def parse_csv(path: str) -> Intervals:
    """``machine,start,end,state,cpu_share`` lines (a first line of exactly those names is a header), sorted."""
    out: Numbered = {}
    first = True
    for number, text in data_lines(path):
        fields = [f.strip() for f in text.split(",")]
        if first and [f.lower() for f in fields] in (CSV_HEADER, CSV_HEADER[:4]):
            first = False
            continue
        first = False
        if len(fields) not in (4, 5):
            raise TraceError(path, number, f"{len(fields)} fields; need machine,start,end,state,cpu_share")
        machine, start, end, state_text = fields[:4]
        state = CSV_STATES.get(state_text.lower())
        if state is None:
            raise TraceError(path, number, f"state {state_text[:20]!r}; need up, reclaimed or down")
        share = None
        if len(fields) == 5 and fields[4]:
            share = _time(path, number, fields[4], "cpu_share")
            if not 0 <= share <= 1:
                raise TraceError(path, number, f"cpu_share {share:g} is not in [0, 1]")
            if state is State.DOWN and share != 0:
                raise TraceError(path, number, f"a down machine has no CPU share, got {share:g}")
            if state is State.UP and share == 0:  # (up computes: at share 0 it would hold its work suspended)
                raise TraceError(path, number, "cpu_share 0 with state up: an up machine computes at a share > 0; "
                                               "write reclaimed,0 (its owner's: work suspended) or down")
        _add(out, path, number, machine,
             Interval(_trace_time(path, number, start, "start"), _trace_time(path, number, end, "end"), state, share))
    return _ordered(path, out)


def parse_fta(path: str) -> Intervals:
    """A Failure Trace Archive event trace: tab-separated, FTA_COLUMNS (or a header line naming them), sorted."""
    out: Numbered = {}
    columns = {name: k for k, name in enumerate(FTA_COLUMNS)}
    # The fields a line needs: up to the last column read. Those after it may be empty or absent (an empty
    # event_end_reason, the last column, leaves a line ending in a tab, which reading strips).
    width = _fields_read(columns)
    first = True
    for number, text in data_lines(path):
        fields = [f.strip() for f in text.split("\t")]
        if first and "event_type" in fields:
            first = False
            names = [name.lower().replace("event_stop_time", "event_end_time") for name in fields]
            twice = next((name for k, name in enumerate(names) if name in names[:k]), None)
            if twice is not None:
                raise TraceError(path, number, f"the header names column {twice[:40]!r} twice")
            columns = {name: k for k, name in enumerate(names)}
            missing = [c for c in ("event_type", "event_start_time", "event_end_time") if c not in columns]
            if missing or ("node_name" not in columns and "node_id" not in columns):
                raise TraceError(path, number, f"the header lacks {', '.join(missing) or 'node_name and node_id'}")
            width = _fields_read(columns)
            continue
        first = False
        if len(fields) < width:
            raise TraceError(path, number, f"{plural(len(fields), 'tab-separated field')}; need {width}"
                                           + _read_as_fta(path))
        try:
            event = int(fields[columns["event_type"]])
        except ValueError:
            event = -1
        state = FTA_EVENT_STATES.get(event)
        if state is None:
            raise TraceError(path, number, f"event_type {fields[columns['event_type']][:20]!r}; need 0 "
                                           "(unavailable) or 1 (available)")
        name = fields[columns["node_name"]] if "node_name" in columns else ""
        if not name or name.upper() == "NULL":
            name = fields[columns["node_id"]] if "node_id" in columns else ""
        start = _trace_time(path, number, fields[columns["event_start_time"]], "event_start_time")
        end = _trace_time(path, number, fields[columns["event_end_time"]], "event_end_time")
        _add(out, path, number, name, Interval(start, end, state, None))
    return _ordered(path, out)


@functools.lru_cache(maxsize=8)
def _cached(path: str, fmt: str, mtime_ns: int, size: int) -> Intervals:
    return parse_csv(path) if fmt == "csv" else parse_fta(path)


def read_trace(path: str, fmt: str) -> Intervals:
    """Every machine's intervals in ``path`` (``fmt``: "csv" or "fta"; ``.gz`` is read compressed), sorted by
    start, none overlapping; TraceError naming the file (and line) otherwise. Cached per file and change."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}")
    try:
        st = os.stat(path)
    except OSError as e:
        raise TraceError(path, None, f"cannot read: {e.strerror or e}") from None
    return _cached(path, fmt, st.st_mtime_ns, st.st_size)


def _number(x: float) -> str:
    """A time or share as written: whole numbers without a point, others exactly (repr round-trips)."""
    return str(int(x)) if x == int(x) else repr(x)


def csv_rows(host: str, items: Iterable[Interval]) -> Iterator[str]:
    """The lines of mgst's CSV trace format for one host's intervals (after CSV_HEADER's line)."""
    return (f"{host},{_number(iv.start)},{_number(iv.end)},{iv.state.name.lower()},"
            f"{'' if iv.share is None else _number(iv.share)}\n" for iv in items)


def fta_rows(node: int, host: str, items: Iterable[Interval], first_event: int) -> list[str]:
    """The Failure Trace Archive's event lines for one host's intervals (node number ``node``, events numbered from
    ``first_event``): one per unavailable (0) or available (1) period, consecutive available intervals merged."""
    merged: list[list[float]] = []  # [start, end, event_type]
    for iv in items:
        kind = 0 if iv.state is State.DOWN else 1
        if merged and merged[-1][2] == kind and merged[-1][1] == iv.start:
            merged[-1][1] = iv.end
        else:
            merged.append([iv.start, iv.end, kind])
    return [f"{event}\t0\t{node}\t0\t{host}\t{int(kind)}\t{_number(start)}\t{_number(end)}\t0\n"
            for event, (start, end, kind) in enumerate(merged, first_event)]


def write_csv_trace(intervals: Intervals, path: str | os.PathLike) -> None:
    """mgst's CSV trace format, with a header (parse_csv reads it); ValueError for a host name it could not read
    back."""
    check_host_names(intervals, ",")
    with open(path, "w", encoding="ascii") as f:
        f.write(",".join(CSV_HEADER) + "\n")
        for host, items in intervals.items():
            f.writelines(csv_rows(host, items))


def write_fta_trace(intervals: Intervals, path: str | os.PathLike) -> None:
    """The Failure Trace Archive's event_trace format (tab-separated, FTA_COLUMNS, no header): one event per
    unavailable (0) or available (1) interval. The FTA has no CPU share: an UP interval's share is dropped, and
    consecutive UP intervals are one available event (RECLAIMED counts as available)."""
    check_host_names(intervals, "\t")
    event = 1
    with open(path, "w", encoding="ascii") as f:
        for node, (host, items) in enumerate(intervals.items()):
            rows = fta_rows(node, host, items, event)
            f.writelines(rows)
            event += len(rows)


def check_host_names(intervals: Iterable[str], separator: str) -> None:
    """ValueError for a host name that would not read back as written: empty, with the separator, a line break or
    surrounding blanks, starting with # (a comment), or not ASCII."""
    for host in intervals:
        if (not host or separator in host or "\n" in host or "\r" in host or host != host.strip()
                or host.startswith("#") or not host.isascii()):
            raise ValueError(f"host name {host[:64]!r} cannot be written to a trace file and read back")


def _fields_read(columns: dict[str, int]) -> int:
    """How many fields an FTA line needs to hold every column parse_fta reads, given where they are."""
    return 1 + max(k for name, k in columns.items() if name in _FTA_READ)


def _read_as_fta(path: str) -> str:
    """Why a file whose name does not say FTA was read as one (its format was guessed from its name), or ""."""
    if _uncompressed_name(path).endswith(FTA_SUFFIXES):
        return ""
    return (" (read as the Failure Trace Archive's tab-separated events, the format of a name not ending in .csv: "
            "name a CSV trace .csv, or give its format: csv or fta)")


def guess_format(path: str) -> str:
    """"csv" for a .csv file (.csv.gz too), otherwise "fta" (the archive's files end .tab or .txt)."""
    return "csv" if _uncompressed_name(path).endswith(".csv") else "fta"


def _uncompressed_name(path: str) -> str:
    """``path`` in lower case, without a .gz: the name its format is told by."""
    return (path[:-3] if path.endswith(".gz") else path).lower()


__all__ = ["CSV_HEADER", "FORMATS", "MAX_TRACE_TIME", "Interval", "TraceError", "check_host_names", "csv_rows",
           "data_lines", "fta_rows", "guess_format", "read_trace", "write_csv_trace", "write_fta_trace"]
