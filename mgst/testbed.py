"""A testbed run's results: the summary (same schema as a simulation's), the delays, the output files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mgst.analysis.stats import mean_ci
from mgst.core.state import JobStatus
from mgst.mapper import TestbedRun
from mgst.policies.allocation import solve_allocation
from mgst.results import Estimate, Summary, write_summary_csv

# A single run has no replications; its confidence intervals come from batch means
# over this many consecutive batches of jobs (by submission time).
BATCHES = 10


def summarize_testbed(run: TestbedRun) -> tuple[Summary, dict[str, Any]]:
    """The run's Summary (mode "testbed", times in model units) and its extra figures."""
    exp = run.experiment
    tu = run.time_unit
    horizon = (run.generation_end - run.t0) / tu
    n = len(exp.classes)
    counted: list[tuple[float, int, float, float]] = []  # (submitted, class, response, wait)
    for jl in run.journal.jobs.values():
        if jl.done_by is None or not run.warmup <= jl.job.submitted < horizon:
            continue
        r = run.journal.replicas[jl.done_by]
        if r.t6 is None:
            continue
        first = run.journal.replicas[jl.replicas[0]].t3
        counted.append((jl.job.submitted, jl.job.job_class, (r.t6 - jl.submitted) / tu, (first - jl.submitted) / tu))
    counted.sort()
    size = max(1, len(counted) // BATCHES)
    batches = [counted[i:i + size] for i in range(0, len(counted), size)][:BATCHES] if counted else []

    def estimate(rows: list, cls: int | None) -> Estimate:
        pick = [x for x in rows if cls is None or x[1] == cls]
        means = []
        for b in batches:
            v = [x[2] for x in b if cls is None or x[1] == cls]
            if v:
                means.append(sum(v) / len(v))
        total = sum(x[2] for x in pick) / len(pick) if pick else float("nan")
        _, lo, hi = mean_ci(means) if len(means) > 1 else (0, float("nan"), float("nan"))
        return Estimate(len(pick), total, lo, hi)

    classes = tuple(estimate(counted, c) for c in range(n))
    waits = tuple(
        (sum(x[3] for x in counted if x[1] == c) / max(1, sum(1 for x in counted if x[1] == c))) for c in range(n)
    )
    length = max(1e-9, run.end - run.t0)
    util = tuple(m.stats.busy_time * tu / length for m in run.core.machines)
    load = solve_allocation(exp.rates, exp.arrival_rates, exp.availability).load
    summary = Summary(
        experiment=exp.name, mode="testbed", policy=exp.policy.name,
        class_names=tuple(c.name for c in exp.classes), classes=classes, overall=estimate(counted, None),
        mean_wait=waits, machine_names=tuple(m.name for m in exp.machines), utilisation=util, replications=1,
        horizon=horizon, warmup=run.warmup, seed=0, load=load, jobs_simulated=len(run.journal.jobs),
        unfinished=len(run.cut_off), elapsed_s=run.end - run.t0,
    )
    done = sum(1 for rec in run.core.jobs.values() if rec.status is JobStatus.DONE)
    extras: dict[str, Any] = {
        "time_unit_s": tu,
        "duration_s": run.generation_end - run.t0,
        "jobs_generated": len(run.journal.jobs),
        "jobs_done": done,
        "cut_off": sorted(run.cut_off),
        "timeouts": sum(1 for j in run.journal.jobs.values() if j.timed_out),
        "requeues": sum(j.requeues for j in run.journal.jobs.values()),
        "malformed_messages": dict(run.malformed),
        "stale_events": run.core.stale_events,
        "delays": run.journal.delays(),
        "ci_method": f"batch means over {BATCHES} batches",
        "machines_detail": [
            {"machine": m.name, "registrations": m.incarnations, "jobs_run": m.jobs_run,
             "achieved_share": (sum(m.achieved) / len(m.achieved)) if m.achieved else None,
             "clock_offset_s": m.offset, "min_rtt_s": m.rtt,
             "down_periods": sum(1 for p in m.periods if p[1] is not None)}
            for m in run.journal.machines
        ],
    }
    return summary, extras


def write_testbed_outputs(run: TestbedRun, summary: Summary, extras: dict[str, Any], out: Path) -> dict[str, Any]:
    """jobs.csv, machines.csv, summary.csv and summary.json (the summary with ``extras`` added); returns
    the summary JSON object."""
    out.mkdir(parents=True, exist_ok=True)
    horizon = summary.horizon
    counted = {jid for jid, jl in run.journal.jobs.items()
               if jl.done_by is not None and run.warmup <= jl.job.submitted < horizon}
    status = {jid: rec.status.value for jid, rec in run.core.jobs.items()}
    run.journal.write_jobs_csv(out / "jobs.csv", run.time_unit, counted, status)
    run.journal.write_machines_csv(out / "machines.csv", run.end)
    write_summary_csv(out / "summary.csv", summary)
    d = summary.as_dict()
    d.update(extras)
    d["time_unit"] = "model"
    (out / "summary.json").write_text(json.dumps(d, indent=1) + "\n")
    return d
