"""Trace replay's cost: build and run a simulation of a 220-host, 28-day trace at 20 offsets (one process).

Each run is a fresh Experiment at its own offset (as the cells of a sweep are): a replay that merged every
machine's whole trace per offset pays for the month each time; a lazy one for the periods the run plays.
The platform is generated once (mgst.traces) into --platform; to time another tree's replay (e.g. main's,
before the lazy replay), run this file with that tree first on PYTHONPATH and an existing --platform:

    MGST_PURE=1 python benchmarks/bench_trace_replay.py --platform PLATFORM
    cd OLD_TREE && MGST_PURE=1 PYTHONPATH=OLD_TREE python THIS_TREE/benchmarks/bench_trace_replay.py \\
        --platform PLATFORM
"""

from __future__ import annotations

import argparse
import csv
import gc
import hashlib
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # after PYTHONPATH: a tree given there is the one timed
DAY = 86_400.0
REFERENCE_GHZ = 1.5  # a machine's power is its clock rate / 1.5 GHz (the slides' reference host)


def platform_dir(path: Path, hosts: int, days: int, seed: int) -> Path:
    if not (path / "availability.csv").exists():
        from mgst.traces.platform import generate_platform, write_platform  # noqa: PLC0415

        t0 = time.perf_counter()
        write_platform(generate_platform("sdsc", hosts=hosts, days=days, seed=seed), path)
        print(f"generated {path} in {time.perf_counter() - t0:.2f} s "
              f"(availability.csv {os.path.getsize(path / 'availability.csv') / 1e6:.1f} MB)")
    return path


def experiment(path: Path, offset: float, horizon: float):
    from mgst.availability.trace import TraceAvailability  # noqa: PLC0415
    from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings  # noqa: PLC0415

    with open(path / "hosts.csv", newline="") as f:
        clocks = [(row["host"], float(row["clock_ghz"])) for row in csv.DictReader(f)]
    machines = tuple(Machine(name, (ghz / REFERENCE_GHZ,), 1.0) for name, ghz in clocks)
    task = 300.0  # 5 minutes on the reference host
    rate = 0.5 * len(machines) / task  # half the platform's nominal capacity
    spec = TraceAvailability(str((path / "availability.csv").resolve()), "csv", offset=offset)
    return Experiment("trace-replay", (JobClass("1", rate, task),), machines, PolicySpec("fcfs"), failures=spec,
                      simulation=SimulationSettings(horizon=horizon, warmup=0.0, replications=1, seed=1))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--platform", type=Path, default=Path("/tmp/bench-trace-platform"))
    ap.add_argument("--hosts", type=int, default=220)
    ap.add_argument("--days", type=int, default=28)
    ap.add_argument("--offsets", type=int, default=20)
    ap.add_argument("--horizon", type=float, default=3600.0, help="model seconds each run plays (then a drain)")
    args = ap.parse_args(argv)
    import mgst  # noqa: PLC0415
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    path = platform_dir(args.platform, args.hosts, args.days, 1)
    print(f"mgst from {Path(mgst.__file__).parent}; load {os.getloadavg()[0]:.2f}")
    span = args.days * DAY - 2 * args.horizon
    offsets = [round(k * span / args.offsets) for k in range(args.offsets)]
    times = []
    digest = hashlib.sha256()  # of every job's completion time and machine: before and after must agree
    for offset in offsets:
        gc.collect()
        t0 = time.perf_counter()
        exp = experiment(path, float(offset), args.horizon)
        run = Simulation(exp, seed=1).run()
        dt = time.perf_counter() - t0
        times.append(dt)
        digest.update(repr([(r.job.id, r.completed, r.done_on) for r in run.jobs]).encode())
        print(f"offset {offset:>8} s: {len(run.jobs):>5} jobs, {dt:.3f} s", file=sys.stderr)
    print(f"{args.offsets} offsets: {sum(times):.2f} s in all (build + run), the first {times[0]:.2f} s (it reads the "
          f"trace), the others {sum(times[1:]) / max(1, len(times) - 1):.3f} s each; load {os.getloadavg()[0]:.2f}; "
          f"results {digest.hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
