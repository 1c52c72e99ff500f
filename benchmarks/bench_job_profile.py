"""Where a simulated job's instructions or cache misses go, by function and by kind of cost (cachegrind).

Two settings, each run twice under ``valgrind --tool=cachegrind`` (a long run and a short one, the difference divided
by the difference in jobs: the work per job, less imports and set-up), then split by function (cachegrind's own
per-function counts) and summed into kinds: dictionaries, allocating and freeing objects, boxing numbers, the
collector, mgst's own compiled code, the rest.

- ``instructions``: ``bench_sim.py``'s setting (hihi-mfd-fd, LPAS_DG, records kept, one replication), horizons
  ``--horizon`` and a fifth of it. The collector's walk at the process's exit is shown apart and left out of the
  total (``bench_sim.py`` collects before each timed run, so its timing never includes it).
- ``misses``: ``bench_scale.py``'s setting (hihi-mfd-fd's machines repeated to ``--machines``, FCFS, records not
  kept), about ``--jobs`` jobs and a fifth of that, with a simulated last level of ``--ll`` bytes (2 MiB by
  default: this machine's second level per core; its 260 MiB third level holds the whole working set).

    PY="$(python -c 'import sys; print(sys.executable)')"
    python benchmarks/bench_job_profile.py instructions --python "$PY"
    python benchmarks/bench_job_profile.py misses --machines 10000 --python "$PY"
    python benchmarks/bench_job_profile.py objects --python "$PY"

- ``objects``: ``instructions``' setting under callgrind: per job, how many floats and ints were boxed, how many
  tuples, lists, dicts and native objects made, and of those by which functions (callgrind's call counts).

Deterministic (simulated counts: the machine's other load does not move them). Needs Debian's valgrind; give a real
interpreter, not a pyenv shim (valgrind would trace the shim).
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent

# One run in a fresh interpreter; prints the number of jobs it simulated.
_RUN = r"""
import sys
sys.path[:0] = [".", "benchmarks"]
setting, size, machines = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
from mgst.config import load_experiment
from mgst.sim.loop import Simulation
exp = load_experiment("experiments/hihi-mfd-fd.toml")
if setting == "instructions":
    print(len(Simulation(exp, seed=exp.simulation.seed, horizon=size).run().jobs))
else:
    from bench_scale import DRAIN, scaled
    print(Simulation(scaled(exp, machines, "fcfs", int(size)), drain_limit=DRAIN, keep_records=False).run().jobs_total)
"""

# Kinds of cost, by the function's name (the first that matches); the rest is "other".
KINDS = (
    ("collector", re.compile(r"gc_collect|visit_decref|visit_reachable|_traverse$|subtract_refs|move_unreachable"
                             r"|update_refs|deduce_unreachable")),
    ("dictionaries", re.compile(r"dict|Dict|insertdict|delitem|_lookup|PyObject_Hash|long_hash")),
    ("allocating and freeing", re.compile(r"Malloc|Free|_Py_NewReference|GenericAlloc|dealloc|memset|GC_Link"
                                          r"|GC_UnTrack|_Py_Dealloc")),
    ("boxing numbers", re.compile(r"PyFloat_|PyLong_|float_|CPyTagged")),
    ("mgst's compiled code", re.compile(r"^CPyDef_")),
)


def per_function(out: str, events: tuple[str, ...]) -> collections.Counter[str]:
    """cachegrind's counts in the file ``out``, summed over ``events``, by function name."""
    totals: collections.Counter[str] = collections.Counter()
    names: list[str] = []
    fn = "???"
    for line in Path(out).read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("fn="):
            fn = line[3:].strip()
        elif line[:1].isdigit():
            values = dict(zip(names, map(int, line.split()[1:]), strict=False))
            totals[fn] += sum(values.get(e, 0) for e in events)
    return totals


# What makes an object, for ``objects``: the function whose calls count them (each call one object).
MAKERS = (
    ("floats boxed", "PyFloat_FromDouble"),
    ("ints boxed by compiled code (below 256: shared, not made)", "CPyTagged_StealAsObject"),
    ("tuples", "PyTuple_New"),
    ("lists", "PyList_New"),
    ("dicts", "PyDict_New"),
    ("native objects and C tuples (tp_alloc)", "PyType_GenericAlloc"),
    ("small blocks allocated in all", "PyObject_Malloc"),
)


def calls_by_caller(out: str) -> dict[str, collections.Counter[str]]:
    """callgrind's call counts in the file ``out``: for each function called, how often each caller called it."""
    calls: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    names: dict[str, str] = {}

    def name(token: str) -> str:  # callgrind compresses a repeated name to its "(id)"
        ident, _, text = token.strip().partition(" ")
        if text:
            names[ident] = text
        return names.get(ident, ident)

    fn = callee = "???"
    for line in Path(out).read_text().splitlines():
        if line.startswith("fn="):
            fn = name(line[3:])
        elif line.startswith("cfn="):
            callee = name(line[4:])
        elif line.startswith("calls="):
            calls[callee][fn] += int(line[6:].split()[0])
    return calls


def run(python: str, setting: str, size: float, machines: int, tool_args: list[str]) -> tuple[int, str]:
    """One traced run: (jobs, path of the tool's output, in a temporary folder the caller removes)."""
    out = os.path.join(tempfile.mkdtemp(prefix="job-profile-"), "cg.out")
    setarch = ["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    tool = "callgrind" if setting == "objects" else "cachegrind"
    r = subprocess.run([*setarch, "valgrind", f"--tool={tool}", *tool_args, f"--{tool}-out-file={out}",
                        python, "-c", _RUN, "misses" if setting == "misses" else "instructions", repr(size),
                        str(machines)],
                       cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return int(r.stdout.split()[-1]), out


def long_and_short(python: str, setting: str, sizes: tuple[float, float], machines: int, tool_args: list[str],
                   read: Callable[[str], T]) -> tuple[int, T, int, T]:
    """The long and the short traced run of ``setting``: each one's jobs and its output as ``read`` reads it (the
    tool's files removed)."""
    (long_jobs, long_out), (short_jobs, short_out) = (run(python, setting, s, machines, tool_args) for s in sizes)
    try:
        return long_jobs, read(long_out), short_jobs, read(short_out)
    finally:
        for out in (long_out, short_out):
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)


def objects(python: str, horizon: float, top: int) -> None:
    """Objects made per job, by kind and by the functions that made them (a long run less a short one)."""
    long_jobs, long, short_jobs, short = long_and_short(python, "objects", (horizon, horizon / 5), 0, [],
                                                        calls_by_caller)
    jobs = long_jobs - short_jobs
    print(f"objects: made per job, a run of {long_jobs:,} jobs minus one of {short_jobs:,}")
    for kind, maker in MAKERS:
        by = {caller: (n - short[maker].get(caller, 0)) / jobs for caller, n in long[maker].items()}
        print(f"{sum(by.values()):8.1f}  {kind} ({maker})")
        for caller, v in sorted(by.items(), key=lambda kv: -kv[1])[:top]:
            if v >= 0.05:
                print(f"          {v:6.2f}  {caller}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("setting", choices=("instructions", "misses", "objects"))
    ap.add_argument("--horizon", type=float, default=2000.0,
                    help="instructions, objects: the long run's horizon (2000)")
    ap.add_argument("--jobs", type=int, default=100_000, help="misses: about this many jobs in the long run")
    ap.add_argument("--machines", type=int, default=10_000, help="misses: machines (default 10000)")
    ap.add_argument("--ll", type=int, default=2 * 1024 * 1024, help="misses: simulated last level, bytes (2 MiB)")
    ap.add_argument("--top", type=int, default=12, help="functions listed (default 12)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter to trace (default: this one)")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("error: valgrind is not on the PATH (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    if args.setting == "objects":
        objects(args.python, args.horizon, args.top)
        return 0
    if args.setting == "instructions":
        cache_args, events, unit = ["--cache-sim=no"], ("Ir",), "instructions"
        sizes = (args.horizon, args.horizon / 5)
    else:
        cache_args = ["--cache-sim=yes", "--I1=32768,8,64", "--D1=32768,8,64", f"--LL={args.ll},16,64"]
        events, unit = ("DLmr", "DLmw"), f"misses of a {args.ll:,}-byte last level"
        sizes = (float(args.jobs), float(args.jobs // 5))
    long_jobs, long, short_jobs, short = long_and_short(args.python, args.setting, sizes, args.machines, cache_args,
                                                        lambda out: per_function(out, events))
    jobs = long_jobs - short_jobs
    per_job = {fn: (long[fn] - short.get(fn, 0)) / jobs for fn in long}
    kinds: collections.Counter[str] = collections.Counter()
    for fn, v in per_job.items():
        kinds[next((kind for kind, pattern in KINDS if pattern.search(fn)), "other")] += v
    collector = kinds.pop("collector", 0.0)
    total = sum(kinds.values())
    print(f"{args.setting}: {unit} per job, a run of {long_jobs:,} jobs minus one of {short_jobs:,}")
    if args.setting == "instructions":
        print(f"total {total:,.0f} a job (the collector's walk at exit, left out: {collector:,.0f})")
    else:
        total += collector
        print(f"total {total:,.1f} a job")
    for kind, v in kinds.most_common():
        print(f"  {kind:<26}{v:>10,.1f}  {100 * v / total:5.1f} %")
    print("by function:")
    for fn, v in sorted(per_job.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {v:>10,.1f}  {fn}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
