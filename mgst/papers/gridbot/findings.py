"""GridBot's findings judged on a sweep's rows (mgst.papers.gridbot.scenario): each claim holds, does not hold, or is
undecided, with the figure it rests on.

Comparisons are paired: cells of one seed and replication share their hosts' draws (common random numbers), so a
difference is taken per replication and its 95 % Student-t interval decides: a claim "A is faster than B" holds when
the interval of T(B) - T(A) lies above 0, does not hold when it lies below, and is undecided when it straddles 0.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.papers.gridbot.metrics import bags_of
from mgst.papers.reproduction import DOES_NOT_HOLD, HOLDS, UNDECIDED

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Paired:
    """The mean of per-replication differences and its 95 % interval (nan with fewer than 2)."""

    mean: float
    low: float
    high: float
    n: int

    def verdict(self) -> str:
        if self.n == 0:
            return UNDECIDED
        if self.n == 1:
            return HOLDS if self.mean > 0 else DOES_NOT_HOLD if self.mean < 0 else UNDECIDED
        return HOLDS if self.low > 0 else DOES_NOT_HOLD if self.high < 0 else UNDECIDED


def read_rows(paths: Iterable[Path]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in paths:
        if path.exists():
            with path.open(newline="", encoding="utf-8") as f:
                rows += [r for r in csv.DictReader(f) if not r.get("error")]
    return rows


def _t95(n: int) -> float:
    from scipy import stats  # noqa: PLC0415

    return float(stats.t.ppf(0.975, n - 1))


def paired(rows: Sequence[Mapping[str, str]], experiment: str, reading: str, faster: str, slower: str,
           metric: str = "turnaround") -> Paired:
    """T(slower) - T(faster), per (seed, replication) both have."""
    by: dict[str, dict[tuple[str, str], float]] = {faster: {}, slower: {}}
    for r in rows:
        if r["experiment"] == experiment and r["reading"] == reading and r["variant"] in by:
            by[r["variant"]][(r["seed"], r["replication"])] = float(r[metric])
    keys = sorted(set(by[faster]) & set(by[slower]))
    diffs = [by[slower][k] - by[faster][k] for k in keys]
    if not diffs:
        return Paired(math.nan, math.nan, math.nan, 0)
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return Paired(mean, math.nan, math.nan, len(diffs))
    half = _t95(len(diffs)) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return Paired(mean, mean - half, mean + half, len(diffs))


def means(rows: Sequence[Mapping[str, str]], experiment: str, reading: str, metric: str) -> dict[str, float]:
    """Each variant's mean of ``metric`` over its replications."""
    out: dict[str, list[float]] = {}
    for r in rows:
        if r["experiment"] == experiment and r["reading"] == reading:
            out.setdefault(r["variant"], []).append(float(r[metric]))
    return {v: statistics.fmean(x) for v, x in out.items()}


def combine(verdicts: Sequence[str]) -> str:
    return DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else UNDECIDED if UNDECIDED in verdicts else HOLDS


def replication_ordering(rows: Sequence[Mapping[str, str]], reading: str, part: str = "both") -> tuple[str, str]:
    """Finding 1: RR has the lowest turnaround (``part`` "lowest"), both disabled variants the highest ("highest"), or
    both. (verdict, figure)"""
    have = set(means(rows, "replication", reading, "turnaround"))
    if not {"PP", "RR", "PR", "DP", "DR"} <= have:
        return UNDECIDED, f"not run under the {reading} reading"
    lowest = [paired(rows, "replication", reading, "RR", x) for x in ("PP", "PR", "DP", "DR")]
    highest = [paired(rows, "replication", reading, x, d) for d in ("DP", "DR") for x in ("PP", "RR", "PR")]
    judged = lowest if part == "lowest" else highest if part == "highest" else lowest + highest
    verdict = combine([p.verdict() for p in judged])
    t = means(rows, "replication", reading, "turnaround")
    rep = means(rows, "replication", reading, "replicas_pct")
    waste = means(rows, "replication", reading, "waste_pct")
    order = " < ".join(f"{v} {t[v] / HOUR:.2f} h" for v in sorted(t, key=t.get))  # type: ignore[arg-type]
    n = lowest[0].n
    pairs = "; ".join(f"T({b}) - T({a}) [{p.low:.0f}, {p.high:.0f}] s" for (a, b), p in zip(
        [("RR", x) for x in ("PP", "DP")] + [("PP", "DP")],
        [lowest[0], lowest[2], highest[0]]))
    detail = "; ".join(f"{v}: replicas {rep[v]:.1f} %, waste {waste[v]:.1f} %" for v in ("PP", "RR"))
    return verdict, (f"{reading} reading, {n} paired replications: {order} (paper: RR 3.2 h < PP 4.1 < PR 4.2 < "
                     f"DP 5.1 < DR 5.8); {pairs}; {detail} (paper: 58/30, 11/7)")


def ratio_claim(rows: Sequence[Mapping[str, str]], experiment: str, slow: str, fast: str, reading: str,
                paper: str) -> tuple[str, str]:
    """``fast`` (GridBot) has a lower turnaround than ``slow``; the figure gives the ratio beside the paper's."""
    p = paired(rows, experiment, reading, fast, slow)
    t = means(rows, experiment, reading, "turnaround")
    if fast not in t or slow not in t:
        return UNDECIDED, f"{experiment}: not run"
    return p.verdict(), (f"{reading} reading, {p.n} paired replications: {slow} {t[slow] / HOUR:.2f} h, {fast} "
                         f"{t[fast] / HOUR:.2f} h, ratio {t[slow] / t[fast]:.1f} (paper: {paper})")


def priority_order(rows: Sequence[Mapping[str, str]], reading: str = "default") -> tuple[str, str]:
    """Finding 4: in every replication, each bag reaches 1,000 of 1,200 remaining jobs (5/6 of its size) no later
    than every lower-ranked bag."""
    runs = [r for r in rows if r["experiment"] == "priorities" and r["reading"] == reading]
    if not runs:
        return UNDECIDED, "priorities: not run"
    worst = 0
    late = {"100": 0, "0": 0}
    for r in runs:
        bags = sorted(bags_of(r), key=lambda b: -(b["priority"] or 0))
        starts = [_reach(b, 1000 / 1200) for b in bags]
        worst += sum(1 for i in range(len(starts)) for j in range(i + 1, len(starts)) if starts[j] < starts[i])
        for key, share in (("100", 100 / 1200), ("0", 0.0)):
            ends = [_reach(b, share) for b in bags]
            late[key] += sum(1 for i in range(len(ends) - 1) if ends[i + 1] < ends[i])
    size = bags_of(runs[0])[0]["size"]
    verdict = HOLDS if worst == 0 else DOES_NOT_HOLD
    return verdict, (f"{len(runs)} runs of 50 bags of {size} jobs: {worst} pairs where a lower-ranked bag reached "
                     f"{round(size * 1000 / 1200)} remaining jobs first (paper: none); out of rank order at "
                     f"{round(size * 100 / 1200)} remaining: {late['100']} neighbours, at the end: {late['0']} "
                     "(the paper: deviations below 100 remaining, in the tail)")


def _reach(bag: Mapping[str, Any], share: float) -> float:
    value = bag["reach"].get(str(round(bag["size"] * share)))
    return math.inf if value is None else float(value)


def small_bags(rows: Sequence[Mapping[str, str]], reading: str = "default") -> tuple[str, str]:
    """Finding 5: bundles of 10 (B1) give a longer tail than one job at a time (B3), and a tail reserved for the
    cluster (B5) is slower than B3; the figure gives the ordering of B1 to B5."""
    runs = [r for r in rows if r["experiment"] == "small-bags" and r["reading"] == reading]
    if not runs:
        return UNDECIDED, "small-bags: not run"
    per_bag: dict[int, list[float]] = {}
    tails: dict[int, list[float]] = {}
    for r in runs:
        for b in bags_of(r):
            per_bag.setdefault(b["id"], []).append(b["turnaround"])
            # the tail's length: from 1/12 of its jobs remaining (100 of 1,200) to its end
            tails.setdefault(b["id"], []).append(_reach(b, 0.0) - _reach(b, 100 / 1200))
    t = {k: statistics.fmean(v) for k, v in per_bag.items()}
    tail = {k: statistics.fmean(v) for k, v in tails.items()}
    b1_tail = HOLDS if tail[0] > tail[2] else DOES_NOT_HOLD
    b5_slow = HOLDS if t[4] > t[2] else DOES_NOT_HOLD
    order = " < ".join(f"B{k + 1} {t[k] / HOUR:.2f} h" for k in sorted(t, key=t.get))  # type: ignore[arg-type]
    return combine([b1_tail, b5_slow]), (
        f"{len(runs)} runs: {order}; the last twelfth of each bag's jobs (the paper's last 100 of 1,200) take B1 "
        f"{tail[0] / 60:.0f} min, B2 {tail[1] / 60:.0f}, B3 {tail[2] / 60:.0f}, B4 {tail[3] / 60:.0f}, B5 "
        f"{tail[4] / 60:.0f} min")


def static_tail(rows: Sequence[Mapping[str, str]], threshold: int, reading: str = "default") -> tuple[str, str]:
    """Finding 6: R4's true tail (its incomplete jobs when its last task was first sent) lies far above its static
    threshold."""
    runs = [r for r in rows if r["experiment"] == "community" and r["reading"] == reading]
    if not runs:
        return UNDECIDED, "community: not run"
    r4 = [b["tail_incomplete"] for r in runs for b in bags_of(r) if b["id"] == 3 and b["tail_incomplete"]]
    if not r4:
        return UNDECIDED, "R4 never sent all its tasks"
    mean = statistics.fmean(r4)
    size = bags_of(runs[0])[3]["size"]
    t = {b["id"]: b["turnaround"] for b in bags_of(runs[0])}
    return (HOLDS if min(r4) > threshold else DOES_NOT_HOLD), (
        f"{len(runs)} runs of four {size}-job bags: R4's true tail began at {mean:.0f} incomplete jobs "
        f"({100 * mean / size:.0f} % of the bag; paper: about 10,000 of 30,000, 33 %), its static threshold "
        f"{threshold} ({100 * threshold / size:.1f} %); turnarounds of the first run R1..R4: "
        + ", ".join(f"{t[k] / HOUR:.2f} h" for k in sorted(t)))
