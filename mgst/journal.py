"""The testbed's event journal: every observable instant of every job and machine, and its CSV export."""

from __future__ import annotations

import csv
import datetime as dt
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from mgst.clock import OffsetEstimator
from mgst.model import Experiment, Job
from mgst.results import JOB_COLUMNS


def wall_iso(t: float | None) -> str:
    """A wall-clock time as an ISO 8601 local timestamp with microseconds (spreadsheets read it)."""
    if t is None:
        return ""
    return dt.datetime.fromtimestamp(t).isoformat(sep=" ", timespec="microseconds")


@dataclass(slots=True)
class ReplicaLog:
    """The instants of section 4.3.2 for one replica, all on the mapper's clock (seconds).

    t1 the puller announced it was free, t2 the mapper learnt it, t3 the decision
    was made and the job sent, t4r the puller received it, t4 it started, t5 it
    finished, t6 the mapper learnt it was done. There is no result transfer, so
    the paper's t7 is t6. Puller-side instants are kept as the puller stamped them
    (``*_remote``) and put on the mapper's clock by :meth:`Journal.correct` at the
    end, with the offset estimated from the heartbeats around each instant.
    """

    replica: int
    job: int
    machine: int
    t1_remote: float | None
    t2: float | None
    t3: float
    t4r_remote: float | None = None
    t4_remote: float | None = None
    t5_remote: float | None = None
    t6: float | None = None
    t1: float | None = None  # the corrected instants, set by Journal.correct()
    t4r: float | None = None
    t4: float | None = None
    t5: float | None = None
    outcome: str = "running"  # done, cancelled, lost, timeout, failed, cut off
    achieved_share: float | None = None


@dataclass(slots=True)
class JobLog:
    job: Job
    submitted: float  # wall time of arrival
    replicas: list[int] = field(default_factory=list)
    done_by: int | None = None
    timed_out: bool = False
    requeues: int = 0


@dataclass(slots=True)
class MachineLog:
    name: str
    share: float  # requested a_j
    clock: OffsetEstimator = field(default_factory=OffsetEstimator)  # of this machine's clock
    periods: list[list[float | None]] = field(default_factory=list)  # [up_since, down_at] on the mapper's clock
    achieved: list[float] = field(default_factory=list)  # per finished job
    jobs_run: int = 0
    offset: float = 0.0
    rtt: float | None = None
    incarnations: int = 0
    speed: float = 0.0  # calibrated spin-kernel iterations per second, as the puller reported


class Journal:
    """Written by the mapper as things happen; read at the end for CSVs and statistics."""

    def __init__(self, experiment: Experiment):
        self.experiment = experiment
        self.jobs: dict[int, JobLog] = {}
        self.replicas: dict[int, ReplicaLog] = {}
        self.machines = [MachineLog(m.name, m.availability) for m in experiment.machines]
        self.start: float | None = None  # wall time of model time 0

    # --- recording ----------------------------------------------------------

    def job_arrived(self, job: Job, wall: float) -> None:
        self.jobs[job.id] = JobLog(job, wall)

    def sent(self, replica: int, job: int, machine: int, t1_remote: float | None, t2: float | None,
             t3: float) -> None:
        self.replicas[replica] = ReplicaLog(replica, job, machine, t1_remote, t2, t3)
        self.jobs[job].replicas.append(replica)

    def machine_up(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if not periods or periods[-1][1] is not None:
            periods.append([wall, None])

    def machine_down(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if periods and periods[-1][1] is None:
            periods[-1][1] = wall

    def end(self, outcome: str, replica: int) -> None:
        r = self.replicas.get(replica)
        if r is not None and r.outcome == "running":
            r.outcome = outcome

    def correct(self) -> None:
        """Put every puller-stamped instant on the mapper's clock (call once the run is over)."""
        for m in self.machines:
            m.offset = m.clock.offset
            m.rtt = m.clock.rtt
        for r in self.replicas.values():
            clock = self.machines[r.machine].clock
            r.t1 = None if r.t1_remote is None else clock.to_local(r.t1_remote)
            r.t4r = None if r.t4r_remote is None else clock.to_local(r.t4r_remote)
            r.t4 = None if r.t4_remote is None else clock.to_local(r.t4_remote)
            r.t5 = None if r.t5_remote is None else clock.to_local(r.t5_remote)

    # --- statistics ----------------------------------------------------------

    def done_replicas(self) -> list[ReplicaLog]:
        return [self.replicas[j.done_by] for j in self.jobs.values() if j.done_by is not None]

    def delays(self) -> dict[str, dict[str, float | int | None]]:
        """Delays in seconds: communication (t4 - t3), scheduling (t3 - max(t2, submission)),
        request (t2 - t1) and report (t6 - t5), over the replicas that completed their jobs."""
        done = self.done_replicas()
        submitted = {j.done_by: j.submitted for j in self.jobs.values() if j.done_by is not None}
        return {
            "communication_delay_s": _stats([r.t4 - r.t3 for r in done if r.t4 is not None]),
            # from the moment both the job and the machine's request were there to the decision
            "scheduling_delay_s": _stats([r.t3 - max(r.t2, submitted[r.replica]) for r in done
                                          if r.t2 is not None]),
            "request_delay_s": _stats([r.t2 - r.t1 for r in done if r.t1 is not None and r.t2 is not None]),
            "report_delay_s": _stats([r.t6 - r.t5 for r in done if r.t5 is not None and r.t6 is not None]),
        }

    # --- export ----------------------------------------------------------------

    EXTRA = (
        "Response Time", "Replicas", "Requeues", "Size", "Puller Free (t1)", "Mapper Learnt Free (t2)",
        "Puller Received", "Puller Finished (t5)", "Communication Delay (s)", "Scheduling Delay (s)", "Counted",
    )

    def write_jobs_csv(self, path: Path, time_unit: float, counted: set[int], status: dict[int, str]) -> None:
        names = [m.name for m in self.experiment.machines]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(JOB_COLUMNS + self.EXTRA)
            for jid in sorted(self.jobs):
                j = self.jobs[jid]
                r = self.replicas.get(j.done_by) if j.done_by is not None else (
                    self.replicas[j.replicas[-1]] if j.replicas else None)
                done = j.done_by is not None and r is not None and r.t6 is not None
                w.writerow([
                    jid, r.replica if r else "", j.job.job_class + 1, names[r.machine] if r else "",
                    wall_iso(j.submitted), wall_iso(r.t3 if r else None), wall_iso(r.t4 if r else None),
                    wall_iso(r.t6 if done else None), status.get(jid, "Queued"), "Yes" if j.timed_out else "No",
                    f"{(r.t6 - j.submitted) / time_unit:.6f}" if done else "", len(j.replicas), j.requeues,
                    f"{j.job.size:.6f}", wall_iso(r.t1 if r else None), wall_iso(r.t2 if r else None),
                    wall_iso(r.t4r if r else None), wall_iso(r.t5 if r else None),
                    f"{r.t4 - r.t3:.6f}" if r and r.t4 is not None else "",
                    f"{r.t3 - max(r.t2, j.submitted):.6f}" if r and r.t2 is not None else "",
                    "Yes" if jid in counted else "No",
                ])

    def write_machines_csv(self, path: Path, end: float) -> None:
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["Machine", "Up From", "Down At", "Up (s)", "CPU Share Requested", "CPU Share Achieved",
                        "Jobs Run", "Clock Offset (s)", "Min RTT (s)", "Registrations", "Calibrated Speed (it/s)"])
            for m in self.machines:
                achieved = f"{statistics.fmean(m.achieved):.4f}" if m.achieved else ""
                periods = m.periods or [[None, None]]
                for up, down in periods:
                    length = (down if down is not None else end) - up if up is not None else 0.0
                    w.writerow([m.name, wall_iso(up), wall_iso(down), f"{length:.3f}", m.share, achieved,
                                m.jobs_run, f"{m.offset:.6f}", f"{m.rtt:.6f}" if m.rtt is not None else "",
                                m.incarnations, f"{m.speed:.4g}"])


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "mean": None, "p99": None, "max": None}
    v = sorted(values)
    return {
        "n": len(v),
        "median": statistics.median(v),
        "mean": statistics.fmean(v),
        "p99": v[min(len(v) - 1, math.ceil(0.99 * len(v)) - 1)],
        "max": v[-1],
    }
