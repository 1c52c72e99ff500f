"""The floor under bench_scale.py: how much a minimal Python simulation slows from 10 to 10,000 machines.

A control for the flat-in-machines goal, without mgst: n single-slot FCFS machines, Poisson arrivals at the same
load per machine at every n, exponential sizes; per job one small record (a slotted object) made at its arrival,
kept in a dict of jobs in flight by id while it runs, its completion in a heap, and freed when it ends; idle
machines in a list. Nothing else: no policy, no statistics beyond a sum of response times. Each size runs in a
process of its own (as ``bench_scale.py --fresh`` runs mgst), about the same number of jobs at every size, and the
sizes alternate within each round. What it shows: the share of mgst's slow-down that any design keeping one
Python object a job in flight pays on this machine, as the jobs in flight grow from ten to ten thousand.

    python benchmarks/bench_scale_floor.py --sizes 10,10000 --objects 0,4,8 --jobs 1000000 --repeat 3

``--objects K`` gives each job K more small objects (a list of them), made at its arrival and each written at its
end: how the slow-down grows with the objects a job in flight holds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

from scale_floor_model import simulate


def _child(machines: int, jobs: int, load: float, seed: int, parts: int) -> None:
    simulate(min(machines, 10), 100, load, seed, parts)  # warm up
    seconds, done, mean = simulate(machines, jobs, load, seed, parts)
    print(json.dumps({"seconds": seconds, "done": done, "mean_response": mean}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--sizes", default="10,10000")
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--load", type=float, default=0.9, help="each machine's load (mean size 1)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--objects", default="0", help="extra objects a job holds, comma-separated: a row each")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(int(args.child[0]), int(args.child[1]), float(args.child[2]), int(args.child[3]), int(args.child[4]))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    objects = [int(k) for k in args.objects.split(",")]
    times: dict[tuple[int, int], list[float]] = {(k, n): [] for k in objects for n in sizes}
    for round_ in range(args.repeat):
        for k in objects:
            for n in sizes:
                out = subprocess.run([sys.executable, __file__, "--child", str(n), str(args.jobs), str(args.load),
                                      str(round_ + 1), str(k)], capture_output=True, text=True, check=True).stdout
                times[k, n].append(json.loads(out)["seconds"])
    print(f"Python {sys.version.split()[0]}; {args.jobs:,} jobs a run at load {args.load} a machine; "
          f"median of {args.repeat}; a process per run")
    print(f"{'objects':>8}{'machines':>10}{'median s':>10}{'µs/job':>9}{'vs smallest':>13}   runs")
    for k in objects:
        first = statistics.median(times[k, sizes[0]])
        for n in sizes:
            med = statistics.median(times[k, n])
            runs = ", ".join(f"{x:.2f}" for x in times[k, n])
            print(f"{k:>8}{n:>10,}{med:>10.3f}{med / args.jobs * 1e6:>9.2f}{med / first:>12.2f}x   {runs}")

if __name__ == "__main__":
    main()
