"""The omniscient optimal makespan of T identical tasks on volatile hosts (Kondo & Casanova's greedy).

Kondo & Casanova, "Computing the Optimal Makespan for Jobs with Identical and Independent Tasks
Scheduled on Volatile Hosts", UCSD TR CS2004-0796 (2004): a greedy scheduler with full knowledge
of the future, proved optimal. Our reading of it (docs/reproduction-kondo.md, "The optimum"):

- a host of power P computes P x share work units per second while it is up (share 0: paused, its
  task survives); a DOWN period kills its task, which restarts from scratch (no checkpoint);
- per host, the greedy starts a task as early as it can, back to back, and skips the rest of an up
  run (time between two DOWN periods) where a task cannot finish: its completions g_h1 < g_h2 < ...
  are each the earliest any schedule can reach on that host;
- the optimal makespan is the T-th smallest completion over all hosts, minus the submission t0.

A completion exactly at the start of a DOWN period counts (the simulator handles a completion before
a failure at the same instant). Within an up run, the k-th completion is where the run's cumulative
work from its start reaches k x size, so all of them are found at once with numpy (searchsorted over
the cumulative work), for every run of every host, in a window after t0 that doubles until it holds
T completions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mgst.availability.process import State
from mgst.availability.trace_files import Interval

# A run of up time holds floor(work / size) tasks; floats make an exact fit (a task ending exactly at
# the DOWN) come out a few ulps short: this much of a task's size is forgiven (1e-9 of a 5-minute task is
# 0.3 us), and the completion is clipped to the run's end.
FIT_TOLERANCE = 1e-9
# The first window after t0 searched for T completions: a few times the work of the application over the
# platform's total power, at least this long (s); it doubles while it holds fewer than T completions.
MIN_WINDOW = 3600.0
WINDOW_FACTOR = 4.0


class NotEnoughCapacity(ValueError):  # noqa: N818 (the condition, as optimum.md names it)
    """Fewer than T tasks can complete before the trace ends."""

    def __init__(self, done: int, tasks: int, trace_end: float):
        self.done = done
        self.tasks = tasks
        self.trace_end = trace_end
        super().__init__(f"not enough capacity in trace: only {done} of {tasks} tasks can complete "
                         f"before it ends at {trace_end:g} s")


@dataclass(frozen=True, slots=True)
class HostTrace:
    """One host: its power (work units per second at share 1) and its up time, everything else DOWN.

    ``up`` holds (start, end, share) segments in time order, not overlapping; touching segments
    (one's end is the next one's start) are one up run, and a gap between two is DOWN.
    """

    power: float
    up: tuple[tuple[float, float, float], ...]


class Optimum:
    """The optimal makespans of one platform: its hosts flattened into numpy arrays once, queried many times."""

    def __init__(self, hosts: Sequence[HostTrace]):
        starts: list[float] = []
        ends: list[float] = []
        rates: list[float] = []
        runs: list[int] = []
        run = -1
        for host in hosts:
            if not host.power > 0 or math.isinf(host.power):
                raise ValueError(f"a host's power must be a positive number, got {host.power!r}")
            previous_end = None
            for start, end, share in host.up:
                if not 0.0 <= share <= 1.0:
                    raise ValueError(f"a share must be in [0, 1], got {share!r}")
                if not start < end:
                    continue
                if previous_end is not None and start < previous_end:
                    raise ValueError(f"a host's up segments overlap or are out of order at {start!r}")
                if previous_end is None or start > previous_end:
                    run += 1  # a new host, or a gap (DOWN): a new run
                starts.append(start)
                ends.append(end)
                rates.append(host.power * share)
                runs.append(run)
                previous_end = end
        self.start = np.array(starts, dtype=float)
        self.end = np.array(ends, dtype=float)
        self.rate = np.array(rates, dtype=float)
        self.run = np.array(runs, dtype=np.int64)
        self.total_power = sum(h.power for h in hosts)
        self.trace_end = float(self.end.max()) if len(self.end) else 0.0

    def completions(self, t0: float, size: float, tasks: int) -> np.ndarray:
        """The T earliest task completions of the optimal schedule, sorted (absolute times)."""
        if not size > 0 or math.isinf(size):
            raise ValueError(f"the task size must be a positive number, got {size!r}")
        if tasks < 1:
            raise ValueError(f"the number of tasks must be >= 1, got {tasks!r}")
        window = max(MIN_WINDOW, WINDOW_FACTOR * tasks * size / self.total_power if self.total_power else 0.0)
        while True:
            stop = t0 + window
            found = self.completions_by(t0, stop, size)
            if len(found) >= tasks:
                found.partition(tasks - 1)
                first = found[:tasks]
                first.sort()
                return first
            if stop >= self.trace_end:
                raise NotEnoughCapacity(len(found), tasks, self.trace_end)
            window *= 2.0

    def makespan(self, t0: float, size: float, tasks: int) -> float:
        """The optimal makespan of ``tasks`` tasks of ``size`` work units submitted at ``t0``."""
        return float(self.completions(t0, size, tasks)[-1]) - t0

    def completions_by(self, t0: float, stop: float, size: float) -> np.ndarray:
        """Every greedy completion at or before ``stop`` of tasks started at or after ``t0``."""
        keep = (self.end > t0) & (self.start < stop)
        start = np.maximum(self.start[keep], t0)
        end = np.minimum(self.end[keep], stop)
        rate = self.rate[keep]
        run = self.run[keep]
        if len(start) == 0:
            return np.empty(0)
        work = rate * (end - start)
        cum = np.cumsum(work)
        before = np.concatenate(([0.0], cum[:-1]))
        # Each run's first and last segment, its work at its start and end.
        first = np.flatnonzero(np.concatenate(([True], run[1:] != run[:-1])))
        last = np.concatenate((first[1:] - 1, [len(run) - 1]))
        run_start = before[first]
        fits = np.floor((cum[last] - run_start) / size + FIT_TOLERANCE).astype(np.int64)
        fits = np.maximum(fits, 0)
        total = int(fits.sum())
        if total == 0:
            return np.empty(0)
        # The k-th completion of a run is where its cumulative work reaches run_start + k x size.
        which = np.repeat(np.arange(len(first)), fits)
        k = np.arange(total) - np.repeat(np.cumsum(fits) - fits, fits) + 1
        target = run_start[which] + k * size
        at = np.searchsorted(cum, target, side="left")
        at = np.minimum(at, last[which])  # (a target a few ulps past its run's end: its last segment)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = start[at] + (target - before[at]) / rate[at]
        t = np.where(rate[at] > 0, t, end[at])
        return np.minimum(t, end[at])


def optimal_makespan(hosts: Sequence[HostTrace], size: float, tasks: int, t0: float = 0.0) -> float:
    """The optimal makespan (module docstring); NotEnoughCapacity if the traces hold fewer than ``tasks``."""
    return Optimum(hosts).makespan(t0, size, tasks)


def host_traces(intervals: Mapping[str, Sequence[Interval]], power: Mapping[str, float], *,
                up_after: bool = True) -> list[HostTrace]:
    """Hosts of a trace (host -> intervals, trace seconds from 0), in ``power``'s order, as the simulator plays it.

    UP is the interval's share (1, the machines' a_j, where it gives none), RECLAIMED its share (0 where
    none), DOWN nothing; time the trace leaves out is UP at share 1 (the simulator's a_j = 1), and so is
    everything after the host's last interval if ``up_after`` (else the host is DOWN from then on).
    """
    out = []
    for host, p in power.items():
        segments: list[tuple[float, float, float]] = []
        t = 0.0
        for iv in sorted(intervals.get(host, ()), key=lambda iv: iv.start):
            if iv.start > t:
                segments.append((t, iv.start, 1.0))
            if iv.state is not State.DOWN:
                share = iv.share if iv.share is not None else (1.0 if iv.state is State.UP else 0.0)
                segments.append((max(iv.start, t), iv.end, share))
            t = max(t, iv.end)
        if up_after:
            segments.append((t, math.inf, 1.0))
        out.append(HostTrace(p, tuple(_merge_touching(segments))))
    return out


def _merge_touching(segments: list[tuple[float, float, float]]) -> list[tuple[float, float, float]]:
    out: list[tuple[float, float, float]] = []
    for s in segments:
        if out and out[-1][1] == s[0] and out[-1][2] == s[2]:
            out[-1] = (out[-1][0], s[1], s[2])
        elif s[0] < s[1]:
            out.append(s)
    return out
