"""Two trees of mgst, before and after a change, timed on the same simulations, alternated in one run.

Each tree is a Python interpreter and the root of a checkout (``PYTHON:ROOT``); a round runs one
subprocess per tree, in turn (A, B, A, B, ...), each timing the same runs of the simulator in its own
tree, so that a noisy machine's slow minute falls on both. Printed: per workload, the median wall time
of each tree over all rounds and the ratio after/before. The interpreter decides the build: a venv with
the compiled install times the compiled modules, and ``--pure`` sets ``MGST_PURE=1`` for both.

    python benchmarks/bench_ab.py --before OLD_VENV/bin/python:OLD_TREE --after "$(command -v python):." --rounds 7

Workloads: ``sim`` (bench_sim's run: hihi-mfd-fd, LPAS_DG, one replication) and ``bot`` (bench_bot's
run: seed 000's All_VS, 100 machines, one policy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

# The code each subprocess runs, in its tree (cwd and sys.path[0]): times `repeat` runs after one warm-up.
_TIMER = r"""
import gc, json, sys, time
sys.path[:0] = [".", "benchmarks"]
kind, repeat, arg = sys.argv[1], int(sys.argv[2]), sys.argv[3]
clock = time.process_time if sys.argv[4] == "cpu" else time.perf_counter
if kind == "sim":
    from mgst.config import load_experiment
    try:
        from mgst.sim.loop import Simulation
    except ImportError:  # a tree from before the simulator's folder: a module of its own
        from mgst.sim import Simulation
    exp = load_experiment("experiments/hihi-mfd-fd.toml")
    horizon = float(arg)
    def once():
        gc.collect()
        t0 = clock()
        Simulation(exp, seed=exp.simulation.seed, horizon=horizon).run()
        return clock() - t0
    Simulation(exp, seed=exp.simulation.seed, horizon=10.0).run()
else:
    import bench_bot
    policy, bags = arg.split(",")
    bench_bot.time.perf_counter = clock  # (bench_bot times its run with time.perf_counter)
    def once():
        return bench_bot.run_once(policy, int(bags), 1)[0]
    bench_bot.run_once(policy, 1, 1)
print(json.dumps([once() for _ in range(repeat)]))
"""


def _tree(spec: str) -> tuple[str, str]:
    python, sep, root = spec.partition(":")
    if not sep or not os.path.isfile(python) or not os.path.isdir(root):
        raise SystemExit(f"--before/--after take PYTHON:ROOT (an interpreter and a checkout), not {spec!r}")
    return python, root


def _times(tree: tuple[str, str], kind: str, repeat: int, arg: str, pure: bool, cpu: bool) -> list[float]:
    python, root = tree
    env = dict(os.environ, MGST_PURE="1" if pure else "0")
    out = subprocess.run([python, "-c", _TIMER, kind, str(repeat), arg, "cpu" if cpu else "wall"], cwd=root, env=env,
                         capture_output=True, text=True, check=True, timeout=3600)
    return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def _build(tree: tuple[str, str], pure: bool) -> str:
    python, root = tree
    env = dict(os.environ, MGST_PURE="1" if pure else "0")
    code = "import sys; sys.path.insert(0, '.'); import mgst.cli as c; c.main(['--version'])"
    out = subprocess.run([python, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return (out.stdout or out.stderr).strip().splitlines()[-1] if (out.stdout or out.stderr) else "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="PYTHON:ROOT of the tree before the change")
    ap.add_argument("--after", required=True, help="PYTHON:ROOT of the tree after the change")
    ap.add_argument("--rounds", type=int, default=5, help="alternations (default 5)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per subprocess (default 1)")
    ap.add_argument("--horizon", type=float, default=1000.0, help="sim workload's horizon (default 1000)")
    ap.add_argument("--bot", default="rr_nrf,10", help="bot workload's POLICY,BAGS (default rr_nrf,10)")
    ap.add_argument("--workloads", default="sim,bot", help="comma-separated: sim, bot (default both)")
    ap.add_argument("--pure", action="store_true", help="time both trees with MGST_PURE=1")
    ap.add_argument("--cpu", action="store_true",
                    help="time.process_time instead of wall time: steadier on a shared machine")
    args = ap.parse_args(argv)
    trees = {"before": _tree(args.before), "after": _tree(args.after)}
    for name, tree in trees.items():
        print(f"{name}: {tree[1]} ({_build(tree, args.pure)})")
    for kind in args.workloads.split(","):
        arg = f"{args.horizon:g}" if kind == "sim" else args.bot
        times: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.rounds):
            for name, tree in trees.items():
                times[name] += _times(tree, kind, args.repeat, arg, args.pure, args.cpu)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        clock = "CPU" if args.cpu else "wall"
        print(f"{kind} ({arg}, {clock}): before median {med['before']:.3f} s, after {med['after']:.3f} s, "
              f"after/before {med['after'] / med['before']:.3f} "
              f"({len(times['before'])} runs each; before {_fmt(times['before'])}; after {_fmt(times['after'])})")
    return 0


def _fmt(ts: list[float]) -> str:
    return " ".join(f"{t:.3f}" for t in ts)


if __name__ == "__main__":
    sys.exit(main())
