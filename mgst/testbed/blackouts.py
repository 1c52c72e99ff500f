"""The stretches of a testbed run in which no machine was up at once: a whole grid down (a partition of the head
node's network, every puller stopped), which no one machine's downtime shows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from mgst.testbed.run_result import TestbedRun, run_began


def merged(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of (start, end) intervals, as disjoint intervals in order (empty ones dropped)."""
    out: list[tuple[float, float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def uncovered(covered: Sequence[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """The parts of [start, end] that no interval of ``covered`` (disjoint, in order) covers."""
    gaps, at = [], start
    for a, b in covered:
        if a > at:
            gaps.append((at, min(a, end)))
        at = max(at, b)
        if at >= end:
            break
    if at < end:
        gaps.append((at, end))
    return [(a, b) for a, b in gaps if b > a]


def overlap(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """The length of the intersection of two unions of disjoint intervals in order."""
    total, i, j = 0.0, 0, 0
    while i < len(a) and j < len(b):
        low, high = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, high - low)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def all_down(run: TestbedRun) -> tuple[float, float]:
    """Wall seconds of the run in which no machine was up, and the run's span they are counted in (both without the
    mapper's outages and each resume's wait for its pullers, model time standing still then)."""
    began, end = run_began(run), run.end
    ups = merged((max(up, began), min(end if down is None else down, end))
                 for m in run.journal.machines for up, down in m.periods if up is not None)
    # (a mapper's outage and the wait after it for its pullers: not the machines')
    waits = [float(r.get("reconnect_s") or 0.0) for r in run.resumes]
    held = merged((last, resumed + (waits[k] if k < len(waits) else 0.0))
                  for k, (last, resumed) in enumerate(run.journal.outages))
    gaps = uncovered(ups, began, end)
    down = sum(b - a for a, b in gaps) - overlap(gaps, held)
    span = max(1e-9, end - began - sum(b - a for a, b in held if b > began))
    return max(0.0, down), span


def law_all_down(fractions: Sequence[float]) -> float:
    """The long-run share of time every machine is down at once by its failure law, the machines independent
    (``fractions``: each machine's long-run fraction of capacity, up fraction times share)."""
    return math.prod(max(0.0, 1.0 - f) for f in fractions)
