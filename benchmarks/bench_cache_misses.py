"""Instructions and simulated cache misses per job, from 10 to 10,000 machines: why per-job time grows with them.

This machine's hardware counters are not readable (``perf stat`` prints no cycles or cache misses in its VM), so
the caches are simulated: ``valgrind --tool=cachegrind --cache-sim=yes`` with a fixed hierarchy (``--D1``,
``--LL``: a 32 KiB first level and an 8 MiB last level, a common desktop's), which the machine's other load
does not move. Each setting runs twice, at ``--jobs`` and at a fifth of it, and the difference is divided by the
difference in jobs: the work per job, less imports and set-up. The setting is bench_scale's: hihi-mfd-fd's
machines repeated to n, arrivals scaled to keep the load per machine, FCFS; streamed (no records kept, as
``mgst simulate`` runs) and, with ``--kept``, with every record kept as well.

    python benchmarks/bench_cache_misses.py --jobs 100000

Needs Debian's valgrind; give a real interpreter (not a pyenv shim, which valgrind would trace instead):
``--python "$(python -c 'import sys; print(sys.executable)')"`` (the default is this one's).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LL_BYTES = 8 * 1024 * 1024  # the simulated last level, unless --ll says another size


def caches(ll_bytes: int) -> tuple[str, ...]:
    return ("--I1=32768,8,64", "--D1=32768,8,64", f"--LL={ll_bytes},16,64")

# One run in a fresh interpreter: bench_scale's setting at n machines and about ``jobs`` jobs; prints the jobs run.
_RUN = r"""
import sys
sys.path[:0] = [".", "benchmarks"]
n, jobs, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "kept"
from bench_scale import DRAIN, scaled
from mgst.config import load_experiment
from mgst.sim.loop import Simulation
exp = scaled(load_experiment("experiments/hihi-mfd-fd.toml"), n, "fcfs", jobs)
print(Simulation(exp, drain_limit=DRAIN, keep_records=keep).run().jobs_total)
"""

_FIELDS = ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")


def counts(python: str, n: int, jobs: int, mode: str, ll_bytes: int = LL_BYTES) -> tuple[int, dict[str, int]]:
    """Jobs run and cachegrind's totals for one run."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        setarch = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
        env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
        r = subprocess.run([*setarch, "valgrind", "--tool=cachegrind", "--cache-sim=yes", *caches(ll_bytes),
                            f"--cachegrind-out-file={out}", python, "-c", _RUN, str(n), str(jobs), mode],
                           cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        summary = re.search(r"^summary:(.*)$", Path(out).read_text(), re.M)
        events = re.search(r"^events:(.*)$", Path(out).read_text(), re.M)
        assert summary and events, r.stderr[-2000:]
        totals = dict(zip(events.group(1).split(), map(int, summary.group(1).split()), strict=True))
        return int(r.stdout.split()[-1]), {k: totals[k] for k in _FIELDS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10,10000", help="machine counts, comma-separated (default 10,10000)")
    ap.add_argument("--jobs", type=int, default=100_000, help="about this many jobs in the long run (default 100000)")
    ap.add_argument("--kept", action="store_true", help="also with every record kept")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to trace (default: this one)")
    ap.add_argument("--ll", type=int, default=LL_BYTES,
                    help="the simulated last level's size in bytes (default 8 MiB; 2097152 models a 2 MiB second "
                         "level per core, the level whose misses cost when a large third level is shared)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("error: valgrind is not on the PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    modes = ["streamed", "kept"] if args.kept else ["streamed"]
    print(f"cachegrind {' '.join(caches(args.ll))}; FCFS, hihi-mfd-fd scaled; per job: (run of {args.jobs:,} jobs) "
          f"minus (run of {args.jobs // 5:,}), over the difference in jobs")
    print(f"{'mode':<10}{'machines':>10}{'instr/job':>12}{'D1 miss/job':>13}{'LL miss/job':>13}")
    for mode in modes:
        for n in [int(s) for s in args.sizes.split(",")]:
            long_jobs, long = counts(args.python, n, args.jobs, mode, args.ll)
            short_jobs, short = counts(args.python, n, args.jobs // 5, mode, args.ll)
            d = long_jobs - short_jobs

            def per(*keys: str, long: dict[str, int] = long, short: dict[str, int] = short, d: int = d) -> float:
                return sum(long[k] - short[k] for k in keys) / d

            print(f"{mode:<10}{n:>10,}{per('Ir'):>12,.0f}{per('D1mr', 'D1mw'):>13.1f}{per('DLmr', 'DLmw'):>13.2f}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
