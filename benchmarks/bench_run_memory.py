"""Peak resident memory of `mgst simulate` on the 1.06 M-job run, tree against tree, alternated; and where the bytes go.

Each tree is an interpreter and a checkout (``PYTHON:ROOT``, as bench_ab.py takes them). A round runs, once per
tree in turn, ``PYTHON -m mgst simulate experiments/hihi-mfd-fd.toml --horizon 40000 --replications 1 --workers 1``
in a fresh child process (cwd ROOT), and reads the child's peak resident set size from the kernel when it is reaped
(``os.wait4``'s ``ru_maxrss``: the high-water mark, whatever the machine's other load), and its wall time. Printed
per tree: the peak RSS (it is the same from run to run to a few hundred kB), the median wall time over the rounds
and the ratio of the medians (wall time is the noisy one on a shared machine: read ratios measured alternately),
and whether every run printed the same result table.

``--profile`` runs, in each tree, the same simulation in-process under ``tracemalloc`` (slow: use a shorter
``--horizon``) through the tree's own ``run_simulation``, and prints what is held when the replication's run has
returned, before it is reduced (where a run that keeps its records peaks): the traced peak, the bytes held by
allocation site, and the live objects of the core's record types, with their bytes per job.

    python benchmarks/bench_run_memory.py --tree OLD_VENV/bin/python:OLD_TREE --tree PY:. --rounds 3
    python benchmarks/bench_run_memory.py --tree PY:ROOT --profile --horizon 4000
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

COMMAND = ("-m", "mgst", "simulate", "experiments/hihi-mfd-fd.toml", "--replications", "1", "--workers", "1")
TARGET = 300e6  # bytes: the peak RSS the 1.06 M-job run must stay under
MB = 1e6

# The in-process profile, run in a tree (cwd and sys.path[0]): the tree's run_simulation, its Simulation wrapped
# so that a snapshot is taken as a run returns (its records, if it keeps them, all alive).
_PROFILE = r"""
import collections, gc, json, sys, tracemalloc
sys.path[:0] = ["."]
horizon, top = float(sys.argv[1]), int(sys.argv[2])
try:
    from mgst.sim import replications as where
except ImportError:  # a tree from before the simulator's folder
    from mgst import simulate as where
from mgst.config import load_experiment
exp = load_experiment("experiments/hihi-mfd-fd.toml")
held = {}
Real = where.Simulation
class Measured:
    def __init__(self, *args, **kw):
        self.sim = Real(*args, **kw)
        self.policy = self.sim.policy
    def run(self):
        run = self.sim.run()
        snap = tracemalloc.take_snapshot()
        held["current"], held["peak"] = tracemalloc.get_traced_memory()
        held["jobs"] = getattr(run, "jobs_total", 0) or len(run.jobs)
        held["sites"] = [(str(s.traceback[0]), s.size, s.count)
                         for s in snap.statistics("lineno")[:top]]
        kinds = collections.Counter(type(o).__name__ for o in gc.get_objects())
        held["objects"] = {k: kinds[k] for k in ("JobRecord", "ReplicaRecord", "Job", "dict", "list", "tuple")}
        return run
where.Simulation = Measured
tracemalloc.start()
where.run_simulation(exp, horizon=horizon, replications=1, workers=1)
print(json.dumps(held))
"""


def _tree(spec: str) -> tuple[str, str]:
    python, sep, root = spec.partition(":")
    if not sep or not os.path.isfile(python) or not os.path.isdir(root):
        raise SystemExit(f"error: --tree takes PYTHON:ROOT (an interpreter and a checkout), not {spec!r}")
    return python, os.path.abspath(root)


def measure(tree: tuple[str, str], horizon: float) -> tuple[int, float, str]:
    """One run of the command in a child: (peak RSS in bytes, wall time in s, what it printed)."""
    python, root = tree
    t0 = time.perf_counter()
    child = subprocess.Popen([python, *COMMAND, "--horizon", f"{horizon:g}"], cwd=root, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    assert child.stdout is not None
    out = child.stdout.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - t0
    child.returncode = os.waitstatus_to_exitcode(status)  # (reaped here: Popen must not wait for it again)
    if child.returncode != 0:
        raise SystemExit(f"error: the command failed in {root} (exit {child.returncode})")
    return usage.ru_maxrss * 1024, wall, out  # ru_maxrss: kB on Linux


def profile(tree: tuple[str, str], horizon: float, top: int) -> dict:
    python, root = tree
    out = subprocess.run([python, "-c", _PROFILE, f"{horizon:g}", str(top)], cwd=root, capture_output=True,
                         text=True, timeout=3600, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="PYTHON:ROOT, once per tree (in order)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations (default 3)")
    ap.add_argument("--horizon", type=float, default=40000.0, help="model time (default 40000: 1.06 M jobs)")
    ap.add_argument("--profile", action="store_true", help="where the bytes go, under tracemalloc (no timing)")
    ap.add_argument("--top", type=int, default=12, help="allocation sites shown with --profile (default 12)")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.top < 1 or not args.horizon > 0:
        raise SystemExit("error: --rounds and --top must be >= 1, --horizon > 0")
    trees = [_tree(t) for t in args.tree]
    if args.profile:
        for tree in trees:
            p = profile(tree, args.horizon, args.top)
            jobs = max(1, p["jobs"])
            print(f"{tree[1]}: {p['jobs']:,} jobs; traced at the run's end {p['current'] / MB:.1f} MB "
                  f"({p['current'] / jobs:.0f} B/job), traced peak {p['peak'] / MB:.1f} MB")
            print("  objects: " + ", ".join(f"{k} {v:,}" for k, v in p["objects"].items()))
            for site, size, count in p["sites"]:
                print(f"  {size / MB:8.1f} MB {count:>10,} blocks {size / jobs:7.1f} B/job  {site}")
        return 0
    peaks: dict[str, list[int]] = {root: [] for _, root in trees}
    walls: dict[str, list[float]] = {root: [] for _, root in trees}
    outputs: set[str] = set()
    for _ in range(args.rounds):
        for tree in trees:
            peak, wall, out = measure(tree, args.horizon)
            peaks[tree[1]].append(peak)
            walls[tree[1]].append(wall)
            outputs.add(out)
    first = statistics.median(walls[trees[0][1]])
    for _, root in trees:
        peak = max(peaks[root])
        wall = statistics.median(walls[root])
        verdict = "under" if peak <= TARGET else "OVER"
        print(f"{root}: peak RSS {peak / MB:,.1f} MB ({verdict} {TARGET / MB:.0f} MB; runs "
              f"{', '.join(f'{p / MB:.1f}' for p in peaks[root])}), wall median {wall:.2f} s "
              f"({', '.join(f'{w:.2f}' for w in walls[root])}), {wall / first:.3f}x the first tree's")
    print(f"same result table in every run: {'yes' if len(outputs) == 1 else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
