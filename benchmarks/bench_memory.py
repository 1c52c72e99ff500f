"""Peak memory of one simulated replication at scale: 10,000 machines, about 1,000,000 jobs, every record kept.

The grid is hihi-mfd-fd's six machines (Table 1's rate columns) repeated to N machines, every class's
arrival rate scaled by N / 6 (each machine sees the paper setting's load), and the horizon set so that
about J jobs arrive. One replication of ``mgst.sim.loop.Simulation`` runs in a fresh child process, which holds
the ReplicationRun it returns (every JobRecord, with its ReplicaRecords in ``.history``: the simulator
keeps them all in ``core.jobs`` while it runs) until it has measured:

- peak RSS: ``getrusage(RUSAGE_SELF).ru_maxrss``, the process's high-water mark;
- RSS before the run (interpreter, mgst, numpy/scipy/highspy, the experiment) and after it;
- wall time of building and running the simulator; jobs and replicas; bytes per job, (peak - before) / jobs.

Nothing is streamed to disk here: the records are all in memory at the peak. ``--cli`` also runs
``mgst simulate`` (one replication, ``--out`` with ``--jobs csv``) on the same experiment written as a TOML
file: the user's path, whose jobs.csv rows are streamed from the records after the run, not held as rows.
``--profile`` runs the child under tracemalloc (slower, more memory: use a smaller size) and prints the
allocation sites that hold the most at the end, and what each record attribute holds.

    python benchmarks/bench_memory.py --cli                 # 10,000 machines, 1,000,000 jobs, FCFS (~3 min)
    python benchmarks/bench_memory.py --quick --policy fcfs --policy lpas_dg   # 1,000 machines, 100,000 jobs
    python benchmarks/bench_memory.py --quick --profile

LPAS_DG at 10,000 machines does not run in reasonable time: its allocation LP is solved again each time a
machine comes up, so 10,001 times before the first job (one solve takes about 8 s at that size), and every
solution is memoised (up to 4,096, each a 4 x 10,000 tuple of floats, about 1.3 MB). At 1,000 machines
and 100,000 jobs: 1,001 solves, about 40 s, and a peak of 377 MB against FCFS's 156 MB (the memo).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
    sys.path.insert(0, str(ROOT))

from mgst.config import load_experiment  # noqa: E402
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings  # noqa: E402

LIMIT = 2_000_000_000  # bytes: "under 2 GB", read strictly (decimal; 1,907 MiB)
BASE = ROOT / "experiments" / "hihi-mfd-fd.toml"
MB = 1e6


def scaled(n: int, jobs: int, policy: str, seed: int = 1) -> Experiment:
    """hihi-mfd-fd's machines repeated to ``n``, arrivals scaled by n / 6, about ``jobs`` jobs."""
    base = load_experiment(BASE)
    k = len(base.machines)
    machines = tuple(
        Machine(f"M{j + 1}", base.machines[j % k].rates, base.machines[j % k].availability) for j in range(n)
    )
    classes = tuple(JobClass(c.name, c.arrival_rate * n / k, c.granularity) for c in base.classes)
    horizon = jobs / sum(c.arrival_rate for c in classes)
    sim = SimulationSettings(horizon=horizon, warmup=0.0, replications=1, seed=seed)
    return dataclasses.replace(base, name=f"hihi-x{n}-{policy}", machines=machines, classes=classes,
                               policy=PolicySpec(policy), simulation=sim, failures=None)


def rss_now() -> int:
    import psutil  # noqa: PLC0415 (a dependency of mgst)

    return psutil.Process().memory_info().rss


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kB on Linux


# ---- the child: one replication, measured from inside ----------------------------------------------------


def child(machines: int, jobs: int, policy: str, profile: bool) -> dict:
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    if profile:
        import tracemalloc  # noqa: PLC0415

        tracemalloc.start()
    exp = scaled(machines, jobs, policy)
    before = rss_now()
    peak_before = peak_rss()
    t0 = time.perf_counter()
    run = Simulation(exp).run()
    wall = time.perf_counter() - t0
    after = rss_now()
    peak = max(peak_rss(), after)  # after everything the child measured, so the peak covers it
    replicas = sum(len(rec.history) for rec in run.jobs)
    out = {
        "machines": machines, "policy": policy, "horizon": exp.simulation.horizon, "jobs": len(run.jobs),
        "replicas": replicas, "unfinished": run.unfinished, "wall_s": wall, "rss_before": before,
        "peak_before": peak_before, "peak": peak, "rss_after": after,
        "mean_response": sum(r.completed - r.job.submitted for r in run.jobs if r.completed is not None)
        / max(1, sum(r.completed is not None for r in run.jobs)),
    }
    if profile:
        out["profile"] = _profile(run)
    return out


def _profile(run) -> dict:
    """Allocation sites holding the most at the end of the run, and what the records' attributes hold."""
    import tracemalloc  # noqa: PLC0415

    snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    def where(frame) -> str:
        f = Path(frame.filename)
        return f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f.name}:{frame.lineno}"

    top = [{"where": where(s.traceback[0]), "bytes": s.size, "blocks": s.count}
           for s in snap.statistics("lineno")[:20]]
    tracemalloc.stop()
    return {"top": top, "attributes": _attribute_census(run)}


def _attribute_census(run) -> list[dict]:
    """Bytes each record attribute holds of its own (sys.getsizeof; each object counted once, at its first
    holder): the record objects themselves, then what their slots point to. Shared objects (None, bools,
    enums, small ints, strings) and other records (counted as records) are left out."""
    import enum  # noqa: PLC0415

    from mgst.core.state import JobRecord, ReplicaRecord  # noqa: PLC0415

    seen: set[int] = set()
    sizes: dict[str, list[int]] = {}

    def add(label: str, obj) -> None:
        entry = sizes.setdefault(label, [0, 0])
        entry[0] += sys.getsizeof(obj)
        entry[1] += 1

    def own(label: str, obj) -> None:
        if obj is None or isinstance(obj, (bool, str, enum.Enum, JobRecord, ReplicaRecord)):
            return
        if (isinstance(obj, int) and -5 <= obj <= 256) or id(obj) in seen:
            return
        seen.add(id(obj))
        add(label, obj)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a Job: its fields too
            for name, v in zip(obj._fields, obj):
                own(f"{label}.{name}", v)
        elif isinstance(obj, dict):  # live replicas by id: the keys (the values are records)
            for k in obj:
                own(f"{label} keys", k)

    for rec in run.jobs:
        add("JobRecord object", rec)
        for slot in JobRecord.__slots__:
            own(f"JobRecord.{slot}", getattr(rec, slot))
        for r in rec.history:
            add("ReplicaRecord object", r)
            for slot in ReplicaRecord.__slots__:
                own(f"ReplicaRecord.{slot}", getattr(r, slot))
    return sorted(({"what": k, "bytes": v[0], "objects": v[1]} for k, v in sizes.items()),
                  key=lambda e: -e["bytes"])


# ---- the parent: runs children, prints --------------------------------------------------------------------


def run_child(machines: int, jobs: int, policy: str, profile: bool, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--child", "--machines", str(machines), "--jobs", str(jobs),
           "--policy", policy] + (["--profile"] if profile else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise SystemExit(f"child failed ({' '.join(cmd)}):\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_cli(machines: int, jobs: int, policy: str, timeout: float) -> dict:
    """`mgst simulate FILE --replications 1 --out DIR --jobs csv` on the same experiment, in a child."""
    exp = _slower(scaled(machines, jobs, policy))
    with tempfile.TemporaryDirectory(prefix="mgst-bench-memory-") as tmp:
        f = Path(tmp) / "exp.toml"
        f.write_text(_toml(exp))
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "mgst", "simulate", str(f), "--replications", "1", "--workers", "1",
               "--out", str(out), "--jobs", "csv", "--quiet", "--json"]
        # its peak alone: RUSAGE_CHILDREN's ru_maxrss is the largest of the children a process waited for,
        # so a wrapper that waits for this one child only reports it
        wrapper = ("import resource, subprocess, sys, json, time; t0 = time.perf_counter(); "
                   "p = subprocess.run(sys.argv[1:]); wall = time.perf_counter() - t0; "
                   "print(json.dumps({'rc': p.returncode, 'wall_s': wall, "
                   "'peak': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}), file=sys.stderr)")
        p = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True, text=True, timeout=timeout,
                           cwd=ROOT)
        measured = json.loads(p.stderr.strip().splitlines()[-1])
        if measured["rc"] != 0:
            raise SystemExit(f"mgst simulate failed:\n{p.stderr}")
        summary = json.loads(p.stdout)
        size = (out / "jobs.csv").stat().st_size
        notes = [line for line in p.stderr.splitlines() if line.startswith("mgst:")]
    return {**measured, "jobs": summary["jobs_simulated"], "jobs_csv": size, "notes": notes}


def _slower(exp: Experiment) -> Experiment:
    """The same system in a time unit k times longer, so that an experiment file takes its arrival rates
    (at most 10,000 jobs per time unit): the same jobs, every time multiplied by k."""
    k = math.ceil(max(c.arrival_rate for c in exp.classes) / 10_000)
    if k <= 1:
        return exp
    machines = tuple(dataclasses.replace(m, rates=tuple(r / k for r in m.rates)) for m in exp.machines)
    classes = tuple(dataclasses.replace(c, arrival_rate=c.arrival_rate / k) for c in exp.classes)
    sim = dataclasses.replace(exp.simulation, horizon=exp.simulation.horizon * k)
    return dataclasses.replace(exp, machines=machines, classes=classes, simulation=sim)


def _toml(exp: Experiment) -> str:
    rows = ",\n".join("  [" + ", ".join(repr(m.rates[i]) for m in exp.machines) + "]"
                      for i in range(len(exp.classes)))
    s = exp.simulation
    return "\n".join([
        "[experiment]", f'name = "{exp.name}"', "",
        "[workload]", f"arrival_rates = [{', '.join(repr(c.arrival_rate) for c in exp.classes)}]",
        f"class_names = [{', '.join(json.dumps(c.name) for c in exp.classes)}]", "",
        "[machines]", f"rates = [\n{rows}\n]",
        f"availability = [{', '.join(repr(m.availability) for m in exp.machines)}]", "",
        "[policy]", f'name = "{exp.policy.name}"', "",
        "[simulation]", f"horizon = {s.horizon!r}", f"warmup = {s.warmup!r}", "replications = 1",
        f"seed = {s.seed}", "",
    ])


def mb(n: float) -> str:
    return f"{n / MB:,.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--machines", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs to arrive, about (sets the horizon)")
    ap.add_argument("--policy", action="append", help="fcfs (default), lpas_dg, ... (repeatable)")
    ap.add_argument("--quick", action="store_true", help="1,000 machines and 100,000 jobs")
    ap.add_argument("--cli", action="store_true", help="also run `mgst simulate --out DIR --jobs csv` on it")
    ap.add_argument("--profile", action="store_true", help="tracemalloc: what holds the memory at the end")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per child")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.machines, args.jobs = 1_000, 100_000
    policies = args.policy or ["fcfs"]
    if args.child:
        print(json.dumps(child(args.machines, args.jobs, policies[0], args.profile)))
        return 0

    print(f"Python {platform.python_version()} ({platform.python_implementation()}), "
          f"{platform.machine()}, {os.cpu_count()} cores")
    print(f"grid: hihi-mfd-fd x {args.machines / 6:,.1f} = {args.machines:,} machines, about {args.jobs:,} jobs, "
          "one replication, every JobRecord and ReplicaRecord kept; limit 2 GB = 2,000 MB"
          + (" (under tracemalloc: figures inflated)" if args.profile else ""))
    ok = True
    for policy in policies:
        r = run_child(args.machines, args.jobs, policy, args.profile, args.timeout)
        per_job = (r["peak"] - r["rss_before"]) / max(1, r["jobs"])
        under = r["peak"] < LIMIT
        ok &= under
        print()
        print(f"{policy}: horizon {r['horizon']:.3f}, {r['jobs']:,} jobs, {r['replicas']:,} replicas, "
              f"{r['unfinished']} unfinished, mean response {r['mean_response']:.4f}")
        print(f"  wall (build + run)      {r['wall_s']:10.1f} s   ({r['jobs'] / r['wall_s']:,.0f} jobs/s)")
        print(f"  RSS before the run      {mb(r['rss_before']):>10}")
        print(f"  RSS after (records held){mb(r['rss_after']):>10}")
        print(f"  peak RSS                {mb(r['peak']):>10}   ({r['peak'] / 2**20:,.0f} MiB)")
        print(f"  bytes per job           {per_job:10,.0f}   ((peak - before) / jobs)")
        print(f"  peak under 2 GB         {'yes' if under else 'NO':>10}   "
              f"({r['peak'] / LIMIT:.0%} of the limit; per-job records in memory, none streamed to disk)")
        if "profile" in r:
            print("  tracemalloc, allocation sites holding the most at the end:")
            for e in r["profile"]["top"][:15]:
                print(f"    {e['bytes'] / MB:9.1f} MB {e['blocks']:>10,} blocks  {e['where']}")
            print("  record attributes (each object once; sys.getsizeof):")
            jobs = max(1, r["jobs"])
            for e in r["profile"]["attributes"][:20]:
                print(f"    {e['bytes'] / MB:9.1f} MB {e['bytes'] / jobs:7.1f} B/job {e['objects']:>10,} objects  "
                      f"{e['what']}")
        if args.cli:
            c = run_cli(args.machines, args.jobs, policy, args.timeout)
            under_cli = c["peak"] < LIMIT
            ok &= under_cli
            print(f"  mgst simulate --out --jobs csv: peak RSS {mb(c['peak'])}, wall {c['wall_s']:.1f} s, "
                  f"{c['jobs']:,} jobs, jobs.csv {mb(c['jobs_csv'])}; under 2 GB: {'yes' if under_cli else 'NO'}")
            for line in c["notes"]:
                print(f"    {line}")
    print()
    print(f"2 GB with per-job records kept: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
