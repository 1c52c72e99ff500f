"""Instructions per workload, two trees side by side: callgrind counts, which the machine's other load does not move.

Each tree is a Python interpreter and the root of a checkout (``PYTHON:ROOT``, as bench_ab.py takes them). For
each workload the script runs ``valgrind --tool=callgrind`` twice per tree, the workload at full size and at its
smallest (one time unit, one bag), and prints the difference: the instructions of the work, less the imports and
set-up (medians of ``--repeat`` runs). Needs Debian's valgrind. Give a real interpreter (not a pyenv shim, which
valgrind would trace instead).

    python benchmarks/bench_instructions.py --before OLD_VENV/bin/python:OLD_TREE \\
        --after "$(python -c 'import sys; print(sys.executable)')":.

Workloads: ``sim`` (hihi-mfd-fd, LPAS_DG, one replication, ``--horizon``) and ``bot`` (bench_bot's RR-NRF
cell, ``--bags`` bags).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# What each run executes in its tree (cwd and sys.path[0]): one workload of the given size.
_RUN = r"""
import sys
sys.path[:0] = [".", "benchmarks"]
kind, size = sys.argv[1], sys.argv[2]
if kind == "sim":
    from mgst.config import load_experiment
    try:
        from mgst.sim.loop import Simulation
    except ImportError:  # a tree from before the simulator's folder
        from mgst.sim import Simulation
    exp = load_experiment("experiments/hihi-mfd-fd.toml")
    Simulation(exp, seed=exp.simulation.seed, horizon=float(size)).run()
else:
    import bench_bot
    bench_bot.run_once("rr_nrf", int(size), 1)
"""


def instructions(python: str, root: str, kind: str, size: str) -> int:
    """The instructions callgrind counts for one run of ``kind`` at ``size`` in ``root``."""
    # Without address-space randomisation (setarch -R, where there is one) and with str hashes fixed, runs differ
    # by a few tenths of a percent (dicts keyed by objects hash their addresses); the caller takes medians.
    norandom = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [*norandom, "valgrind", "--tool=callgrind", f"--callgrind-out-file={os.path.join(tmp, 'cg.out')}",
             python, "-c", _RUN, kind, size], cwd=root, capture_output=True, text=True, check=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},  # str hashes fixed: the same dict orders, run to run
        )
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count for {python} in {root}: {out.stderr[-400:]}")
    return int(found.group(1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="PYTHON:ROOT of the tree before the change")
    ap.add_argument("--after", required=True, help="PYTHON:ROOT of the tree after the change")
    ap.add_argument("--horizon", default="5000", help="sim workload's horizon (default 5000)")
    ap.add_argument("--bags", default="20", help="bot workload's bags (default 20)")
    ap.add_argument("--workloads", default="sim,bot", help="comma-separated: sim, bot (default both)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each size in each tree; medians (default 3)")
    args = ap.parse_args()
    trees = {"before": args.before.split(":", 1), "after": args.after.split(":", 1)}
    for kind in args.workloads.split(","):
        full, least = (args.horizon, "1") if kind == "sim" else (args.bags, "1")
        work = {}
        counts: dict[tuple[str, str], list[int]] = {}
        for _ in range(args.repeat):  # the trees in turn, each size
            for name, (python, root) in trees.items():
                for size in (full, least):
                    counts.setdefault((name, size), []).append(instructions(python, root, kind, size))
        for name in trees:
            work[name] = statistics.median(counts[name, full]) - statistics.median(counts[name, least])
        before, after = work["before"] / 1e6, work["after"] / 1e6
        print(f"{kind} ({full} less {least}): before {before:,.1f} M, after {after:,.1f} M, "
              f"after/before {after / before:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
