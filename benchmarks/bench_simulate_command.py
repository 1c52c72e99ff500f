"""`mgst simulate`'s wall time against its engine's, Simulation.run, on the same run.

Issue 20's run by default: hihi-mfd-fd, ``--horizon 40000 --replications 1 --workers 1`` (1.06 M jobs).
The command runs in a subprocess, timed by the wall clock from its start to its exit: the interpreter's
start-up, the imports, the experiment file, the LP, the run, its reduction, the table, the exit; what the
user waits for. The engine is ``Simulation(...).run()`` as the command runs it (replication 0, built
first, untimed, keeping no per-job records), timed twice: in a fresh process, as in the command (its ratio is
the target's), and in this process (its memory already mapped by the earlier runs: a few % faster). The three alternate,
``--repeat`` times; then the medians and the ratios. Target: the command within 1.25x of the engine.
CPU times (user + system: a child's from getrusage, this process's from process_time) are shown beside,
for a shared machine, where the wall clock also counts the others' load.

``--root DIR`` measures another tree's mgst (e.g. the commit before a change, built in place); the
subprocesses and this process then import that tree's (the first line says which build each runs).
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = 1.25  # the command's wall time within this factor of Simulation.run's (issue 20)

# The engine alone in a fresh process, timed as the command runs it; prints its wall and CPU seconds.
_ENGINE = """
import json, os, sys, time
sys.path.insert(0, {root!r})
from mgst import build_info
from mgst.config import load_experiment
from mgst.sim.loop import Simulation
exp = load_experiment({experiment!r})
try:  # as the command runs it: no per-job records kept
    sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon={horizon!r}, keep_records=False)
except TypeError:  # a tree from before streamed results, which kept them
    sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon={horizon!r})
cpu0, t0 = time.process_time(), time.perf_counter()
run = sim.run()
wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
jobs = getattr(run, "jobs_total", 0) or len(run.jobs)
print(json.dumps({{"wall": wall, "cpu": cpu, "jobs": jobs, "build": build_info.build()}}), flush=True)
os._exit(0)  # what it kept is not freed: the command does not free it either
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


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
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    exp = load_experiment(root / args.experiment)
    command = [sys.executable, "-m", "mgst", "simulate", args.experiment, "--horizon", f"{args.horizon:g}",
               "--replications", "1", "--workers", "1", "--quiet"]
    engine = [sys.executable, "-c", _ENGINE.format(root=str(root), experiment=str(root / args.experiment),
                                                    horizon=args.horizon)]
    version = subprocess.run([sys.executable, "-m", "mgst", "--version"], cwd=root, check=True,
                             capture_output=True, text=True).stdout.strip()
    print(f"Python {platform.python_version()}, {root}: this process {build_info.build()}; the command {version}")
    print(f"command: {' '.join(command[2:])} (in {root})")

    def in_child(cmd: list[str]) -> tuple[float, float, str]:
        cpu0, t0 = _children_cpu(), time.perf_counter()
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        if done.returncode != 0:
            raise SystemExit(f"{cmd[2]} failed ({done.returncode}):\n{done.stderr}")
        return wall, cpu, done.stdout

    def in_this_process() -> tuple[float, float]:
        try:
            sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon=args.horizon, keep_records=False)
        except TypeError:  # (a tree from before streamed results)
            sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon=args.horizon)
        gc.collect()  # no garbage of an earlier run is charged to this one
        cpu0, t0 = time.process_time(), time.perf_counter()
        run = sim.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        del run, sim
        gc.collect()  # (untimed) its records, before the next measurement
        return wall, cpu

    names = ("command", "engine, fresh process", "engine, this process")
    walls: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.repeat):
        wall, cpu, _ = in_child(command)
        walls[names[0]].append(wall)
        cpus[names[0]].append(cpu)
        _, _, out = in_child(engine)
        fresh = json.loads(out)
        walls[names[1]].append(fresh["wall"])
        cpus[names[1]].append(fresh["cpu"])
        wall, cpu = in_this_process()
        walls[names[2]].append(wall)
        cpus[names[2]].append(cpu)
        print(f"  repeat {i + 1}: " + ", ".join(f"{n} {walls[n][-1]:.3f} s (CPU {cpus[n][-1]:.3f})" for n in names)
              + f"; {fresh['jobs']:,} jobs, engine {fresh['build']}", flush=True)
    for label, times in (("wall", walls), ("CPU", cpus)):
        med = {name: statistics.median(times[name]) for name in names}
        print(f"{label} medians over {args.repeat}: " + ", ".join(f"{n} {med[n]:.3f} s" for n in names))
        for name in names[1:]:
            ratio = med[names[0]] / med[name]
            verdict = f" (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})" if label == "wall" else ""
            print(f"  command / {name}: {ratio:.2f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
