"""The CPU share a machine's jobs were asked to run at, against what they achieved: a_j, or, where the machine's
availability changes its share (a trace, a reclaiming law), the mean share of its periods over each job's
computing (what its puller played); a job of a bundle that waited on its host for a CPU was asked for none while it
waited."""

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
class MachineShare:
    """The CPU share a machine's finished jobs were asked for, on average, and what they achieved."""

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


def bundle_waits(run: TestbedRun) -> dict[int, float]:
    """Model time each replica waited on its host for a CPU (GridBot's bundles: a machine with fewer ``cpus`` than
    ``slots``), by replica id; only those that waited. The core charges a waiting replica nothing and its puller runs
    it at pace 0, so the share it achieved over t4 to t5 counts the wait as no share at all."""
    bundled = {j for j, m in enumerate(run.experiment.machines) if m.computing_slots < m.slots}
    if not bundled:
        return {}
    return {r.id: r.waited for rec in run.core.jobs.values() for r in rec.history
            if r.machine in bundled and r.waited > 0.0}


def asked_shares(run: TestbedRun) -> list[MachineShare | None]:
    """Each machine's mean CPU share its finished jobs were asked for, beside the mean they achieved (None for a
    machine that finished none): a job's is a_j, or its availability's mean share over the job's computing, t4 to
    t5; nothing over the part of it a job of a bundle waited for a CPU (:func:`bundle_waits`)."""
    exp = run.experiment
    waits = bundle_waits(run)
    if exp.failures is None and not waits:  # asked for a_j throughout
        return [MachineShare(m.name, m.share, statistics.fmean(m.achieved), len(m.achieved)) if m.achieved else None
                for m in run.journal.machines]
    tu = run.time_unit
    until = (run.end - run.t0) / tu
    jobs: list[list[tuple[float, float, float, float]]] = [[] for _ in exp.machines]  # (t4, t5, waited, achieved)
    for rid, r in run.journal.replicas.items():
        if r.achieved_share is not None:
            start = (r.t4 - run.t0) / tu if r.t4 is not None else until
            end = (r.t5 - run.t0) / tu if r.t5 is not None else start
            jobs[r.machine].append((start, end, waits.get(rid, 0.0), r.achieved_share))
    out: list[MachineShare | None] = []
    for j, m in enumerate(run.journal.machines):
        if jobs[j]:
            timeline = _Timeline(run, j, until)
            requested = statistics.fmean(_asked(timeline, a, b, w) for a, b, w, _ in jobs[j])
            out.append(MachineShare(m.name, requested, statistics.fmean(x for _, _, _, x in jobs[j]), len(jobs[j])))
        else:
            out.append(None)
    return out


def share_shortfalls(run: TestbedRun) -> list[MachineShare]:
    """The machines whose finished jobs achieved a mean CPU share more than SHARE_SHORTFALL below the mean they
    were asked for (:func:`asked_shares`)."""
    return [s for s in asked_shares(run) if s is not None and s.achieved < s.requested - SHARE_SHORTFALL]


def _asked(timeline: _Timeline, a: float, b: float, waited: float) -> float:
    """The mean share a job was asked for over [a, b]: its machine's, from a + ``waited`` on (none before)."""
    if waited <= 0.0 or b <= a:
        return timeline.mean(a, b)
    computing = max(0.0, b - a - waited)
    return timeline.mean(b - computing, b) * computing / (b - a) if computing > 0.0 else 0.0


__all__ = ["SHARE_SHORTFALL", "MachineShare", "asked_shares", "bundle_waits", "share_shortfalls"]
