"""A testbed run's results: the summary (same schema as a simulation's), the delays, the output files."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mgst.bot_metrics import BagReplication, arrivals_end, reduce_bags, summarize_bags, write_bags_csv
from mgst.build_info import installed_version
from mgst.config.checks import overload_warning
from mgst.core.scheduler import out_of_queue_text
from mgst.core.state import JobStatus
from mgst.intervals import batch_means_ci
from mgst.model import EXECUTORS, Experiment
from mgst.policies.allocation import solve_allocation
from mgst.results import BATCH_MEANS, Estimate, Summary, waste_of, write_summary_csv
from mgst.steady_state import WINDOWS, windows_growth_warning
from mgst.testbed.local_time import offset_iso, wall_iso_offset
from mgst.testbed.machines_csv import (
    down_periods,
    outage_starts,
    state_at_end,
    write_machines_csv,
    write_periods_csv,
)
from mgst.testbed.requested_share import asked_shares, share_shortfalls
from mgst.testbed.run_result import TestbedRun, run_began
from mgst.whole_file import write_whole

# A single run has no replications; its confidence intervals come from batch means
# over this many consecutive batches of jobs (by submission time), per class and overall.
BATCHES = 10
# summary.json lists this many of the mapper's longest stalls, with the count and sum of all of them.
MAX_STALLS_LISTED = 20
# Why jobs went back to their queue: how the replica that was their last ended (mgst.testbed.journal's outcomes).
REQUEUE_CAUSES = {
    "lost": "their machine down",
    "unheld": "sent as their puller reconnected, never received",
    "failed": "failed on their puller",
    "refused": "refused by their puller's allow-list",
    "cancelled": "cancelled by the policy",
    "timeout": "on a replica's time-out",
    "unknown": "cause not journalled",
}


def requeue_causes(journal: Any) -> dict[str, int]:
    """The jobs sent back to their queue, counted by how their last replica ended (REQUEUE_CAUSES' order)."""
    causes = journal.requeue_causes
    order = [k for k in REQUEUE_CAUSES if causes.get(k)] + sorted(k for k in causes if k not in REQUEUE_CAUSES)
    return {k: causes[k] for k in order}


def format_requeues(total: int, by_cause: dict[str, int]) -> str:
    """"N resubmitted", with their causes when any is known: "(2 their machine down, 1 failed on their puller)"."""
    if not by_cause:
        return f"{total} resubmitted"
    return f"{total} resubmitted ({', '.join(f'{n} {REQUEUE_CAUSES.get(k, k)}' for k, n in by_cause.items())})"


def oversubscription_warning(experiment: Experiment, executor: str, cpus: int | None = None) -> str | None:
    """A warning if the pullers of a local run need more CPU than the host has, else None.

    With the spin and command executors each puller burns its machine's share a_j of
    a core, so a local run needs sum a_j cores; ``cpus`` defaults to the CPUs this
    process may use. None for the emulate executor (it burns no CPU) or when it fits.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "emulate":
        return None
    if cpus is None:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if not cpus:
            return None
    need = sum(experiment.availability)
    if need <= cpus:
        return None
    n = len(experiment.machines)
    return (
        f"the {n} {executor} pullers of this local run ask for {need:g} CPUs in all (the sum of the "
        f"machines' availabilities a_j) but this host has {cpus}; they will compete for the cores and "
        "their achieved CPU shares will fall short of the requested ones, so jobs run slower than the model "
        "says (three spin pullers on two cores achieved 0.62 and 0.78 for 1.0); use the emulate executor, "
        "fewer machines, or pullers on more hosts"
    )


def share_warnings(run: TestbedRun) -> list[str]:
    """One sentence per machine whose mean achieved CPU share falls short of the mean it was asked for by more
    than SHARE_SHORTFALL (mgst.testbed.requested_share: a_j, or its availability's shares over its jobs)."""
    return [f"machine {s.name} achieved a mean CPU share of {s.achieved:.2f} for the {s.requested:.2f} requested "
            f"(over {s.jobs} jobs): its jobs ran slower than the model says, so response times are longer than a "
            "simulation's" for s in share_shortfalls(run)]


def expelled_warnings(run: TestbedRun) -> list[str]:
    """One sentence per machine the mapper took out of the run for good."""
    return [f"machine {m.name} was expelled from the run at {wall_iso_offset(m.expelled[0], run.utc_offset_s)}: "
            f"{m.expelled[1]} "
            "(its jobs went to the other machines; check its allow-list)"
            for m in run.journal.machines if m.expelled is not None]


def stray_warnings(run: TestbedRun) -> list[str]:
    """A sentence on jobs the policy took out of its view's queues (they never ran, cut off at the end)."""
    strays = run.core.out_of_queue()
    return [out_of_queue_text(strays)] if strays else []


def counted_jobs(run: TestbedRun) -> set[int]:
    """The jobs the statistics count: done, submitted in [warm-up, horizon), and not caught in a
    mapper outage (their times would include it)."""
    horizon = (run.generation_end - run.t0) / run.time_unit
    return {jid for jid, jl in run.journal.jobs.items()
            if jl.done_by is not None and run.warmup <= jl.job.submitted < horizon and not jl.across_outage
            and run.journal.replicas[jl.done_by].t6 is not None}


def testbed_bags(run: TestbedRun, keep_rows: bool = False) -> BagReplication:
    """The run's bags as the mapper saw them (model time: submitted as generated, first dispatch when
    sent, completion when the result arrived), reduced like a simulation's; those with a task caught in a mapper
    outage are not counted."""
    horizon = (run.generation_end - run.t0) / run.time_unit
    bags = list(run.core.all_bags.values())
    # as jobs: a bag with a task caught in a mapper outage is not counted (its times would include it)
    across = {jl.job.bag for jl in run.journal.jobs.values() if jl.across_outage and jl.job.bag is not None}
    return reduce_bags(SimpleNamespace(bags=bags, replication=0), run.warmup, horizon, keep_rows, across,
                       arrivals_end(run.experiment.workload, bags))


def mapper_stalls(journal: Any) -> dict[str, Any] | None:
    """The stalls of the mapper's loop (mgst.testbed.journal.STALL s and more between its notes that it is alive):
    how many, their sum, and the MAX_STALLS_LISTED longest in the order they came (seconds into the run, and how
    long); None for a run that kept no notes (no journal file: nothing was measured)."""
    if journal.last_tick is None and not journal.stalls:
        return None
    stalls = journal.stalls
    longest = sorted(sorted(range(len(stalls)), key=lambda i: -stalls[i][1])[:MAX_STALLS_LISTED])
    return {"count": len(stalls), "total_s": round(sum(sec for _, sec in stalls), 6),
            "longest": [{"at_s": round(stalls[i][0], 6), "seconds": round(stalls[i][1], 6)} for i in longest]}


def _overloaded(run: TestbedRun, counted: list[tuple[float, int, float, float]], horizon: float) -> str | None:
    """The allocation LP's overload warning; else, for job classes (a bag run has its own verdict), whether the
    run's response times grew through it (mgst.steady_state: its counted jobs by submission, in WINDOWS windows of
    equal model time from the warm-up to the horizon)."""
    warning = overload_warning(run.experiment)
    if warning is not None or run.core.all_bags or horizon <= run.warmup:
        return warning
    n = len(run.experiment.classes)
    counts = [[0] * WINDOWS for _ in range(n)]
    sums = [[0.0] * WINDOWS for _ in range(n)]
    width = (horizon - run.warmup) / WINDOWS
    for submitted, cls, response, _ in counted:
        k = min(WINDOWS - 1, max(0, int((submitted - run.warmup) / width)))
        counts[cls][k] += 1
        sums[cls][k] += response
    return windows_growth_warning(counts, sums)


def summarize_testbed(run: TestbedRun) -> tuple[Summary, dict[str, Any]]:
    """The run's Summary (mode "testbed", times in model units) and its extra figures."""
    exp = run.experiment
    tu = run.time_unit
    horizon = (run.generation_end - run.t0) / tu
    n = len(exp.classes)
    counted: list[tuple[float, int, float, float]] = []  # (submitted, class, response, wait)
    for jid in counted_jobs(run):
        jl = run.journal.jobs[jid]
        r = run.journal.replicas[jl.done_by]  # type: ignore[index]
        if r.t6 is None:
            continue
        first = run.journal.replicas[jl.replicas[0]].t3
        counted.append((jl.job.submitted, jl.job.job_class, (r.t6 - jl.submitted) / tu, (first - jl.submitted) / tu))
    counted.sort()  # submission order

    def estimate(rows: list, cls: int | None) -> Estimate:
        # The class's own jobs, in submission order, in BATCHES batches of (nearly) equal size.
        pick = [x[2] for x in rows if cls is None or x[1] == cls]
        mean, lo, hi = ci = batch_means_ci(pick, BATCHES)
        return Estimate(len(pick), mean, lo, hi, ci.method)

    classes = tuple(estimate(counted, c) for c in range(n))
    waits = tuple(  # as the simulation's: a class none of whose jobs was counted has no mean wait
        (sum(x[3] for x in counted if x[1] == c) / jobs if (jobs := sum(1 for x in counted if x[1] == c))
         else math.nan) for c in range(n)
    )
    length = max(1e-9, run.end - run.t0)
    util = tuple(m.stats.busy_time * tu / (length * m.cpus) for m in run.core.machines)  # (of its CPUs, as simulated)
    load = (solve_allocation(exp.job_rates, exp.arrival_rates, exp.availability).load if any(exp.arrival_rates)
            else None)
    summary = Summary(
        experiment=exp.name, mode="testbed", policy=exp.policy.name,
        class_names=tuple(c.name for c in exp.classes), classes=classes, overall=estimate(counted, None),
        mean_wait=waits, machine_names=tuple(m.name for m in exp.machines), utilisation=util, replications=1,
        horizon=horizon, warmup=run.warmup, seed=run.seed, load=load, jobs_simulated=len(run.journal.jobs),
        unfinished=len(run.cut_off), elapsed_s=run.end - run.t0,
        # the policy's report() (LPAS_DG's fixes); a bare PolicyHooks, or a core without a policy, has none
        policy_counts=dict(getattr(getattr(run.core, "policy", None), "report", dict)()),
        overloaded=_overloaded(run, counted, horizon) if any(exp.arrival_rates) else None,
        interval=BATCH_MEANS,  # (one run: its intervals are batch means of its jobs, as summary.csv says)
    )
    if run.core.all_bags:
        summary = dataclasses.replace(summary, bags=summarize_bags([testbed_bags(run)]))
    stats = [m.stats for m in run.core.machines]
    waste = waste_of([s.discarded for s in stats], [s.discarded_time for s in stats], [s.busy_time for s in stats])
    summary = dataclasses.replace(summary, waste=waste)
    done = sum(1 for rec in run.core.jobs.values() if rec.status is JobStatus.DONE)
    outages = outage_starts(run.journal)
    began = run_began(run)
    asked = asked_shares(run)
    extras: dict[str, Any] = {
        "time_unit_s": tu,
        "duration_s": run.generation_end - run.t0,
        "jobs_generated": len(run.journal.jobs),
        "jobs_done": done,
        "cut_off": sorted(run.cut_off),
        "timeouts": sum(1 for j in run.journal.jobs.values() if j.timed_out),
        "requeues": sum(j.requeues for j in run.journal.jobs.values()),
        # the same, by how the replica that was each job's last ended (lost: its machine down; unheld: sent as its
        # puller reconnected, never received; failed, refused, cancelled, timeout)
        "requeues_by_cause": requeue_causes(run.journal),
        "malformed_messages": dict(run.malformed),
        "stale_events": run.core.stale_events,
        "delays": run.journal.delays(),
        "ci_method": f"batch means over {BATCHES} batches of each class's jobs",
        "machines_detail": [
            {"machine": m.name, "registrations": m.registrations, "reconnections": m.reconnections,
             "jobs_run": m.jobs_run,
             "requested_share": m.share,
             # the mean its finished jobs were asked for (a_j, or its availability's over each job): what the
             # achieved share is set against
             "asked_share": asked[j].requested if asked[j] is not None else None,
             "achieved_share": (sum(m.achieved) / len(m.achieved)) if m.achieved else None,
             "clock_offset_s": m.offset, "min_rtt_s": m.rtt,
             "down_periods": down_periods(m, outages, began), "state_at_end": state_at_end(m),
             "expelled": None if m.expelled is None else {"at": wall_iso_offset(m.expelled[0], run.utc_offset_s),
                                                          "why": m.expelled[1]}}
            for j, m in enumerate(run.journal.machines)
        ],
        "warnings": share_warnings(run) + expelled_warnings(run) + stray_warnings(run),
        "closed": run.closed,
        # how the run was secured: "curve", or "none (--insecure)" / "none (loopback)"
        "security": run.security,
        "insecure": run.security != "curve",
        "aborted": run.aborted,
        # the UTC offset of the local times in jobs.csv and machine_periods.csv (which spreadsheets read as they
        # are, without one): the head node's at the run's start, kept for the whole run (through a change to or from
        # daylight saving) and by every export (wherever it is made)
        "local_time_utc_offset": offset_iso(run.utc_offset_s),
        # the instant of model time 0, a local time as jobs.csv's: a date there is at model time (date - this) /
        # time_unit_s, as the simulation's files write theirs
        "model_time_zero": wall_iso_offset(run.t0, run.utc_offset_s),
        # ISO 8601 local times with their UTC offset (jobs.csv's local times, made unambiguous)
        "outages": [{"from": wall_iso_offset(a, run.utc_offset_s), "to": wall_iso_offset(b, run.utc_offset_s),
                     "seconds": round(b - a, 6)}
                    for a, b in run.journal.outages],
        "mapper_stalls": mapper_stalls(run.journal),
        # the wall time the mapper spent in the core (the policy's decisions, the core's work), which the model takes
        # to be instant: inputs, seconds in all, mean and longest ms, share of the run (null: not measured)
        "decision_time": None if run.decision_time is None else run.decision_time.summary(run.end - run.t0),
        "jobs_across_outage": sum(1 for j in run.journal.jobs.values() if j.across_outage),
        "results_reported_after_outage": run.journal.late_results,
        "resumes": run.resumes,
        # what the core raised when the policy failed: the run stopped there (null: it did not fail)
        "policy_failure": run.policy_failure,
        "network": run.network,  # mgst run --network: the emulated link asked (null: none)
        "overlay": run.overlay,  # grids that grew with the overlay, testbed and simulation (null: none)
    }
    return summary, extras


def job_waste(jobs: Iterable[Any], now: float) -> dict[int, tuple[int, float]]:
    """Per job that had any, its losers that ran on after it was done and their machine time (model time units,
    as the core counts them: sent to end, less any wait for a CPU; a loser still running, to ``now``, the core's)."""
    out: dict[int, tuple[int, float]] = {}
    for rec in jobs:
        losers = [r for r in rec.history if r.discarded]
        if losers:
            out[rec.job.id] = (len(losers), sum(r.charged_until(now) for r in losers))
    return out


def write_testbed_outputs(run: TestbedRun, summary: Summary, extras: dict[str, Any], out: Path,
                          simulation: Summary | None = None) -> dict[str, Any]:
    """jobs.csv, machines.csv, machine_periods.csv, summary.csv (the ``simulation`` beside the run's rows, if any),
    bags.csv (bags) and summary.json (the summary with ``extras`` added); returns the summary JSON object."""
    out.mkdir(parents=True, exist_ok=True)
    counted = counted_jobs(run)
    status = {jid: rec.status.value for jid, rec in run.core.jobs.items()}
    waste = job_waste(run.core.jobs.values(), run.core.now)
    write_whole(out / "jobs.csv", lambda p: run.journal.write_jobs_csv(p, run.time_unit, counted, status,
                                                                       run.utc_offset_s, waste))
    write_whole(out / "machines.csv", lambda p: write_machines_csv(
        run, p, summary.utilisation, simulation.utilisation if simulation is not None else ()))
    write_whole(out / "machine_periods.csv", lambda p: write_periods_csv(run, p))
    write_whole(out / "summary.csv", lambda p: write_summary_csv(p, summary, *([simulation] if simulation else [])))
    if run.core.all_bags:
        write_whole(out / "bags.csv", lambda p: write_bags_csv(p, testbed_bags(run, keep_rows=True).rows))
    d = summary.as_dict()
    d.update(extras)
    d["time_unit"] = "model"
    d["mgst_version"] = installed_version()  # (the mgst that wrote these files: an export may be a later one's)
    # last: a resumed run reads it as the mark that every result is there
    write_whole(out / "summary.json", lambda p: p.write_text(json.dumps(d, indent=1) + "\n"))
    return d

