"""CPU seconds of Casanova cells (all 17 heuristics on one instance), for two trees side by side.

    python benchmarks/bench_casanova_cell.py                      # this tree, the default cells
    python benchmarks/bench_casanova_cell.py --vs /path/to/other  # and another checkout, alternating

Each cell runs in a fresh process (so no memo carries over), its CPU time read by ``time.process_time``
there: on a shared machine CPU time, not wall time, is the measure. The trees alternate cell by cell and
round by round, and the medians are printed with their ratio. The makespans of both trees are compared too:
a speed change must not change a result.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CELLS = ("5,5,1,0", "5,5,5,0", "10,5,1,0", "10,5,5,0")
CHILD = """
import json, sys, time
from mgst.papers.casanova.scenario import SCENARIO, simulate_cell
from mgst.papers.casanova.heuristics import NAMES
from mgst.scenarios.scenario import RunSettings
m, n_com, w_min, index = sys.argv[1].split(",")
options = {"exact": False, "cap": float(sys.argv[2]), "iterations": 10, "processors": 20}
exp = SCENARIO.build({"m": m, "n_com": n_com, "w_min": w_min, "scenario": index}, RunSettings(0, 0, 0), 1, 0,
                     options)
t = time.process_time()
out = simulate_cell(exp, 0)
print(json.dumps({"cpu": time.process_time() - t, "makespans": [out[f"makespan_{h}"] for h in NAMES]}))
"""


def cell(tree: Path, spec: str, cap: float) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, spec, str(cap)], cwd=tree, capture_output=True, text=True,
                          check=True, env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vs", type=Path, help="another checkout to time beside this one")
    parser.add_argument("--cells", default=";".join(CELLS), help="m,n_com,w_min,scenario;... (trial 0)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cap", type=float, default=1_000_000.0)
    args = parser.parse_args()
    trees = [Path(__file__).resolve().parent.parent] + ([args.vs.resolve()] if args.vs else [])
    print("cell (m, n_com, w_min, scenario) | " + " | ".join(f"CPU s, {t}" for t in trees)
          + (" | ratio" if len(trees) == 2 else ""))
    for spec in args.cells.split(";"):
        times: list[list[float]] = [[] for _ in trees]
        makespans = []
        for r in range(args.rounds):
            order = list(range(len(trees))) if r % 2 == 0 else list(reversed(range(len(trees))))
            for i in order:
                out = cell(trees[i], spec, args.cap)
                times[i].append(out["cpu"])
                makespans.append((i, out["makespans"]))
        same = len({json.dumps(m) for _, m in makespans}) == 1
        medians = [statistics.median(t) for t in times]
        ratio = f" | {medians[1] / medians[0]:.1f}" if len(trees) == 2 else ""
        print(f"{spec} | " + " | ".join(f"{m:.2f}" for m in medians) + ratio
              + ("" if same else " | MAKESPANS DIFFER"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
