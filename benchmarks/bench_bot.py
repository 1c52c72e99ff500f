"""Replica events per second of the simulator on seed 000's All_VS workload, 100 machines, per policy."""

from __future__ import annotations

import argparse
import gc
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
    sys.path.insert(0, str(ROOT))

from mgst.papers.anglano import scenario as anglano  # noqa: E402
from mgst.sim.loop import Simulation  # noqa: E402


def run_once(policy: str, bags: int, seed: int) -> tuple[float, int, int]:
    """(wall seconds, replica events, tasks) of one replication: ``bags`` bags at low intensity."""
    exp = anglano.experiment(
        "high", "homogeneous", "All_VS", "low", policy, horizon=1e12, warmup=0.0, replications=1,
        seed=seed, checkpoint_interval=600.0, max_bags=bags,
    )
    gc.collect()
    t0 = time.perf_counter()
    run = Simulation(exp, drain_limit=1e12).run()
    wall = time.perf_counter() - t0
    # A replica's events: its start, its end, and (when it staged) its start of computing.
    events = sum(2 + (1 if r.progress > 0 else 0) for rec in run.jobs for r in rec.history)
    return wall, events, len(run.jobs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--policies", default="rr_nrf,long_idle,fcfs_share,rr,fcfs_excl")
    p.add_argument("--bags", type=int, default=20, help="bags per run (All_VS: about 3,600 tasks each)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    print(f"seed 000, High-Avail homogeneous (100 machines), All_VS, low intensity, {args.bags} bags, "
          f"{args.repeat} runs each; Python {platform.python_version()}\n")
    print(f"{'policy':<12}{'tasks':>10}{'replica events':>16}{'median s':>10}{'events/s':>12}{'tasks/s':>10}")
    for policy in args.policies.split(","):
        walls = []
        events = tasks = 0
        for _ in range(args.repeat):
            wall, events, tasks = run_once(policy, args.bags, args.seed)
            walls.append(wall)
        med = statistics.median(walls)
        print(f"{policy:<12}{tasks:>10,}{events:>16,}{med:>10.2f}{events / med:>12,.0f}{tasks / med:>10,.0f}")


if __name__ == "__main__":
    main()
