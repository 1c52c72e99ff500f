"""Trace replay: each machine's periods read from a host-availability trace and a CPU-availability series.

As Kondo et al. replay their SDSC traces: model time 0 is trace time ``offset``, and
``time_scale`` model time units pass per trace second. ``file`` gives each host's
availability (Failure Trace Archive event trace, or CSV); ``cpu_file`` (CSV), if given,
the CPU share left to grid work. Where both speak, the worse state wins (DOWN over
RECLAIMED over UP) and the smaller share; where neither does, and after the trace ends,
the machine is UP at its a_j. A trace is the same in every replication.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.availability.kind import AvailabilityKind, ConfigHost, is_number
from mgst.availability.process import AvailabilityProcess, Period, State
from mgst.availability.trace_files import (
    FORMATS,
    MAX_TRACE_TIME,
    Interval,
    Intervals,
    TraceError,
    guess_format,
    read_trace,
)
from mgst.model import AvailabilityModel, Experiment

log = logging.getLogger(__name__)
# A trace that begins this long (trace seconds: a day) after ``offset`` is warned of: the run starts in time the
# trace says nothing of (every machine UP at its a_j), as a trace in epoch seconds read from offset 0 does for decades.
EMPTY_START = 86400.0

# The most periods the mapper sends a puller (its own machine's, over the testbed run): a welcome stays
# within the protocol's frame (64 KiB: 1,000 periods of ~20 bytes are 20 kB) and its list bound.
MAX_WIRE_PERIODS = 1000
# capacity() looks at this many horizons of trace: what a simulation plays (arrivals until the horizon, then a drain
# as long by default), not the whole trace, which a month-long one would make every run read.
CAPACITY_WINDOW = 2.0
MATCHES = ("name", "order")  # how trace hosts map to machines: by name, or the k-th host to machine k
MAX_SCALE = 1e9


@dataclass(frozen=True, slots=True)
class TraceAvailability(AvailabilityModel):
    """Machines replay a trace (paths resolved when the experiment file is read)."""

    file: str
    format: str = "csv"  # of ``file``: "csv" or "fta"
    cpu_file: str | None = None  # a CSV CPU-availability series
    offset: float = 0.0  # trace seconds at model time 0
    time_scale: float = 1.0  # model time units per trace second
    machines: str = "name"  # one of MATCHES


class ReplayProcess:
    """Given periods (pulled one at a time), then UP at ``share`` for good."""

    __slots__ = ("_periods", "_share")

    def __init__(self, periods: Iterable[Period], share: float):
        self._periods = iter(periods)
        self._share = share

    def next(self) -> Period:
        p = next(self._periods, None)
        return Period(math.inf, State.UP, self._share) if p is None else p


def _host_intervals(intervals: Intervals, how: str, names: tuple[str, ...], path: str, every: bool
                    ) -> list[list[Interval]]:
    """Each machine's intervals in ``intervals`` (by name, or the k-th host of the file for machine k); ``every``:
    each machine must have some (a host trace), else a machine without is left alone (a CPU series)."""
    if how == "order":
        hosts = list(intervals)  # (in order of first appearance: dicts keep insertion order)
        if len(hosts) < len(names) and every:
            raise TraceError(path, None, f"has {len(hosts)} hosts; the experiment has {len(names)} machines")
        if len(hosts) > len(names):
            log.warning("%s: %d of its %d hosts are not used (the experiment's %d machines take the first ones, "
                        "in order)", path, len(hosts) - len(names), len(hosts), len(names))
        return [intervals[h] for h in hosts[: len(names)]] + [[] for _ in range(len(names) - len(hosts))]
    named = set(names)
    unused = [h for h in intervals if h not in named]
    if unused:
        log.warning("%s: %d of its %d hosts name no machine of the experiment and are not used (%r first)", path,
                    len(unused), len(intervals), unused[0][:64])
    missing = [n for n in names if n not in intervals]
    if missing and every:
        raise TraceError(path, None, f"has no entry for machine {missing[0][:64]!r}"
                                     + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
                                     + "; every machine needs its own (machines = \"order\" maps hosts in order)")
    return [intervals.get(n, []) for n in names]


@functools.lru_cache(maxsize=8)
def _matched(path: str, fmt: str, mtime_ns: int, size: int, how: str, names: tuple[str, ...], every: bool
             ) -> tuple[list[Interval], ...]:
    """_host_intervals of a file, cached per file version, machines and matching (not per offset: every run into
    one trace shares it)."""
    return tuple(_host_intervals(read_trace(path, fmt), how, names, path, every))


def _sources(spec: TraceAvailability, names: tuple[str, ...]) -> list[tuple[list[Interval], ...]]:
    """Per file (the host trace, then the CPU series if any), each machine's intervals; TraceError if the trace
    does not fit the machines."""
    out = []
    for path, fmt, every in ((spec.file, spec.format, True), (spec.cpu_file, "csv", False)):
        if path is None:
            continue
        read_trace(path, fmt)  # (TraceError for a file that cannot be read, naming it)
        st = os.stat(path)
        out.append(_matched(path, fmt, st.st_mtime_ns, st.st_size, spec.machines, names, every))
    return out


def _end(interval: Interval) -> float:
    return interval.end


def replay(sources: Sequence[list[Interval]], offset: float, scale: float, a_j: float) -> Iterator[Period]:
    """One machine's periods from t = 0 (trace time ``offset``), made as they are pulled: the worse state and the
    smaller share where sources overlap, UP at a_j where none speaks; ends where the sources end (a last UP at
    a_j is left out: the machine is so after the trace anyway). Each source is entered by a bisection at
    ``offset``, so a run pays for the periods it plays, not for the trace."""
    at = [bisect.bisect_right(src, offset, key=_end) for src in sources]  # each source's first interval past t
    t = offset
    pending: Period | None = None
    while True:
        cut = math.inf  # the next boundary of any source after t
        for src, k in zip(sources, at):
            if k < len(src):
                iv = src[k]
                cut = min(cut, iv.start if iv.start > t else iv.end)
        if cut == math.inf:
            break
        state, share = State.UP, a_j
        for src, k in zip(sources, at):
            if k < len(src) and src[k].start <= t:  # (src[k].end > t: it covers [t, cut))
                iv = src[k]
                state = max(state, iv.state)
                default = a_j if iv.state is State.UP else 0.0
                share = min(share, default if iv.share is None else iv.share)
        duration = (cut - t) * scale
        if duration > 0:
            p = Period(duration, state, 0.0 if state is State.DOWN else share)
            if pending is not None and pending.state is p.state and pending.cpu_share == p.cpu_share:
                pending = Period(pending.duration + p.duration, p.state, p.cpu_share)
            else:
                if pending is not None:
                    yield pending
                pending = p
        t = cut
        for j, src in enumerate(sources):
            while at[j] < len(src) and src[at[j]].end <= t:
                at[j] += 1
    if pending is not None and not (pending.state is State.UP and pending.cpu_share == a_j):
        yield pending


def machine_periods(spec: TraceAvailability, experiment: Experiment, machine: int) -> Iterator[Period]:
    """Machine ``machine``'s periods from model time 0, lazily (see replay)."""
    names = tuple(m.name for m in experiment.machines)
    sources = [per_machine[machine] for per_machine in _sources(spec, names)]
    return replay(sources, spec.offset, spec.time_scale, experiment.machines[machine].availability)


def _within(periods: Iterable[Period], length: float) -> Iterator[Period]:
    """The periods that start before model time ``length``."""
    at = 0.0
    for p in periods:
        if at >= length:
            return
        yield p
        at += p.duration


class TraceKind(AvailabilityKind):
    """``kind = "trace"``: ``file`` (required), ``format`` ("csv" or "fta"; by default from the file's name),
    ``cpu_file`` (a CSV series), ``offset`` (trace seconds at model time 0), ``time_scale``, ``machines``.

    Wire: ``("trace", [[duration, state, cpu_share], ...])``, the machine's own periods over the testbed run
    (at most MAX_WIRE_PERIODS), after which it is UP at its a_j.
    """

    name = "trace"
    spec_type = TraceAvailability
    keys = ("kind", "file", "format", "cpu_file", "offset", "time_scale", "machines")

    def from_config(self, host: ConfigHost, table: Mapping[str, Any], section: str) -> tuple[TraceAvailability, str]:
        base = Path(host.path).parent if host.path is not None else Path.cwd()
        path = str((base / host.file_name(host.require(table, section, "file"), f"{section}.file")).resolve())
        fmt = table.get("format", guess_format(path))
        if fmt not in FORMATS:
            raise host.error(f"{section}.format", f"must be one of {', '.join(map(repr, FORMATS))}, got "
                                                  f"{host.describe(fmt)}")
        cpu_file = None
        if "cpu_file" in table:
            cpu_file = str((base / host.file_name(table["cpu_file"], f"{section}.cpu_file")).resolve())
        offset = host.number(table.get("offset", 0.0), f"{section}.offset")
        if not 0.0 <= offset <= MAX_TRACE_TIME:  # (a trace's times are in [0, MAX_TRACE_TIME]: trace_files)
            raise host.error(f"{section}.offset", f"must be a trace time in seconds in [0, {MAX_TRACE_TIME:g}] "
                                                  f"(model time 0 is this time of the trace), got {offset:g}")
        scale = host.bounded(table.get("time_scale", 1.0), f"{section}.time_scale", 0.0, MAX_SCALE,
                             "model time units per trace second")
        how = table.get("machines", "name")
        if how not in MATCHES:
            raise host.error(f"{section}.machines", f"must be one of {', '.join(map(repr, MATCHES))}, got "
                                                    f"{host.describe(how)}")
        starts, ends = [], []
        for key, p, f in ((f"{section}.file", path, fmt), (f"{section}.cpu_file", cpu_file, "csv")):
            if p is not None:
                try:
                    intervals = read_trace(p, f)
                except TraceError as e:
                    raise host.error(key, str(e)) from None
                starts.extend(ivs[0].start for ivs in intervals.values() if ivs)
                ends.extend(ivs[-1].end for ivs in intervals.values() if ivs)
        if ends and offset >= max(ends):  # (model time 0 after the trace's end: nothing of it would play)
            raise host.error(f"{section}.offset", f"{offset:g} trace seconds is at or past the trace's end "
                                                  f"({max(ends):g} s): no period of it would play")
        if starts and min(starts) > offset + EMPTY_START:
            # (an archive's trace in epoch seconds read from offset 0: decades where it says nothing, every machine
            # UP at its a_j, the results those of a grid that never fails, and nothing said)
            log.warning("%s: the trace begins at trace second %.10g, %.1f days after %s = %.10g: until model time "
                        "%.10g every machine is UP at its a_j, as where a trace says nothing (a trace in epoch "
                        "seconds needs an offset at its start)", host.path or "the experiment", min(starts),
                        (min(starts) - offset) / 86400.0, f"{section}.offset", offset, (min(starts) - offset) * scale)
        return TraceAvailability(path, fmt, cpu_file, offset, scale, how), f"{section}.file"

    def check(self, spec: TraceAvailability, experiment: Experiment) -> None:
        _sources(spec, tuple(m.name for m in experiment.machines))  # (TraceError)

    def input_files(self, spec: TraceAvailability) -> tuple[str, ...]:
        return tuple(f for f in (spec.file, spec.cpu_file) if f is not None)

    def to_plain(self, spec: TraceAvailability) -> Any:
        return {"kind": self.name, "file": spec.file, "format": spec.format, "cpu_file": spec.cpu_file,
                "offset": spec.offset, "time_scale": spec.time_scale, "machines": spec.machines}

    def from_plain(self, plain: Any) -> TraceAvailability:
        return TraceAvailability(plain["file"], plain["format"], plain["cpu_file"], plain["offset"],
                                 plain["time_scale"], plain["machines"])

    def process(self, spec: TraceAvailability, experiment: Experiment, seed: int, replication: int,
                machine: int) -> AvailabilityProcess:
        return ReplayProcess(machine_periods(spec, experiment, machine), experiment.machines[machine].availability)

    def to_wire(self, spec: TraceAvailability, experiment: Experiment, machine: int, seed: int,
                until: float, since: float = 0.0) -> tuple:
        sent = []
        at = 0.0
        for p in _within(machine_periods(spec, experiment, machine), until):
            end = at + p.duration
            if end > since:  # (what is left of the period under way for a puller joining at ``since``)
                sent.append([end - max(at, since), int(p.state), p.cpu_share])
            at = end
        if len(sent) > MAX_WIRE_PERIODS:
            raise ValueError(f"machine {experiment.machines[machine].name!r} has {len(sent):,} trace periods in the "
                             f"testbed run's {until:g} time units; a puller takes at most {MAX_WIRE_PERIODS:,} "
                             "(MAX_WIRE_PERIODS): use a shorter run or a coarser trace")
        return (self.name, sent)

    def wire_problem(self, form: Sequence[Any]) -> str | None:
        if len(form) != 2 or not isinstance(form[1], list | tuple):
            return f"a trace is (\"trace\", [[duration, state, cpu_share], ...]), got {form!r:.80}"
        periods = form[1]
        if len(periods) > MAX_WIRE_PERIODS:
            return f"a trace of {len(periods):,} periods; at most {MAX_WIRE_PERIODS:,} are taken"
        for k, p in enumerate(periods):
            if not isinstance(p, list | tuple) or len(p) != 3 or not all(is_number(x) for x in p):
                return f"trace period {k} is not [duration, state, cpu_share] numbers: {p!r:.60}"
            duration, state, share = p
            if not duration > 0:
                return f"trace period {k}: duration {duration!r:.30} is not > 0"
            if not isinstance(state, int) or state not in (0, 1, 2):
                return f"trace period {k}: state {state!r:.30} is not 0 (UP), 1 (RECLAIMED) or 2 (DOWN)"
            if not 0 <= share <= 1 or (state == State.DOWN and share != 0):
                return f"trace period {k}: cpu_share {share!r:.30} is not in [0, 1] (0 when DOWN)"
        return None

    def wire_times(self, form: Sequence[Any]) -> tuple[float, ...]:
        try:
            return (math.fsum(p[0] for p in form[1]),)
        except OverflowError:  # (durations summing past the largest float: a time beyond any bound)
            return (math.inf,)

    def from_wire(self, form: Sequence[Any], machine: int, share: float) -> AvailabilityProcess:
        problem = self.wire_problem(form)
        if problem is not None:
            raise ValueError(problem)
        return ReplayProcess([Period(float(d), State(s), float(c)) for d, s, c in form[1]], share)

    def capacity(self, spec: TraceAvailability, experiment: Experiment) -> tuple[list[float], str]:
        window = CAPACITY_WINDOW * experiment.simulation.horizon
        fractions = []
        for j, m in enumerate(experiment.machines):
            span = given = 0.0
            for p in _within(machine_periods(spec, experiment, j), window):
                length = min(p.duration, window - span)
                span += length
                given += length * p.cpu_share
            if span < window:  # (after the trace: UP at a_j)
                given += (window - span) * m.availability
                span = window
            fractions.append(given / (span * m.availability) if span > 0 and m.availability > 0 else 1.0)
        return fractions, (f" (availabilities scaled by each machine's mean CPU share over the run's first {window:g} "
                           f"time units of trace, {min(fractions):.3f} to {max(fractions):.3f})")

    def cycles(self, spec: TraceAvailability, experiment: Experiment, length: float) -> tuple[float, str]:
        total = 0
        for j in range(len(experiment.machines)):
            total += sum(1 for _ in _within(machine_periods(spec, experiment, j), length))
        return float(total), "the trace's periods"

    def shortest_cycle(self, spec: TraceAvailability, experiment: Experiment) -> float:
        """The shortest time between the starts of two DOWN periods of one machine: a trace's restarts may
        come in bursts, which a mean would hide."""
        shortest = math.inf
        for j in range(len(experiment.machines)):
            at, last_down = 0.0, None
            for p in machine_periods(spec, experiment, j):
                if p.state is State.DOWN:
                    if last_down is not None:
                        shortest = min(shortest, at - last_down)
                    last_down = at
                at += p.duration
        return shortest

    def longest_down(self, spec: TraceAvailability, experiment: Experiment) -> float:
        longest = 0.0
        for j in range(len(experiment.machines)):
            downs = [p.duration for p in machine_periods(spec, experiment, j) if p.state is State.DOWN]
            if downs:
                longest = max(longest, math.fsum(downs) / len(downs))
        return longest


KIND = TraceKind()

