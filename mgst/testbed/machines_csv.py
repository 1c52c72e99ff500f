"""A testbed run's machines for spreadsheets: machines.csv (one row per machine) and machine_periods.csv (one
row per up period)."""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from mgst.testbed.journal import Journal, MachineLog
from mgst.testbed.local_time import wall_iso
from mgst.testbed.requested_share import asked_shares
from mgst.testbed.run_result import TestbedRun, run_began

MACHINE_COLUMNS = (
    "Machine", "State At End", "Expelled Because", "CPU Share Requested", "CPU Share Asked", "CPU Share Achieved",
    "Jobs Run",
    "Up (s)", "Down Periods", "Registrations", "Reconnections", "Refusals", "Suspicions", "Time-outs",
    "Clock Offset (s)", "Min RTT (s)", "Calibrated Speed (it/s)",
    # busy time over the run's length and the machine's CPUs, as summary.json's machines; the simulation's beside it
    # (the mean of its replications; empty without a simulation)
    "Utilisation", "Simulated Utilisation",
)
PERIOD_COLUMNS = ("Machine", "Up From", "Up To", "Up (s)", "Ended By")  # Up To: down, or the run's end


def state_at_end(m: MachineLog) -> str:
    """up, down, suspected (taken down by the policy without a failure, not back since), left (its puller said it
    leaves: --idle-exit, a stop), or expelled (taken out of the run for good, and not back since)."""
    last = m.periods[-1] if m.periods else None
    if m.expelled is not None and (last is None or last[0] is None or last[0] <= m.expelled[0]):
        return "expelled"
    if last is not None and last[1] is None:
        return "up"
    if last is not None and last[1] in m.suspected:
        return "suspected"
    return "left" if last is not None and last[1] in m.left else "down"


def outage_starts(journal: Journal) -> set[float]:
    """The wall times the mapper's outages began: a period that ended at one was cut by it, not by a failure."""
    return {began for began, _ in journal.outages}


def ended_by(m: MachineLog, down: float | None, outages: set[float]) -> str:
    """What ended an up period at ``down``: "run end" (None), "expelled", "suspected" (by the policy, without a
    failure), "left" (its puller said it leaves), "mapper outage", or "down" (a failure)."""
    if down is None:
        return "run end"
    if m.expelled is not None and down == m.expelled[0]:
        return "expelled"
    if down in m.suspected:
        return "suspected"
    if down in m.left:
        return "left"
    return "mapper outage" if down in outages else "down"


def up_seconds(m: MachineLog, start: float, end: float) -> float:
    """Wall seconds the machine was up in the run, from its ``start`` (a puller registers before it) to its ``end``
    (an open period runs to it)."""
    return sum(max(0.0, min(down if down is not None else end, end) - max(up, start))
               for up, down in m.periods if up is not None)


def down_periods(m: MachineLog, outages: set[float], began: float) -> int:
    """How many times the machine went down in the run, from ``began`` (not its periods cut by a mapper's outage,
    nor its expulsion, nor a restart while the pullers registered: a puller started again before the run began)."""
    return sum(1 for up, down in m.periods if up is not None and down is not None
               and down >= began and ended_by(m, down, outages) == "down")


def write_machines_csv(run: TestbedRun, path: Path, utilisation: Sequence[float] = (),
                       simulated: Sequence[float] = ()) -> None:
    """One row per machine: its totals (requested and achieved share, jobs, up time, incidents), its
    ``utilisation`` and the simulation's beside it (``simulated``; each empty where not given)."""
    refusals = Counter(r.machine for r in run.journal.replicas.values() if r.outcome == "refused")
    outages = outage_starts(run.journal)
    began = run_began(run)
    asked = asked_shares(run)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(MACHINE_COLUMNS)
        for j, m in enumerate(run.journal.machines):
            stats = run.core.machines[j].stats
            share = asked[j]
            w.writerow([
                m.name, state_at_end(m), m.expelled[1] if m.expelled is not None else "", m.share,
                f"{share.requested:.4f}" if share is not None else "",
                f"{statistics.fmean(m.achieved):.4f}" if m.achieved else "", m.jobs_run,
                f"{up_seconds(m, began, run.end):.3f}", down_periods(m, outages, began), m.registrations,
                m.reconnections, refusals[j], stats.suspicions, stats.timed_out, f"{m.offset:.6f}",
                f"{m.rtt:.6f}" if m.rtt is not None else "", f"{m.speed:.4g}",
                *(f"{u[j]:.4f}" if j < len(u) else "" for u in (utilisation, simulated)),
            ])


def write_periods_csv(run: TestbedRun, path: Path) -> None:
    """One row per up period of each machine (ISO 8601 local times, as in jobs.csv), and what ended it."""
    outages = outage_starts(run.journal)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(PERIOD_COLUMNS)
        for m in run.journal.machines:
            for up, down in m.periods:
                if up is None:
                    continue
                until = down if down is not None else run.end
                w.writerow([m.name, wall_iso(up, run.utc_offset_s), wall_iso(until, run.utc_offset_s),
                            f"{until - up:.3f}",
                            ended_by(m, down, outages)])
