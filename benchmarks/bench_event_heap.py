"""The simulator with its C event heap against the heapq twin, side by side in one process.

Both heaps run the same scaled hihi-mfd-fd grids (bench_scale's ``scaled``: the same load per
machine at every size) through the same simulator; only ``mgst.sim.loop.new_event_heap`` differs. The
two alternate within each repeat, and their order flips between repeats, so that the machine's
drift hits both alike. Timed: building the simulator and running it, median of the repeats.
Each pair of runs must give the same schedule (every job's replicas), or the benchmark fails.

The C heap exists only in the compiled build (``mgst --version``); under ``MGST_PURE=1`` or
with a stale build this benchmark says so and stops.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "benchmarks"):
    if str(path) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
        sys.path.insert(0, str(path))

from bench_scale import DRAIN, scaled  # noqa: E402

import mgst.sim.loop  # noqa: E402
from mgst import build_info  # noqa: E402
from mgst.config import load_experiment  # noqa: E402
from mgst.model import Experiment  # noqa: E402
from mgst.sim.event_heap import EventHeap, PyEventHeap, new_event_heap  # noqa: E402


def timed(exp: Experiment, factory: Callable[[], EventHeap]) -> tuple[float, int, str]:
    """Seconds to build and run ``exp`` with heaps from ``factory``, the job count, a schedule digest."""
    made: list[EventHeap] = []

    def counted() -> EventHeap:
        heap = factory()
        made.append(heap)
        return heap

    mgst.sim.loop.new_event_heap = counted
    try:
        gc.collect()
        t0 = time.perf_counter()
        run = mgst.sim.loop.Simulation(exp, drain_limit=DRAIN).run()
        dt = time.perf_counter() - t0
    finally:
        mgst.sim.loop.new_event_heap = new_event_heap
    if not made or not all(type(h) is type(made[0]) for h in made):
        raise RuntimeError("the simulator did not take its heap from mgst.sim.loop.new_event_heap")
    assert run.unfinished == 0, f"{exp.name}: {run.unfinished} jobs unfinished"
    digest = hashlib.sha256()
    for j in run.jobs:
        digest.update(repr((j.job.id, [(r.machine, r.sent, r.ended, str(r.outcome)) for r in j.history])).encode())
    return dt, len(run.jobs), digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,10000", help="machine counts, comma-separated")
    ap.add_argument("--policies", default="fcfs,lpas_dg")
    ap.add_argument("--jobs", type=int, default=60_000, help="about this many jobs per run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--experiment", default=str(ROOT / "experiments" / "hihi-mfd-fd.toml"))
    args = ap.parse_args(argv)
    if not build_info.compiled():
        print(f"this is the {build_info.build()} build; there is no C event heap to compare "
              "(pip install -e . builds it where a C compiler is present)")
        return 2
    heaps: dict[str, Callable[[], EventHeap]] = {"C": new_event_heap, "heapq": PyEventHeap}
    base = load_experiment(args.experiment)
    sizes = [int(s) for s in args.sizes.split(",")]
    policies = args.policies.split(",")
    print(f"Python {platform.python_version()}, {platform.machine()}; {base.name} scaled; "
          f"about {args.jobs:,} jobs per run; median of {args.repeat}; C heap is "
          f"{type(new_event_heap()).__module__}.{type(new_event_heap()).__name__}")
    exps = {(p, n): scaled(base, n, p, args.jobs) for p in policies for n in sizes}
    for exp in exps.values():  # warm-up (imports, caches), untimed: about 100 jobs per heap
        warm = dataclasses.replace(exp.simulation, horizon=exp.simulation.horizon * 100 / args.jobs)
        for factory in heaps.values():
            timed(dataclasses.replace(exp, simulation=warm), factory)
    times: dict[tuple[str, int, str], list[float]] = {}
    counts: dict[tuple[str, int], int] = {}
    for rep in range(args.repeat):
        order = list(heaps) if rep % 2 == 0 else list(heaps)[::-1]
        for key, exp in exps.items():
            digests = set()
            for name in order:
                dt, counts[key], digest = timed(exp, heaps[name])
                times.setdefault((*key, name), []).append(dt)
                digests.add(digest)
            if len(digests) != 1:
                print(f"{key}: the two heaps gave different schedules")
                return 1
    print(f"{'policy':<10}{'machines':>10}{'jobs':>10}{'C jobs/s':>12}{'heapq jobs/s':>14}{'C / heapq':>11}")
    for p, n in exps:
        rates = {name: counts[(p, n)] / statistics.median(times[(p, n, name)]) for name in heaps}
        print(f"{p:<10}{n:>10,}{counts[(p, n)]:>10,}{rates['C']:>12,.0f}{rates['heapq']:>14,.0f}"
              f"{rates['C'] / rates['heapq']:>10.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
