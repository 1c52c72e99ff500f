"""What one replication's batch means cost the engine: Simulation.run with and without them, alternated.

The million-job run of issue 20 (hihi-mfd-fd, ``--horizon 40000``, records not kept, as `mgst simulate` runs one
replication), each run in a fresh process, ``keep_batches`` off then on, ``--rounds`` times; printed: each run's CPU
seconds, the medians and their ratio (CPU time: the wall clock of this shared machine counts the others' load too).

    python benchmarks/bench_batch_means.py --rounds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import json, sys, time
sys.path.insert(0, {root!r})
from mgst.config import load_experiment
from mgst.sim.loop import Simulation
exp = load_experiment({experiment!r})
sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon={horizon!r}, keep_records=False,
                 keep_batches={keep!r})
cpu = time.process_time()
sim.run()
print(json.dumps(time.process_time() - cpu))
"""


def run(keep: bool, horizon: float) -> float:
    code = _RUN.format(root=str(ROOT), experiment=str(ROOT / "experiments" / "hihi-mfd-fd.toml"), horizon=horizon,
                       keep=keep)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return float(json.loads(out.stdout))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--horizon", type=float, default=40000.0)
    args = ap.parse_args(argv)
    without: list[float] = []
    with_batches: list[float] = []
    for r in range(args.rounds):
        without.append(run(False, args.horizon))
        with_batches.append(run(True, args.horizon))
        print(f"round {r + 1}: without {without[-1]:.3f} s, with batches {with_batches[-1]:.3f} s (CPU)")
    a, b = statistics.median(without), statistics.median(with_batches)
    print(f"medians: without {a:.3f} s, with batches {b:.3f} s; with / without {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
