"""Simulator throughput against the number of machines, at the same load per machine (LPAS_DG and FCFS).

The grid is hihi-mfd-fd's six machines (Table 1's rate columns) repeated to n machines, with every
class's arrival rate scaled by n / 6: each machine sees the same load at every size. Every size
simulates about the same number of jobs (the horizon shrinks as n grows), so jobs/s compare directly.
Timed: building the simulator and running it (the LP solve of LPAS_DG included), median of the
repeats; the sizes alternate within each repeat so that the machine's drift hits all of them alike. The runs
keep no per-job records, as ``mgst simulate`` runs them (``--keep-records``: every record kept, as a run whose
jobs.csv is asked for). ``--fresh`` runs each timed run in a process of its own, as a whole ``mgst simulate`` run
is (after a warm-up of about 100 jobs there too), and adds the process's peak resident memory.

``--simpy`` adds a reference row: the SimPy model of LPAS_DG in ``simpy_model.py`` (the one
``bench_sim.py`` compares with) on the same grids, timed once per size (it is slow at 10,000
machines), with its schedule checked against mgst's job by job.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed); to time another tree, run
    # that tree's copy of this script
    sys.path.insert(0, str(ROOT))

import mgst  # noqa: E402
from mgst.build_info import build  # noqa: E402
from mgst.config import load_experiment  # noqa: E402
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings  # noqa: E402
from mgst.sim.loop import Simulation  # noqa: E402

TARGET = 1.5  # jobs/s at the largest size within this factor of the smallest's
DRAIN = 100.0  # model time after the horizon to finish what is in the system (short horizons at large sizes)


def scaled(base: Experiment, n: int, policy: str, jobs: int) -> Experiment:
    """``base``'s machines repeated to ``n``, arrivals scaled by n / len(base.machines)."""
    k = len(base.machines)
    machines = tuple(
        Machine(f"M{j + 1}", base.machines[j % k].rates, base.machines[j % k].availability) for j in range(n)
    )
    classes = tuple(JobClass(c.name, c.arrival_rate * n / k, c.granularity) for c in base.classes)
    horizon = jobs / sum(c.arrival_rate for c in classes)
    sim = SimulationSettings(horizon=horizon, warmup=0.0, replications=1, seed=base.simulation.seed)
    return dataclasses.replace(base, name=f"{base.name}x{n}", machines=machines, classes=classes,
                               policy=PolicySpec(policy), simulation=sim, failures=None)


def timed(exp: Experiment, keep_records: bool = False) -> tuple[float, int]:
    gc.collect()
    t0 = time.perf_counter()
    run = Simulation(exp, drain_limit=DRAIN, keep_records=keep_records).run()
    dt = time.perf_counter() - t0
    assert run.unfinished == 0, f"{exp.name}: {run.unfinished} jobs unfinished"
    return dt, run.jobs_total


def warm_up(exp: Experiment, jobs: int) -> None:
    """About 100 jobs of ``exp``, untimed (imports, caches)."""
    warm = dataclasses.replace(exp.simulation, horizon=exp.simulation.horizon * 100 / jobs)
    Simulation(dataclasses.replace(exp, simulation=warm), drain_limit=DRAIN).run()


def timed_fresh(args: argparse.Namespace, policy: str, n: int) -> tuple[float, int, float]:
    """One timed run in a process of its own: (seconds, jobs, the process's peak RSS in MB)."""
    argv = [sys.executable, __file__, "--child", f"{policy}:{n}", "--jobs", str(args.jobs),
            "--experiment", args.experiment] + (["--keep-records"] if args.keep_records else [])
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=3600).stdout
    got = json.loads(out.strip().splitlines()[-1])
    return got["seconds"], got["jobs"], got["peak_mb"]


def child(args: argparse.Namespace, base: Experiment) -> int:
    policy, n = args.child.split(":")
    exp = scaled(base, int(n), policy, args.jobs)
    warm_up(exp, args.jobs)
    dt, count = timed(exp, args.keep_records)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": dt, "jobs": count, "peak_mb": peak}))
    return 0


def timed_simpy(exp: Experiment) -> tuple[float, int]:
    """The SimPy model's time for ``exp`` (LPAS_DG), after checking it schedules as mgst does."""
    from simpy_model import LpasDGModel  # needs SimPy: pip install -e ".[bench]"

    gc.collect()
    t0 = time.perf_counter()
    records = LpasDGModel(exp, drain_limit=DRAIN).run()
    dt = time.perf_counter() - t0
    from bench_sim import rows_mgst, rows_simpy

    same = rows_simpy(records) == rows_mgst(Simulation(exp, drain_limit=DRAIN).run().jobs)
    assert same, f"{exp.name}: the SimPy model and mgst scheduled differently"
    return dt, len(records)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,100,1000,10000", help="machine counts, comma-separated")
    ap.add_argument("--policies", default="lpas_dg,fcfs")
    ap.add_argument("--jobs", type=int, default=60_000, help="about this many jobs per run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--experiment", default=str(ROOT / "experiments" / "hihi-mfd-fd.toml"))
    ap.add_argument("--keep-records", action="store_true", help="keep every job's record (default: none)")
    ap.add_argument("--simpy", action="store_true",
                    help="also time the SimPy model of LPAS_DG once per size, as a reference")
    ap.add_argument("--fresh", action="store_true",
                    help="each timed run in a process of its own (as a whole mgst simulate run), with its peak RSS")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # POLICY:N, one --fresh run
    args = ap.parse_args(argv)
    base = load_experiment(args.experiment)
    if args.child:
        return child(args, base)
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.policies.split(",")
    # (which tree is timed: this script's own checkout comes first on sys.path, whatever PYTHONPATH says)
    print(f"mgst from {Path(mgst.__file__).resolve().parent.parent} ({build()})")
    print(f"Python {platform.python_version()}, {platform.machine()}; {base.name} scaled; "
          f"about {args.jobs:,} jobs per run; median of {args.repeat}; records "
          f"{'kept' if args.keep_records else 'not kept'}; "
          f"{'a process per run' if args.fresh else 'all runs in this process'}")
    exps = {(p, n): scaled(base, n, p, args.jobs) for p in policies for n in sizes}
    if not args.fresh:
        for exp in exps.values():  # warm-up (imports, caches), untimed: about 100 jobs
            warm_up(exp, args.jobs)
    times: dict[tuple[str, int], list[float]] = {key: [] for key in exps}
    peaks: dict[tuple[str, int], list[float]] = {key: [] for key in exps}
    counts: dict[tuple[str, int], int] = {}
    order = list(exps)
    for rep in range(args.repeat):
        for key in (order if rep % 2 == 0 else order[::-1]):
            if args.fresh:
                dt, count, peak = timed_fresh(args, *key)
                peaks[key].append(peak)
            else:
                dt, count = timed(exps[key], args.keep_records)
            times[key].append(dt)
            counts[key] = count
    ok = True
    print(f"{'policy':<10}{'machines':>10}{'jobs':>10}{'median s':>10}{'jobs/s':>12}{'vs smallest':>13}"
          + (f"{'peak RSS':>12}" if args.fresh else ""))
    for p in policies:
        first = None
        for n in sizes:
            med = statistics.median(times[(p, n)])
            rate = counts[(p, n)] / med
            first = rate if first is None else first
            peak = f"{max(peaks[(p, n)]):>9,.0f} MB" if args.fresh else ""
            print(f"{p:<10}{n:>10,}{counts[(p, n)]:>10,}{med:>10.3f}{rate:>12,.0f}{rate / first:>12.2f}x{peak}")
        slowdown = first / (counts[(p, sizes[-1])] / statistics.median(times[(p, sizes[-1])]))
        met = slowdown <= TARGET
        ok &= met
        print(f"{p}: {sizes[0]:,} -> {sizes[-1]:,} machines, jobs/s falls by {slowdown:.2f}x "
              f"(target <= {TARGET}x): {'met' if met else 'NOT met'}")
    if args.simpy:
        first = None
        for n in sizes:
            dt, count = timed_simpy(scaled(base, n, "lpas_dg", args.jobs))
            rate = count / dt
            first = rate if first is None else first
            print(f"{'simpy':<10}{n:>10,}{count:>10,}{dt:>10.3f}{rate:>12,.0f}{rate / first:>12.2f}x  "
                  "(SimPy model of LPAS_DG, one run, same schedule as mgst)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
