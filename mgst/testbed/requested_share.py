"""The CPU share a machine's jobs were asked to run at, against what they achieved: a_j, or, where the machine's
availability changes its share (a trace, a reclaiming law), the mean share of its periods over each job's
computing (what its puller played)."""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass

from mgst.availability.registry import make_process
from mgst.testbed.run_result import TestbedRun

# A machine whose mean achieved CPU share falls short of the mean it was asked for by more than this gets a
# warning in the summary, and is named as a cause of a gap.
SHARE_SHORTFALL = 0.05


@dataclass(frozen=True, slots=True)
class ShareShortfall:
    """A machine that achieved less CPU than it was asked for, over its finished jobs."""

    name: str
    requested: float  # mean over its finished jobs
    achieved: float
    jobs: int


class _Timeline:
    """One machine's availability shares over model time [0, until): period starts, and the share from each."""

    def __init__(self, run: TestbedRun, machine: int, until: float):
        self.starts: list[float] = []
        self.shares: list[float] = []
        process = make_process(run.experiment, run.seed, 0, machine)
        at = 0.0
        while process is not None and at < until:
            period = process.next()
            self.starts.append(at)
            self.shares.append(period.cpu_share)
            at += period.duration
        self.starts.append(at)  # (the last period's end; a_j after it, as a puller does)
        self.shares.append(run.experiment.machines[machine].availability)

    def mean(self, a: float, b: float) -> float:
        """The time-weighted mean share over [a, b] (the share at a when b <= a)."""
        k = max(0, bisect.bisect_right(self.starts, a) - 1)
        if b <= a:
            return self.shares[k]
        total, at = 0.0, a
        while at < b:
            end = self.starts[k + 1] if k + 1 < len(self.starts) else math.inf
            part = min(b, end)
            total += (part - at) * self.shares[k]
            at, k = part, k + 1
        return total / (b - a)


def share_shortfalls(run: TestbedRun) -> list[ShareShortfall]:
    """The machines whose finished jobs achieved a mean CPU share more than SHARE_SHORTFALL below the mean they
    were asked for (each job's: a_j, or its availability's mean share over the job's computing, t4 to t5)."""
    exp = run.experiment
    out = []
    if exp.failures is None:  # asked for a_j throughout
        for m in run.journal.machines:
            if m.achieved and statistics.fmean(m.achieved) < m.share - SHARE_SHORTFALL:
                out.append(ShareShortfall(m.name, m.share, statistics.fmean(m.achieved), len(m.achieved)))
        return out
    tu = run.time_unit
    until = (run.end - run.t0) / tu
    jobs: list[list[tuple[float, float, float]]] = [[] for _ in exp.machines]  # (t4, t5, achieved), model time
    for r in run.journal.replicas.values():
        if r.achieved_share is not None:
            start = (r.t4 - run.t0) / tu if r.t4 is not None else until
            end = (r.t5 - run.t0) / tu if r.t5 is not None else start
            jobs[r.machine].append((start, end, r.achieved_share))
    for j, m in enumerate(run.journal.machines):
        if jobs[j]:
            timeline = _Timeline(run, j, until)
            requested = statistics.fmean(timeline.mean(a, b) for a, b, _ in jobs[j])
            achieved = statistics.fmean(x for _, _, x in jobs[j])
            if achieved < requested - SHARE_SHORTFALL:
                out.append(ShareShortfall(m.name, requested, achieved, len(jobs[j])))
    return out


__all__ = ["SHARE_SHORTFALL", "ShareShortfall", "share_shortfalls"]
