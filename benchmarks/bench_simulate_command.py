"""`mgst simulate`'s wall time against its engine's: the command in a subprocess, Simulation.run in this one.

Issue 20's run by default: hihi-mfd-fd, ``--horizon 40000 --replications 1 --workers 1`` (1.06 M jobs).
The command is timed by the wall clock from its start to its exit: the interpreter's start-up, the imports,
the experiment file, the LP, the run, its reduction, the table, the exit; what the user waits for. The
engine is timed as the command runs it: ``Simulation(...).run()``, replication 0, built first (untimed).
The two alternate, ``--repeat`` times; then the medians, and the ratio of the command's to the engine's.
Target: within 1.25x. ``--root DIR`` measures another tree's mgst (e.g. the main branch's, before a
change); the command and this process then run the same build (the first line says which).
"""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = 1.25  # the command's wall time within this factor of Simulation.run's (issue 20)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiment", default="experiments/hihi-mfd-fd.toml", help="relative to --root")
    ap.add_argument("--horizon", type=float, default=40000.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                    help="the tree whose mgst runs (default: this file's)")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    sys.path.insert(0, str(root))
    from mgst import build_info  # noqa: PLC0415 (after --root is on the path)
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.sim import Simulation  # noqa: PLC0415

    exp = load_experiment(root / args.experiment)
    command = [sys.executable, "-m", "mgst", "simulate", args.experiment, "--horizon", f"{args.horizon:g}",
               "--replications", "1", "--workers", "1", "--quiet"]
    version = subprocess.run([sys.executable, "-m", "mgst", "--version"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.strip()
    print(f"Python {platform.python_version()}, {root}: this process {build_info.build()}; the command {version}")
    print(f"command: {' '.join(command[2:])} (in {root})")

    def run_command() -> float:
        t0 = time.perf_counter()
        done = subprocess.run(command, cwd=root, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if done.returncode != 0:
            raise SystemExit(f"the command failed ({done.returncode}):\n{done.stderr}")
        return wall

    def run_engine() -> tuple[float, int]:
        sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon=args.horizon)
        gc.collect()  # no garbage of an earlier run is charged to this one
        t0 = time.perf_counter()
        run = sim.run()
        elapsed = time.perf_counter() - t0
        jobs = len(run.jobs)
        del run, sim
        gc.collect()  # (untimed) its records, before the next measurement
        return elapsed, jobs

    commands, engines = [], []
    jobs = 0
    for i in range(args.repeat):
        commands.append(run_command())
        elapsed, jobs = run_engine()
        engines.append(elapsed)
        print(f"  repeat {i + 1}: command {commands[-1]:.3f} s, Simulation.run {elapsed:.3f} s ({jobs:,} jobs)",
              flush=True)
    cmd, eng = statistics.median(commands), statistics.median(engines)
    ratio = cmd / eng
    print(f"median over {args.repeat}: command {cmd:.3f} s, Simulation.run {eng:.3f} s, "
          f"ratio {ratio:.2f} (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
