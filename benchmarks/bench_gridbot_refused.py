"""GridBot's priorities experiment (1,000 hosts, 50 bags of 1,200 jobs queued at 0, the community grid refused by
every bag's GridPolicy) simulated for a while: the time a run spends on requests that get nothing.

    python benchmarks/bench_gridbot_refused.py --horizon 600          # prints the wall time and the policy's counts
    farm-bench -n 5 --timeout 900 -- python benchmarks/bench_gridbot_refused.py \\
        --vs "python OLD_TREE/benchmarks/bench_gridbot_refused.py --tree OLD_TREE"
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=float, default=600.0, help="model time simulated (and the drain limit)")
    ap.add_argument("--tree", type=Path, default=ROOT, help="the mgst checkout to time (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(args.tree))
    from mgst.config import load_experiment  # noqa: PLC0415
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    exp = load_experiment(args.tree / "experiments" / "gridbot" / "priorities.toml")
    started = time.perf_counter()
    sim = Simulation(exp, replication=0, horizon=args.horizon, drain_limit=args.horizon, keep_records=False)
    run = sim.run()
    took = time.perf_counter() - started
    evaluations = sim.policy.evaluations  # type: ignore[attr-defined]
    print(f"{args.tree}: {took:.2f} s, {run.jobs_total - run.unfinished} jobs done by {args.horizon:g}; "
          f"requests {sim.policy.counts['requests']:,}, GridPolicy evaluated {evaluations['GridPolicy']:,}")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
