"""Is 4x the SimPy model within reach? mgst and the SimPy model beside the floor of any simulation in Python, compiled.

The issue's goal for the simulator is 4 times the throughput of the SimPy model of ``benchmarks/simpy_model.py`` on
hihi-mfd-fd (LPAS_DG, one process, compiled). The floor is ``benchmarks/scale_floor_model.py``: the least a Python
simulation of a grid can do (FCFS single-slot machines, Poisson arrivals, exponential sizes, one slotted object a job
in flight, a dict of the running, a heap of completions; no policy, no statistics but a sum), here on as many
machines as the experiment has, at load 0.9 each, for as many jobs as the experiment's run makes, built with mypyc
into a temporary folder as mgst's core is, and interpreted. Not the same model as the other two (simpler: no
classes, no policy, no records), so it is a lower bound on the time a job costs, not a competitor.

The four run in one process, alternated round by round (SimPy, mgst, the floor compiled, the floor interpreted),
and each is reported as jobs per second (medians) and as a multiple of the SimPy model's, measured in the same
rounds: the ratios hold on a busy machine where the absolute rates do not.

    python benchmarks/bench_sim_floor.py --horizon 2000 --rounds 5

Needs the bench extra (SimPy) and mypy (the test extra's build of mgst uses it too).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for folder in (ROOT, HERE):  # also runs without PYTHONPATH
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from simpy_model import LpasDGModel  # noqa: E402

from mgst.build_info import compiled  # noqa: E402
from mgst.config import load_experiment  # noqa: E402
from mgst.sim.loop import Simulation  # noqa: E402

FLOOR_LOAD = 0.9


def build_floor(where: Path) -> ModuleType:
    """scale_floor_model.py compiled by mypyc in ``where``, imported under the name ``scale_floor_model_native``."""
    source = where / "scale_floor_model_native.py"
    shutil.copy(HERE / "scale_floor_model.py", source)
    done = subprocess.run([sys.executable, "-m", "mypyc", source.name], cwd=where, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"mypyc could not build the floor:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    built = next(where.glob("scale_floor_model_native.*.so"))
    spec = importlib.util.spec_from_file_location("scale_floor_model_native", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(run: Callable[[], int]) -> tuple[float, int]:
    gc.collect()  # no garbage of the previous run is charged to this one
    t0 = time.perf_counter()
    n = run()
    return time.perf_counter() - t0, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--horizon", type=float, default=2000.0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--experiment", default=str(ROOT / "experiments" / "hihi-mfd-fd.toml"))
    args = ap.parse_args(argv)
    exp = load_experiment(args.experiment)
    if exp.failures is not None:
        print(f"{exp.name} has machine failures; the SimPy model has none")
        return 2
    seed = exp.simulation.seed
    import scale_floor_model as floor_interpreted

    with tempfile.TemporaryDirectory() as tmp:
        floor_native = build_floor(Path(tmp))
        n_machines = len(exp.machines)
        jobs = len(Simulation(exp, seed=seed, horizon=args.horizon).run().jobs)
        runners: dict[str, Callable[[], int]] = {
            "simpy": lambda: len(LpasDGModel(exp, seed=seed, horizon=args.horizon).run()),
            "mgst": lambda: len(Simulation(exp, seed=seed, horizon=args.horizon).run().jobs),
            "floor, compiled": lambda: floor_native.simulate(n_machines, jobs, FLOOR_LOAD, seed)[1],
            "floor, interpreted": lambda: floor_interpreted.simulate(n_machines, jobs, FLOOR_LOAD, seed)[1],
        }
        for run in runners.values():  # warm-up, untimed: imports, the LP solve, caches
            run()
        times: dict[str, list[float]] = {name: [] for name in runners}
        done: dict[str, int] = {}
        for _ in range(args.rounds):
            for name, run in runners.items():
                dt, n = timed(run)
                times[name].append(dt)
                done[name] = n
    import simpy

    build = "compiled" if compiled() else "pure Python (MGST_PURE=1)"
    print(f"Python {platform.python_version()}, SimPy {simpy.__version__}, mgst {build}; {exp.name}, LPAS_DG, "
          f"horizon {args.horizon:g}: {jobs:,} jobs; the floor: {n_machines} FCFS machines at load {FLOOR_LOAD}, "
          f"{jobs:,} jobs; medians of {args.rounds} rounds, alternated")
    rate = {name: done[name] / statistics.median(ts) for name, ts in times.items()}
    print(f"{'':<20}{'jobs/s':>12}{'µs/job':>9}{'x SimPy':>9}   runs (s)")
    for name, ts in times.items():
        runs = ", ".join(f"{t:.3f}" for t in ts)
        print(f"{name:<20}{rate[name]:>12,.0f}{1e6 / rate[name]:>9.2f}{rate[name] / rate['simpy']:>8.2f}x   {runs}")
    print(f"4x the SimPy model: {4 * rate['simpy']:,.0f} jobs/s, {1e6 / (4 * rate['simpy']):.2f} µs a job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
