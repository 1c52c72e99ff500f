"""Run this folder's Kondo applications on the testbed (one `mgst run` per policy file, N pullers on loopback)
and tabulate each makespan beside the simulation of the same trace window.

For each policy file (make_window.py writes them) it runs ``mgst run FILE --json``, reads the run's journal
(every task's results: each must be done exactly once; the replicas a DOWN killed) and summary.json's
bag_makespans (the bag's makespan on the testbed and in the simulation of the same trace window, seed and
model time), and records the machine's load (1-minute load average) before and after. Runs go one after the
other; the table goes to RESULTS/results.md and each run's figures to RESULTS/POLICY.json. Usage, from the
repository root:

    MGST_PURE=1 python experiments/kondo/testbed/run_testbed.py --out /tmp/kondo-testbed \
        --results experiments/kondo/testbed/results [--only fcfs] [--time-unit 0.01]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT))  # this tree's mgst, whatever the current folder

from mgst.availability.process import State  # noqa: E402
from mgst.availability.registry import make_process  # noqa: E402
from mgst.testbed.export import load_run  # noqa: E402

POLICIES = ("fcfs", "excl-pred-to")  # the files make_window.py writes, in the order run
RUN_TIMEOUT_S = 900  # a run not over by then (pullers, the bag, the simulation) is killed and reported


def trace_events(run, until: float) -> tuple[int, int]:
    """(DOWN periods, CPU-share changes while up) that begin in the trace in model time (0, until), all hosts."""
    downs = changes = 0
    for j in range(len(run.experiment.machines)):
        process = make_process(run.experiment, run.seed, 0, j)
        at, before = 0.0, None
        while process is not None and at < until:
            period = process.next()
            if at > 0 and period.state is State.DOWN:
                downs += 1
            elif (at > 0 and before is not None and before.state is not State.DOWN
                  and period.cpu_share != before.cpu_share):
                changes += 1
            at += period.duration
            before = period
    return downs, changes


def run_one(policy: str, out: Path, time_unit: float | None) -> dict:
    """One `mgst run` of POLICY.toml into OUT/POLICY, and its figures."""
    folder = out / policy
    cmd = [sys.executable, "-m", "mgst", "run", str(HERE / f"{policy}.toml"), "--out", str(folder), "--json",
           "--no-live", "--quiet", *(["--time-unit", str(time_unit)] if time_unit is not None else [])]
    load_before = os.getloadavg()[0]
    began = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "MGST_PURE": os.environ.get("MGST_PURE", "1")},
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"{policy}: mgst run exited {done.returncode}: {done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    run = load_run(folder)
    results = Counter(r.job for r in run.journal.replicas.values() if r.outcome == "done")
    (row,) = summary["bag_makespans"]
    downs, changes = trace_events(run, (run.end - run.t0) / run.time_unit)
    return {
        "policy": policy, "pullers": len(run.experiment.machines), "tasks": row["tasks"],
        "time_unit_s": summary["time_unit_s"], "submitted": row["submitted"],
        "offset": getattr(run.experiment.failures, "offset", None),
        "makespan_testbed": row["testbed"], "makespan_simulation": row["simulation"],
        "difference_pct": row["difference_pct"],
        "tasks_done_once": sum(1 for n in results.values() if n == 1), "tasks_done_twice_or_more":
            sum(1 for n in results.values() if n > 1), "tasks_not_done": len(run.journal.jobs) - len(results),
        "replicas_killed_by_down": sum(1 for r in run.journal.replicas.values() if r.outcome == "lost"),
        "replicas_cancelled": sum(1 for r in run.journal.replicas.values() if r.outcome == "cancelled"),
        "replicas": len(run.journal.replicas), "trace_downs_during_run": downs,
        "trace_share_changes_during_run": changes,
        "run_wall_s": round(summary["elapsed_s"], 2), "command_wall_s": round(wall, 1),
        "load_before": load_before, "load_after": os.getloadavg()[0],
        "policy_report": summary.get("policy_counts") or {},
        "policy_report_simulation": (summary.get("simulation") or {}).get("policy_counts") or {},
        "warnings": summary.get("warnings", []),
    }


def table(rows: list[dict]) -> str:
    head = ("| policy | pullers (N) | tasks (T) | time unit (s) | makespan testbed | makespan simulation | "
            "difference | tasks done once | DOWNs / share changes in the trace | replicas killed by DOWN | replicas | "
            "run (wall s) | load before/after |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        lines.append(f"| {r['policy']} | {r['pullers']} | {r['tasks']} | {r['time_unit_s']:g} | "
                     f"{r['makespan_testbed']:.1f} | {r['makespan_simulation']:.1f} | {r['difference_pct']:+.2f} % | "
                     f"{r['tasks_done_once']}/{r['tasks']} | {r['trace_downs_during_run']} / "
                     f"{r['trace_share_changes_during_run']} | {r['replicas_killed_by_down']} | {r['replicas']} | "
                     f"{r['run_wall_s']:.1f} | {r['load_before']:.1f} / {r['load_after']:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="a new folder for the runs")
    p.add_argument("--results", type=Path, default=HERE / "results")
    p.add_argument("--only", help="comma-separated policies (default: all)")
    p.add_argument("--time-unit", type=float, help="override the files' time unit")
    args = p.parse_args()
    policies = args.only.split(",") if args.only else list(POLICIES)
    args.results.mkdir(parents=True, exist_ok=True)
    rows = []
    for policy in policies:
        row = run_one(policy, args.out, args.time_unit)
        rows.append(row)
        (args.results / f"{policy}.json").write_text(json.dumps(row, indent=1) + "\n")
        print(f"{policy}: makespan {row['makespan_testbed']:.1f} on the testbed, {row['makespan_simulation']:.1f} "
              f"in simulation ({row['difference_pct']:+.2f} %)", file=sys.stderr)
    (args.results / "results.md").write_text(table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
