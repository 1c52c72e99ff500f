"""Bag-of-Tasks results: bags.csv rows, AVT, makespan, waiting time and RWT with intervals, and instability."""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst.core.state import BagRecord
from mgst.intervals import (
    STUDENT_T,
    Interval,
    batch_means_ci,
    interval_label,
    interval_places,
    is_default,
    mean_ci,
    method_note,
)
from mgst.model import BagList, BagStream, SwfTrace
from mgst.wording import plural

BAG_COLUMNS = (
    "Replication", "Bag", "Submitted", "First Dispatch", "Completed", "Turnaround", "Waiting", "Makespan",
    "Tasks", "Replicas Started", "Replicas Wasted", "Wasted Time", "Replica Time", "Counted",
)

# The instability criterion (stated in docs/reproduction-bot.md). Over the counted window [warmup,
# horizon), B(t) is the number of bags in the system (arrived, not complete) seen by each arriving
# bag. A stable system's B is stationary: its least-squares trend over the window is noise around
# 0. A setting is *unbounded* when that trend adds more than max(GROWTH_MIN_BAGS, GROWTH_FACTOR x
# the window's mean B) bags across the window (the backlog at least doubles in trend), or when a
# counted bag is still unfinished when the drain limit cuts the run.
GROWTH_MIN_BAGS = 5.0
GROWTH_FACTOR = 1.0
# Evidence for that verdict: the counted window must span SETTLE_MAKESPANS times the shortest makespan
# (first dispatch to completion) of the run's bags, the time the machines need to clear one bag. A bounded
# backlog, filled from empty (a run without warm-up) or raised by a burst of arrivals, comes back down
# only as bags finish; over a window of one or two makespans every bag is still there when the next
# arrives, and the backlog climbs exactly as an unbounded one does (the --quick preset's All_L cells:
# 40,000 s against bags of 18,000 s; bounded at 200,000 s). Five makespans leave a bounded backlog
# time to clear its start several times over; below that, growth (or a bag left unfinished) makes the
# replication "undecided at this horizon", not unbounded. A run whose bags never finish gives no
# makespan: it is undecided too (docs/reproduction-bot.md, "Unbounded").
SETTLE_MAKESPANS = 5.0
BOUNDED, UNBOUNDED, UNDECIDED = "bounded", "unbounded", "undecided"
UNDECIDED_TEXT = "undecided at this horizon"
# Batch means for one replication's interval (bags in submission order).
BATCHES = 10


@dataclass(slots=True)
class BagReplication:
    """One replication's bags reduced to what a summary needs (small: it crosses processes)."""

    replication: int
    turnaround: list[float]  # per counted, completed bag, in submission order
    waiting: list[float]
    makespan: list[float]
    wasted_time: float  # over the counted bags' replicas
    replica_time: float
    tasks: int
    replicas: int
    bags_counted: int
    unfinished: int  # counted bags not complete at the end of the run
    backlog_mean: float
    backlog_growth: float
    rows: list[tuple] = field(default_factory=list)
    # (wasted time, replica time) per counted bag, in submission order: one replication's RWT interval
    bag_times: list[tuple[float, float]] = field(default_factory=list)
    window: float = math.inf  # the counted window's length, horizon - warmup
    settle_time: float = 0.0  # the shortest makespan of the run's bags (inf: none finished)
    # A workload that ran out (a bag list, an SWF trace, max_bags reached): a finite set of bags cannot grow a
    # backlog without bound, so it is judged bounded; its bags left unfinished are said as such (BagSummary).
    finite: bool = False

    @property
    def grows(self) -> bool:
        """The backlog's trend crosses the threshold, or a counted bag was left unfinished."""
        return self.unfinished > 0 or self.backlog_growth > max(GROWTH_MIN_BAGS, GROWTH_FACTOR * self.backlog_mean)

    @property
    def verdict(self) -> str:
        """BOUNDED, UNBOUNDED, or UNDECIDED: growth seen in a window too short to tell (SETTLE_MAKESPANS)."""
        if self.finite or not self.grows:
            return BOUNDED
        return UNBOUNDED if self.window >= SETTLE_MAKESPANS * self.settle_time else UNDECIDED

    @property
    def unbounded(self) -> bool:
        return self.verdict == UNBOUNDED

    @property
    def rwt(self) -> float:
        return self.wasted_time / self.replica_time if self.replica_time > 0 else math.nan


def bag_replicas(bag: BagRecord) -> tuple[int, int, float, float]:
    """(replicas started, replicas wasted, wasted time, machine time of its ended replicas) of a bag."""
    if bag.replica_totals is not None:  # taken when its tasks were dropped (keep_replica_totals)
        return bag.replica_totals
    started = wasted = 0
    wasted_time = replica_time = 0.0
    for rec in bag.tasks:
        for r in rec.history:
            started += 1
            if r.ended is not None:
                replica_time += r.machine_time
                if r.wasted:
                    wasted += 1
                    wasted_time += r.machine_time
    return started, wasted, wasted_time, replica_time


def keep_replica_totals(bag: BagRecord) -> None:
    """A complete bag whose tasks are all over, in a run that keeps no records: its replica totals are taken
    (the same sums, in the same order, as :func:`bag_replicas` makes of its tasks) and its tasks dropped."""
    bag.replica_totals = bag_replicas(bag)
    for task in bag.tasks:
        task.history.clear()  # (a replica points back at its task: a cycle)
    bag.tasks = []


def bag_row(bag: BagRecord, replication: int, counted: bool) -> tuple:
    """One bags.csv row (model time)."""
    started, wasted, wasted_time, replica_time = bag_replicas(bag)
    sub, first, done = bag.submitted, bag.first_dispatch, bag.completed

    def f(x: float | None) -> str:
        return "" if x is None else f"{x:.6f}"

    return (
        replication, bag.id, f(sub), f(first), f(done),
        f(done - sub if done is not None else None), f(first - sub if first is not None else None),
        f(done - first if done is not None and first is not None else None),
        bag.size, started, wasted, f(wasted_time), f(replica_time), "Yes" if counted else "No",
    )


def arrivals_end(workload: Any, bags: Sequence[BagRecord]) -> float:
    """When bags stopped arriving, for a workload that ran out (a bag list, an SWF trace, a stream that reached its
    max_bags): its last bag's arrival; inf for a stream that goes on (its arrivals end with the horizon)."""
    if isinstance(workload, BagStream):
        ran_out = workload.max_bags is not None and len(bags) >= workload.max_bags
    else:
        ran_out = isinstance(workload, (BagList, SwfTrace))
    return max((b.submitted for b in bags), default=math.inf) if ran_out else math.inf


def backlog(bags: Sequence[BagRecord], warmup: float, horizon: float, until: float | None = None
            ) -> tuple[float, float]:
    """(mean, fitted growth across the window) of the bags in system seen by arrivals in [warmup, horizon): the
    window ends at ``until`` (default ``horizon``; a workload that ran out before it: its last arrival)."""
    ends = sorted(b.completed if b.completed is not None else math.inf for b in bags)
    times: list[float] = []
    counts: list[float] = []
    done = 0
    for i, b in enumerate(bags):  # arrival order
        t = b.submitted
        while done < len(ends) and ends[done] <= t:
            done += 1
        if warmup <= t < horizon:
            times.append(t)
            counts.append(float(i - done))  # arrived before it, not complete at its arrival
    n = len(times)
    if n < 3:
        return (sum(counts) / n if n else 0.0), 0.0
    mt = sum(times) / n
    mc = sum(counts) / n
    sxx = sum((t - mt) ** 2 for t in times)
    if sxx <= 0:
        return mc, 0.0
    slope = sum((t - mt) * (c - mc) for t, c in zip(times, counts)) / sxx
    return mc, slope * ((horizon if until is None else until) - warmup)


def reduce_bags(run: Any, warmup: float, horizon: float, keep_rows: bool = False,
                excluded: Collection[int] = (), ran_out: float = math.inf) -> BagReplication:
    """Reduce a sim.ReplicationRun: bags submitted in [warmup, horizon) are counted, but those ``excluded`` (ids:
    a testbed's bags with a task caught in a mapper outage, whose times include it). ``ran_out``: when a finite
    workload's last bag arrived (arrivals_end): the backlog's trend is judged over the arrivals there were, not
    stretched to a horizon with none (three bags at 0, 10 and 20 read as a backlog growing without bound)."""
    turnaround: list[float] = []
    waiting: list[float] = []
    makespan: list[float] = []
    wasted_time = replica_time = 0.0
    tasks = replicas = counted = unfinished = 0
    rows: list[tuple] = []
    bag_times: list[tuple[float, float]] = []
    for bag in run.bags:
        is_counted = warmup <= bag.submitted < horizon and bag.id not in excluded
        if keep_rows:
            rows.append(bag_row(bag, run.replication, is_counted))
        if not is_counted:
            continue
        counted += 1
        tasks += bag.size
        started, _, wasted, machine_time = bag_replicas(bag)
        replicas += started
        wasted_time += wasted
        replica_time += machine_time
        bag_times.append((wasted, machine_time))
        if bag.completed is None:
            unfinished += 1
            continue
        first = bag.first_dispatch if bag.first_dispatch is not None else bag.completed
        turnaround.append(bag.completed - bag.submitted)
        waiting.append(first - bag.submitted)
        makespan.append(bag.completed - first)
    until = horizon if ran_out >= horizon else max(warmup, ran_out)  # (the window's end: arrivals there were)
    mean_b, growth = backlog(run.bags, warmup, horizon, until)
    settle = min((b.completed - b.first_dispatch for b in run.bags
                  if b.completed is not None and b.first_dispatch is not None), default=math.inf)
    return BagReplication(
        run.replication, turnaround, waiting, makespan, wasted_time, replica_time, tasks, replicas, counted,
        unfinished, mean_b, growth, rows, bag_times, until - warmup, settle, ran_out < math.inf,
    )


@dataclass(frozen=True, slots=True)
class Metric:
    mean: float
    low: float
    high: float
    method: str = STUDENT_T  # how the interval was made (mgst.intervals)

    def as_dict(self) -> dict[str, Any]:
        d = {"mean": _num(self.mean), "ci95": [_num(self.low), _num(self.high)]}
        if not is_default(self.method):
            d["interval_method"] = self.method
        return d


def _metric(ci: Interval) -> Metric:
    return Metric(*ci, ci.method)


@dataclass(frozen=True, slots=True)
class BagSummary:
    """AVT, makespan, waiting and RWT with 95 % intervals; None where the setting is unbounded or undecided."""

    replications: int
    bags: int
    tasks: int
    unbounded: bool
    unbounded_replications: int
    avt: Metric | None
    makespan: Metric | None
    waiting: Metric | None
    rwt: Metric | None
    backlog_growth: float
    interval: str  # "replications" (t over replication means) or "batch means" (one replication)
    undecided_replications: int = 0  # growth seen over too short a window to call (SETTLE_MAKESPANS)
    # Of those, the replications where no bag completed at all (no makespan to judge the backlog by)
    idle_replications: int = 0
    # Counted bags not complete when the run ended, of a workload that ran out (its means are of the others)
    unfinished: int = 0

    @property
    def verdict(self) -> str:
        """UNBOUNDED if any replication is; else UNDECIDED if any is; else BOUNDED."""
        return UNBOUNDED if self.unbounded else UNDECIDED if self.undecided_replications else BOUNDED

    def as_dict(self) -> dict[str, Any]:
        def m(x: Metric | None) -> Any:
            return (UNBOUNDED if self.unbounded else UNDECIDED_TEXT) if x is None else x.as_dict()

        return {
            "replications": self.replications, "bags": self.bags, "tasks": self.tasks,
            "unbounded": self.unbounded, "unbounded_replications": self.unbounded_replications,
            "undecided_replications": self.undecided_replications, "verdict": self.verdict,
            "avt": m(self.avt), "makespan": m(self.makespan), "waiting": m(self.waiting), "rwt": m(self.rwt),
            "backlog_growth": _num(self.backlog_growth), "interval": self.interval,
            **({"unfinished_bags": self.unfinished} if self.unfinished else {}),
        }


def rwt_batch_means(rep: BagReplication) -> Metric:
    """One replication's RWT (wasted over all replica time of its counted bags) with a batch-means interval.

    RWT is a ratio: each bag's (wasted, replica time) is linearised about it (the delta method),
    RWT + (wasted - RWT x time) / mean time, whose mean is RWT itself, and those values get the
    batch-means interval of :func:`batch_means_ci` (bags in submission order).
    """
    ratio = rep.rwt
    times = rep.bag_times
    mean_time = sum(t for _, t in times) / len(times) if times else 0.0
    if math.isnan(ratio) or mean_time <= 0:
        return Metric(ratio, math.nan, math.nan)
    ci = batch_means_ci([ratio + (w - ratio * t) / mean_time for w, t in times], BATCHES)
    return Metric(ratio, ci[1], ci[2], ci.method)  # (an interval that stays >= 0: RWT is a share of time)


def summarize_bags(reps: Sequence[BagReplication]) -> BagSummary:
    unbounded = sum(1 for r in reps if r.verdict == UNBOUNDED)
    undecided = sum(1 for r in reps if r.verdict == UNDECIDED)
    growth = max((r.backlog_growth for r in reps), default=0.0)
    base = dict(
        replications=len(reps), bags=sum(r.bags_counted for r in reps), tasks=sum(r.tasks for r in reps),
        unbounded=unbounded > 0, unbounded_replications=unbounded, backlog_growth=growth,
        undecided_replications=undecided,
        idle_replications=sum(1 for r in reps if r.verdict == UNDECIDED and math.isinf(r.settle_time)),
        unfinished=sum(r.unfinished for r in reps if r.finite),
    )
    if len(reps) == 1:
        r = reps[0]
        interval = "batch means"

        def est(values: list[float]) -> Metric:
            return _metric(batch_means_ci(values, BATCHES)) if values else Metric(math.nan, math.nan, math.nan)

        rwt = rwt_batch_means(r)
    else:
        interval = "replications"

        def est(values: list[float]) -> Metric:
            return _metric(mean_ci(values))

        rwt = _metric(mean_ci([r.rwt for r in reps if not math.isnan(r.rwt)]))
    if unbounded or undecided:
        return BagSummary(**base, avt=None, makespan=None, waiting=None, rwt=rwt, interval=interval)
    if len(reps) == 1:
        r = reps[0]
        return BagSummary(**base, avt=est(r.turnaround), makespan=est(r.makespan), waiting=est(r.waiting),
                          rwt=rwt, interval=interval)

    def means(attr: str) -> list[float]:
        return [sum(v) / len(v) for v in (getattr(r, attr) for r in reps) if v]

    return BagSummary(**base, avt=est(means("turnaround")), makespan=est(means("makespan")),
                      waiting=est(means("waiting")), rwt=rwt, interval=interval)


def write_bags_csv(path: Path, rows: Iterable[tuple]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(BAG_COLUMNS)
        w.writerows(rows)


BAG_SUMMARY_COLUMNS = ("Experiment", "Mode", "Policy", "Metric", "Bags", "Mean", "CI95 Low", "CI95 High", "Unit",
                       "Interval", "Unbounded")


def bag_summary_rows(experiment: str, mode: str, policy: str, summary: BagSummary) -> list[list[Any]]:
    """summary.csv's rows of a bag workload (BAG_SUMMARY_COLUMNS): one per metric (AVT, makespan, waiting, RWT),
    with its interval; an unbounded setting's means are left empty (its ``Unbounded`` column says Yes)."""
    def f(x: float) -> str:
        return "" if math.isnan(x) else f"{x:.6f}"

    rows = []
    for name, m, unit in (("AVT", summary.avt, "time units"), ("Makespan", summary.makespan, "time units"),
                          ("Waiting", summary.waiting, "time units"),
                          ("RWT", summary.rwt, "fraction of replica time")):
        values = ["", "", ""] if m is None else [f(m.mean), f(m.low), f(m.high)]
        made = summary.interval if m is None else interval_label(summary.interval, m.method)
        rows.append([experiment, mode, policy, name, summary.bags, *values, unit, made,
                     "Yes" if summary.unbounded else "No"])
    return rows


def _places_for(x: float, places: int) -> int:
    """``places``, or more for a value below 1 that would print with fewer than two significant digits (at most
    12: 0.0004 is not 0.0)."""
    if x == 0 or not math.isfinite(x) or abs(x) >= 10.0 ** (1 - places):
        return places
    return min(12, max(places, 1 - math.floor(math.log10(abs(x)))))


def format_bags(summary: BagSummary, unit: str = "time units") -> str:
    """The summary as text lines for the terminal."""

    def show(name: str, m: Metric | None, scale: float = 1.0, places: int = 1, unit: str = "") -> str:
        if m is None:
            return f"{name:<16} {UNBOUNDED if summary.unbounded else UNDECIDED_TEXT}"
        if math.isnan(m.mean):  # (no counted bag completed: no value, and JSON's null, not "nan")
            return f"{name:<16} n/a (no counted bag completed)"
        note = method_note(m.method)
        mean, low, high = m.mean * scale, m.low * scale, m.high * scale
        # (as many places as the values need: tasks of a thousandth of a unit printed an AVT of 0.0 in (0.0, 0.0))
        p = interval_places(mean, low, high, places) if not math.isnan(low) else _places_for(mean, places)
        ci = note if math.isnan(low) else f"  95 % CI ({low:.{p}f}{unit}, {high:.{p}f}{unit}){note}"
        return f"{name:<16} {mean:.{p}f}{unit}{ci}"

    lines = [
        f"Bags: {summary.bags} counted, {summary.tasks} tasks, {plural(summary.replications, 'replication')} "
        f"(intervals by {summary.interval}; times in {unit})",
        show("AVT (turnaround)", summary.avt), show("Makespan", summary.makespan),
        show("Waiting", summary.waiting), show("RWT", summary.rwt, 100.0, 2, "%"),
    ]
    if summary.unbounded:
        lines.append(
            f"UNBOUNDED: the backlog grows without bound in {summary.unbounded_replications} of "
            f"{plural(summary.replications, 'replication')} (criterion: docs/reproduction-bot.md); no mean is given"
        )
    elif summary.undecided_replications and summary.idle_replications == summary.undecided_replications:
        lines.append(
            f"NO BAG COMPLETED in {summary.idle_replications} of {plural(summary.replications, 'replication')}: "
            "no machine ran a bag's tasks to the end within the run (every one down, excluded, or refused by the "
            "policy), so there is no makespan to judge the backlog by"
        )
    elif summary.unfinished:
        lines.append(
            f"UNFINISHED: {plural(summary.unfinished, 'counted bag')} of {summary.bags} did not complete before the "
            "run ended (the drain limit, or no machine could run a task: down, excluded, or refused by the policy); "
            "the means above are of the bags that did"
        )
    elif summary.undecided_replications:
        lines.append(
            f"UNDECIDED AT THIS HORIZON: the backlog grows in {summary.undecided_replications} of "
            f"{plural(summary.replications, 'replication')}, over a window shorter than {SETTLE_MAKESPANS:g} bag "
            "makespans: "
            "too short to tell a bounded backlog filling up from an unbounded one; run a longer horizon"
        )
    return "\n".join(lines)


def _num(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) or math.isinf(x) else round(x, 6)
