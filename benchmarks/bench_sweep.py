"""`mgst sweep` on 1 and 2 local workers and on a Dask LocalCluster of 1 and 2 workers: speed-up 2 vs 1.

The sweep is seed 000's Bag-of-Tasks grid (Anglano & Canonico) at reduced scale: one Desktop Grid
configuration (medium availability, heterogeneous machines, low intensity), the five policies and
four workload mixes, one replication: 20 cells. The mixes make the cells' costs as uneven as in the
full grid (an All_VS cell simulates ~40x the tasks of a Uniform one: 0.3 s to 5 s each at the
default horizon of 500,000 s, 22-30 s of cell time in all), which is what load balancing has to
cope with, and every cell is long against the per-cell overheads (pickling, CSV writing).

Each run is the command itself, ``python -m mgst sweep FILE --out DIR --quiet`` with ``--workers N``
or ``--scheduler ADDRESS``, in a fresh process and a fresh output folder, so imports, pool start-up,
summary and plots are paid as a user pays them. Two times are taken: the sweep call (run_sweep, as
the command reports it, to 0.1 s), on which the target is judged, and the whole command's wall time
(the sweep call plus Python's start-up and the CLI's imports). The Dask cluster is started before
the clock starts (its start-up is reported apart) and closed after it stops; its workers are new,
so the first cells pay their imports (``--warm-workers``: in the start-up instead). The order of the
four modes alternates over the repeats (forward, backward, ...), so drift hits all alike; medians
are reported. So are the summed cell time (sweep.csv's wall_s: it grows when cells share a core),
and the CPU others use during each run (busy time not ours, from /proc/stat): on a 2-core box, a
neighbour using half a core takes it from the 2-worker runs.

    python benchmarks/bench_sweep.py                    # 3 repeats of the 4 modes, 6-7 minutes
    python benchmarks/bench_sweep.py --repeat 5 --wait-idle 90 --keep /tmp/bench   # on a shared box
"""

from __future__ import annotations

import argparse
import csv
import logging
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # this tree's mgst, here and in the Dask workers (they get this sys.path)
    sys.path.insert(0, str(ROOT))
TARGET = 1.7
TIMING = {"wall_s"}  # columns that differ from run to run by nature
MODES = ("local-1", "local-2", "dask-1", "dask-2")

SWEEP = """\
# benchmarks/bench_sweep.py: seed 000's grid at reduced scale, 20 cells of uneven cost
scenario = "anglano"
name = "bench-sweep"

[axes]
policy = ["fcfs_excl", "fcfs_share", "rr", "rr_nrf", "long_idle"]
availability = ["medium"]
heterogeneity = ["heterogeneous"]
mix = ["All_VS", "All_S", "Short", "Uniform"]
intensity = ["low"]

[simulation]
horizon = {horizon!r}
warmup = {warmup!r}
checkpoint_interval = 600.0
replications = {replications}
seed = 1
"""


def cpu_busy() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine since boot, all cores (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def our_cpu(extra_pids: list[int]) -> float:
    """CPU seconds of this process, its waited-for children, and ``extra_pids`` (live Dask workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    if extra_pids:
        import psutil

        for pid in extra_pids:
            try:
                t = psutil.Process(pid).cpu_times()
                total += t.user + t.system
            except psutil.NoSuchProcess:
                pass
    return total


def wait_idle(limit: float, most: float, sample: float = 3.0) -> float:
    """Wait up to ``most`` s until others use less than ``limit`` cores over ``sample`` s; return their last load."""
    deadline = time.monotonic() + most
    while True:
        busy0, _ = cpu_busy()
        mine0 = our_cpu([])
        time.sleep(sample)
        load = max(0.0, (cpu_busy()[0] - busy0) - (our_cpu([]) - mine0)) / sample
        if load < limit or time.monotonic() >= deadline:
            return load


def start_cluster(n: int, warm: bool):
    """A LocalCluster of ``n`` one-thread worker processes; with ``warm``, they have imported mgst's cell code."""
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address=None, silence_logs=logging.ERROR)
    if warm:
        import importlib

        with Client(cluster, set_as_default=False) as client:
            for module in ("mgst.sweep", "mgst.bot_metrics", "mgst.sim.bag_cell"):
                client.run(importlib.import_module, module)
    started = time.perf_counter() - t0
    pids = [w.process.pid for w in cluster.workers.values()]  # the nannies' worker processes
    return cluster, started, [p for p in pids if p is not None]


def run_once(mode: str, sweep_file: Path, out: Path, verbose: bool = False, warm: bool = False) -> dict:
    backend, n = mode.split("-")
    cmd = [sys.executable, "-m", "mgst", "sweep", str(sweep_file), "--out", str(out), "--quiet"]
    cluster, startup, pids = None, None, []
    if backend == "dask":
        cluster, startup, pids = start_cluster(int(n), warm)
        cmd += ["--scheduler", cluster.scheduler_address]
    else:
        cmd += ["--workers", n]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        busy0, steal0 = cpu_busy()
        ours0 = our_cpu(pids)
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        busy1, steal1 = cpu_busy()
        ours1 = our_cpu(pids)
    finally:
        if cluster is not None:
            cluster.close()
    if p.returncode != 0:
        raise SystemExit(f"{mode}: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}{p.stderr}")
    if verbose:
        print(f"  {mode}: {p.stdout.strip()}", file=sys.stderr)
    m = re.search(r"run now \(0 failed\) in ([0-9.]+) s", p.stdout)
    with open(out / "sweep.csv", newline="") as f:
        cells = sum(float(r["wall_s"]) for r in csv.DictReader(f))
    return {"wall": wall, "sweep": float(m.group(1)) if m else float("nan"), "startup": startup, "cells": cells,
            "others": max(0.0, (busy1 - busy0) - (ours1 - ours0)) / wall, "steal": (steal1 - steal0) / wall,
            "ours": (ours1 - ours0) / wall}


def table_of(out: Path) -> tuple[dict[tuple, dict[str, str]], list[str]]:
    """sweep.csv as key -> row without the timing columns; and its header."""
    with open(out / "sweep.csv", newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        keys = header[: header.index("avt")]
        rows = {tuple(r[k] for k in keys): {k: v for k, v in r.items() if k not in TIMING} for r in reader}
    return rows, header


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--horizon", type=float, default=500000.0, help="model seconds of bag arrivals (default 500000)")
    ap.add_argument("--replications", type=int, default=1)
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of {', '.join(MODES)}")
    ap.add_argument("--keep", type=Path, help="keep the output folders here (default: a temporary folder)")
    ap.add_argument("--warm-workers", action="store_true",
                    help="Dask workers import mgst before the clock starts (counted in the cluster's start-up), "
                         "as on a long-lived cluster; by default the first cells pay the imports, as on a new one")
    ap.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                    help="before each run, wait up to this long for others to use under --idle-below cores")
    ap.add_argument("--idle-below", type=float, default=0.3, metavar="CORES")
    ap.add_argument("-v", "--verbose", action="store_true", help="each run's output line on stderr")
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: each of {', '.join(MODES)}")
    dask = [m for m in modes if m.startswith("dask")]
    if dask:
        import distributed
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="bench-sweep-", dir=args.keep)) if args.keep else None
    tmp = tempfile.TemporaryDirectory(prefix="bench-sweep-") if work is None else None
    work = work or Path(tmp.name)
    sweep_file = work / "bench-sweep.toml"
    sweep_file.write_text(SWEEP.format(horizon=args.horizon, warmup=args.horizon / 10,
                                       replications=args.replications), encoding="utf-8")

    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()})"
          + (f", distributed {distributed.__version__}" if dask else ""))
    print(f"sweep: anglano medium/heterogeneous/low, 5 policies x 4 mixes x {args.replications} replication(s), "
          f"horizon {args.horizon:g} s; {args.repeat} repeats of {', '.join(modes)} (order alternating)")
    if dask:
        how = "warmed (their imports in the start-up)" if args.warm_workers else "cold (their imports in the sweep)"
        print(f"Dask workers: {how}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    # Untimed: a tiny sweep on each backend first (disk caches, matplotlib's font cache, ...).
    tiny = work / "tiny.toml"
    tiny.write_text(SWEEP.format(horizon=2000.0, warmup=0.0, replications=1), encoding="utf-8")
    for mode in dict.fromkeys(m.split("-")[0] + "-1" for m in modes):
        run_once(mode, tiny, work / f"warm-up-{mode}")

    runs: dict[str, list[dict]] = {m: [] for m in modes}
    tables: dict[str, dict] = {}
    for r in range(args.repeat):
        order = modes if r % 2 == 0 else modes[::-1]
        for mode in order:
            out = work / f"{mode}-{r}"
            before = wait_idle(args.idle_below, args.wait_idle) if args.wait_idle > 0 else None
            res = run_once(mode, sweep_file, out, args.verbose, args.warm_workers)
            runs[mode].append(res)
            extra = f", cluster start-up {res['startup']:.2f} s" if res["startup"] is not None else ""
            extra += f" (others' load just before: {before:.2f})" if before is not None else ""
            print(f"  repeat {r + 1} {mode:<8} {res['wall']:7.2f} s (sweep {res['sweep']:.1f} s), "
                  f"others' load {res['others']:.2f} cores{extra}", flush=True)
            tables.setdefault(mode, {})[r] = table_of(out)

    # The same rows, cell by cell, in every run of every mode.
    ref_mode = modes[0]
    ref_rows, ref_header = tables[ref_mode][0]
    differ = []
    for mode in modes:
        for r, (rows, header) in tables[mode].items():
            if header != ref_header:
                differ.append(f"{mode} #{r + 1}: header {header} != {ref_header}")
            elif rows != ref_rows:
                bad = sorted(k for k in ref_rows.keys() | rows.keys() if ref_rows.get(k) != rows.get(k))
                differ.append(f"{mode} #{r + 1}: {len(bad)} cells differ, e.g. {'/'.join(bad[0])}")

    def med(m: str, what: str) -> float:
        return statistics.median(x[what] for x in runs[m])

    def span(m: str, what: str) -> str:
        return f"{min(x[what] for x in runs[m]):.1f}/{max(x[what] for x in runs[m]):.1f}"

    print()
    print(f"{'':<30}" + "".join(f"{m:>11}" for m in modes))
    rows = [
        ("median sweep call (s)", lambda m: f"{med(m, 'sweep'):.1f}"),
        ("min/max sweep call (s)", lambda m: span(m, "sweep")),
        ("median command wall (s)", lambda m: f"{med(m, 'wall'):.2f}"),
        ("min/max command wall (s)", lambda m: span(m, "wall")),
        ("median summed cell time (s)", lambda m: f"{med(m, 'cells'):.1f}"),
        ("median cells running at once",
         lambda m: f"{statistics.median(x['cells'] / x['sweep'] for x in runs[m]):.2f}"),
        ("median cluster start-up (s)", lambda m: f"{med(m, 'startup'):.2f}" if m.startswith("dask") else "-"),
        ("median CPU used (cores)", lambda m: f"{med(m, 'ours'):.2f}"),
        ("median others' load (cores)", lambda m: f"{med(m, 'others'):.2f}"),
        ("max others' load (cores)", lambda m: f"{max(x['others'] for x in runs[m]):.2f}"),
        ("median steal (cores)", lambda m: f"{med(m, 'steal'):.2f}"),
    ]
    for label, f in rows:
        print(f"{label:<30}" + "".join(f"{f(m):>11}" for m in modes))
    print()
    print(f"cells: {len(ref_rows)}; results identical cell by cell in all {sum(map(len, tables.values()))} runs "
          f"(timing columns {', '.join(sorted(TIMING))} aside): {'yes' if not differ else 'NO'}")
    for d in differ[:10]:
        print(f"  {d}")
    met = True
    for backend in ("local", "dask"):
        one, two = f"{backend}-1", f"{backend}-2"
        if one in runs and two in runs:
            for what, label in (("sweep", "sweep call"), ("wall", "whole command")):
                speedup = med(one, what) / med(two, what)
                per_repeat = [a[what] / b[what] for a, b in zip(runs[one], runs[two])]
                if what == "sweep":
                    met = met and speedup >= TARGET
                print(f"speed-up {backend} 2 vs 1 workers, {label} (medians): {speedup:.2f}x "
                      f"(per repeat: {', '.join(f'{x:.2f}' for x in per_repeat)})")
            quiet = [a["sweep"] / b["sweep"] for a, b in zip(runs[one], runs[two])
                     if max(a["others"], b["others"]) < args.idle_below]
            print(f"  repeats where others used < {args.idle_below:g} cores during both runs: {len(quiet)} of "
                  f"{len(runs[one])}" + (f", sweep-call speed-ups {', '.join(f'{x:.2f}' for x in quiet)}"
                                         if quiet else ""))
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{TARGET}x target (sweep call, both backends): {'met' if met and not differ else 'NOT met'}")
    if tmp is not None:
        tmp.cleanup()
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
