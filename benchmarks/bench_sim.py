"""Throughput of mgst's simulator against the SimPy model of benchmarks/simpy_model.py, same jobs."""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
    sys.path.insert(0, str(ROOT))

from simpy_model import LpasDGModel  # noqa: E402

from mgst.config import load_experiment  # noqa: E402
from mgst.sim.loop import Simulation  # noqa: E402

# Each runner builds its simulator, runs it and returns its per-job records (what is timed).


def run_mgst(exp, seed, horizon):
    return Simulation(exp, seed=seed, horizon=horizon).run().jobs


def run_simpy(exp, seed, horizon):
    return LpasDGModel(exp, seed=seed, horizon=horizon).run()


def rows_mgst(jobs):
    """Records as (id, class, submitted, started, completed, machine), for the sanity check."""
    return [(r.job.id, r.job.job_class, r.job.submitted, r.first_sent, r.completed, r.done_on) for r in jobs]


def rows_simpy(jobs):
    return [(r.id, r.job_class, r.submitted, r.started, r.completed, r.machine) for r in jobs]


def timed(run, exp, seed, horizon):
    gc.collect()  # no garbage of the previous run is charged to this one
    t0 = time.perf_counter()
    jobs = run(exp, seed, horizon)
    dt = time.perf_counter() - t0
    return dt, len(jobs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--horizon", type=float, default=1000.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--experiment", default=str(ROOT / "experiments" / "hihi-mfd-fd.toml"))
    args = ap.parse_args(argv)
    exp = load_experiment(args.experiment)
    seed = exp.simulation.seed
    if exp.failures is not None:
        print(f"{exp.name} has machine failures; the SimPy model has none, so there is nothing to compare")
        return 2
    import simpy

    print(f"Python {platform.python_version()} ({platform.python_implementation()}), SimPy {simpy.__version__}")
    print(f"machine: {platform.machine()}, {platform.platform()}, {platform.processor() or '?'}")
    print(f"experiment {exp.name}, seed {seed}, replication 0, horizon {args.horizon:g}, {args.repeat} runs each")

    runners = {"mgst": run_mgst, "simpy": run_simpy}
    # Warm-up (untimed): imports, the LP solve (memoised for both afterwards), caches.
    for run in runners.values():
        run(exp, seed, min(args.horizon, 10.0))

    times: dict[str, list[float]] = {name: [] for name in runners}
    counts: dict[str, set[int]] = {name: set() for name in runners}
    for _ in range(args.repeat):
        for name, run in runners.items():  # alternating: mgst, simpy, mgst, simpy, ...
            dt, n = timed(run, exp, seed, args.horizon)
            times[name].append(dt)
            counts[name].add(n)

    # Sanity (untimed): the same jobs, and what each simulator made of them.
    rows = {
        "mgst": rows_mgst(run_mgst(exp, seed, args.horizon)),
        "simpy": rows_simpy(run_simpy(exp, seed, args.horizon)),
    }
    if counts["mgst"] != counts["simpy"] or len(counts["mgst"]) != 1:
        print(f"job counts differ: mgst {sorted(counts['mgst'])}, simpy {sorted(counts['simpy'])}")
        return 1
    n_jobs = counts["mgst"].pop()

    def mean_response(rs):
        done = [c - s for _, _, s, _, c, _ in rs if c is not None]
        return statistics.fmean(done), len(rs) - len(done)

    print()
    print(f"{'':<22}{'mgst':>14}{'simpy':>14}")
    med = {k: statistics.median(v) for k, v in times.items()}
    tput = {k: n_jobs / med[k] for k in times}
    resp = {k: mean_response(rows[k]) for k in rows}
    table = [
        ("jobs simulated", {k: f"{n_jobs:d}" for k in times}),
        ("median seconds", {k: f"{med[k]:.4f}" for k in times}),
        ("min seconds", {k: f"{min(times[k]):.4f}" for k in times}),
        ("max seconds", {k: f"{max(times[k]):.4f}" for k in times}),
        ("median jobs/s", {k: f"{tput[k]:,.0f}" for k in times}),
        ("jobs/s (best run)", {k: f"{n_jobs / min(times[k]):,.0f}" for k in times}),
        ("mean response time", {k: f"{resp[k][0]:.6f}" for k in times}),
        ("unfinished jobs", {k: f"{resp[k][1]:d}" for k in times}),
    ]
    for label, vals in table:
        print(f"{label:<22}{vals['mgst']:>14}{vals['simpy']:>14}")
    ratio = tput["mgst"] / tput["simpy"]
    print()
    print(f"throughput ratio mgst/simpy (medians): {ratio:.2f}x")
    same = sum(a == b for a, b in zip(rows["mgst"], rows["simpy"], strict=True))
    print(f"job records identical (id, class, submitted, started, completed, machine): {same}/{n_jobs}")
    print(f"2x target: {'met' if ratio >= 2.0 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
