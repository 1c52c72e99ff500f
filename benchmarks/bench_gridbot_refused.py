"""GridBot's priorities experiment (1,000 hosts, 50 bags of 1,200 jobs queued at 0, the community grid refused by
every bag's GridPolicy) simulated for a while: the time a run spends on requests that get nothing.

    python benchmarks/bench_gridbot_refused.py --horizon 600          # prints the wall time and the policy's counts
    python benchmarks/bench_gridbot_refused.py --horizon 600 --vs OLD --rounds 3 [--pure]

With ``--vs OLD`` (a checkout of the tree before a change), each round runs one process of this tree and one of
OLD's, in turn (so that a noisy machine's slow minute falls on both), and prints each tree's median wall time and
the ratio this/OLD. ``--pure`` runs both with ``MGST_PURE=1`` (a checkout without the compiled build otherwise
runs its pure modules beside this tree's compiled ones).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r": ([0-9.]+) s, .* requests ([0-9,]+), GridPolicy evaluated ([0-9,]+)$")


def run_once(tree: Path, horizon: float) -> None:
    """One run of ``tree``'s mgst, in this process: its time and the policy's counts printed."""
    sys.path.insert(0, str(tree))
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    exp = load_experiment(tree / "experiments" / "gridbot" / "priorities.toml")
    started = time.perf_counter()
    sim = Simulation(exp, replication=0, horizon=horizon, drain_limit=horizon, keep_records=False)
    run = sim.run()
    took = time.perf_counter() - started
    evaluations = sim.policy.evaluations  # type: ignore[attr-defined]
    print(f"{tree}: {took:.2f} s, {run.jobs_total - run.unfinished} jobs done by {horizon:g}; "
          f"requests {sim.policy.counts['requests']:,}, GridPolicy evaluated {evaluations['GridPolicy']:,}")  # type: ignore[attr-defined]


def alternate(trees: dict[str, Path], horizon: float, rounds: int, pure: bool) -> None:
    """Each tree run in a process of its own, in turn, ``rounds`` times: medians and the ratio."""
    env = {**os.environ, **({"MGST_PURE": "1"} if pure else {})}
    times: dict[str, list[float]] = {name: [] for name in trees}
    counts: dict[str, tuple[str, str]] = {}
    for r in range(rounds):
        for name, tree in trees.items():
            p = subprocess.run([sys.executable, __file__, "--horizon", str(horizon), "--tree", str(tree)],
                               capture_output=True, text=True, env=env, check=True)
            m = LINE.search(p.stdout.strip())
            assert m, p.stdout
            times[name].append(float(m.group(1)))
            counts[name] = (m.group(2), m.group(3))
            print(f"round {r + 1} {name}: {m.group(1)} s", flush=True)
    for name, ts in times.items():
        requests, evaluated = counts[name]
        print(f"{name:5} median {statistics.median(ts):.2f} s ({', '.join(f'{t:.2f}' for t in ts)}); requests "
              f"{requests}, GridPolicy evaluated {evaluated}")
    this, old = (statistics.median(ts) for ts in times.values())
    print(f"this/OLD {this / old:.3f}{' (MGST_PURE=1)' if pure else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=float, default=600.0, help="model time simulated (and the drain limit)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the mgst checkout to time (default: this one)")
    ap.add_argument("--vs", type=Path, metavar="OLD", help="a checkout of the tree before: both timed, alternated")
    ap.add_argument("--rounds", type=int, default=3, help="with --vs: processes of each tree (default 3)")
    ap.add_argument("--pure", action="store_true", help="with --vs: both trees with MGST_PURE=1")
    args = ap.parse_args()
    if args.vs is None:
        run_once(args.tree, args.horizon)
    else:
        alternate({"this": args.tree, "OLD": args.vs}, args.horizon, args.rounds, args.pure)


if __name__ == "__main__":
    main()
