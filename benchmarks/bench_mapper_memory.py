"""The mapper's memory over a long run: a keyed mapper (its own process, journal on disk) and P real pullers.

The mapper runs in a child process (this file with ``--child``), CURVE-keyed (one key per puller, made in a
temporary folder), journalling to that folder as ``mgst mapper`` does. P puller processes (mgst.testbed.local_run.
start_pullers) serve an experiment that keeps them busy: two classes of jobs of 60 s mean on a machine fast
at that class (120 s on the others), arriving at 80 % of the capacity (LPAS_DG), every replica
checkpointing every 2 s (Progress messages), and injected failures (exponential, 300 s up, 10 s down:
re-registrations, plan re-solves). Every puller heartbeats 5 times a second. Every ``--every``
seconds the parent samples the mapper's RSS (psutil) and counts the journal's events and completed jobs
(sqlite3, read-only beside the writer), and prints the curve; at the end, the growth of the RSS after the
run's first minute, and per job completed in that time. The journal and the core keep each job's record
(the journal's about 0.9 KB): that part of the growth is set by the experiment's number of jobs (at 100
pullers, about 1.3 jobs a second), not by the messages; SQLite's page cache adds up to 2 MB as the
journal grows.

    python benchmarks/bench_mapper_memory.py --pullers 100 --minutes 30     # the acceptance run
    python benchmarks/bench_mapper_memory.py --pullers 30 --minutes 3       # a quick check

Acceptance (issue 19): at 100 pullers for 30 minutes the RSS grows by less than 20 MB after the first minute.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # also runs without PYTHONPATH (mgst is not installed)
    sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from mgst.model import (  # noqa: E402
    Experiment,
    FailureModel,
    JobClass,
    Machine,
    PolicySpec,
    SimulationSettings,
    TestbedSettings,
)
from mgst.testbed.local_run import start_pullers, stop_pullers  # noqa: E402
from mgst.wire import security  # noqa: E402

MB = 2**20
REGISTER_TIMEOUT = 300.0  # s: 100 Python processes starting on 2 cores take a while
LIMIT_MB = 20.0  # the acceptance: growth after the first minute, at 100 pullers for 30 minutes
WARMUP = 60.0  # s after the run began: the RSS from then on is what must stay flat


def experiment(pullers: int, minutes: float, failures: bool) -> Experiment:
    """Two classes, half the machines twice as fast at each; arrivals at 80 % of the capacity."""
    fast, slow = 1 / 60, 1 / 120  # jobs a second
    machines = tuple(Machine(f"P{j + 1}", (fast, slow) if j % 2 else (slow, fast), 1.0) for j in range(pullers))
    per_class = 0.8 * (pullers / 2) * fast  # each class on the half of the machines fast at it
    return Experiment(
        name=f"memory-{pullers}",
        classes=(JobClass("1", per_class), JobClass("2", per_class)),
        machines=machines,
        policy=PolicySpec("lpas_dg"),
        failures=FailureModel(mean_up=300.0, mean_down=10.0) if failures else None,
        simulation=SimulationSettings(checkpoint_interval=2.0),
        testbed=TestbedSettings(time_unit=1.0, duration=minutes * 60.0, timeout_factor=0.0),
    )


def child(config: dict) -> int:
    """The mapper: prints its endpoint, runs, prints a one-line JSON summary."""
    from mgst.testbed.mapper import Mapper  # noqa: PLC0415

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    exp = experiment(config["pullers"], config["minutes"], config["failures"])
    if config["trace"]:
        trace_growth(WARMUP + 10.0, config["minutes"] * 60.0)
    mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=security.server_keys(Path(config["keys"])),
                    out=Path(config["out"]), register_timeout=REGISTER_TIMEOUT, drain_timeout=5.0, farewell=2.0)
    print(mapper.endpoint, flush=True)
    run = mapper.run()
    done = sum(j.done_by is not None for j in run.journal.jobs.values())
    print(json.dumps({"jobs": len(run.journal.jobs), "done": done, "drops": dict(run.malformed)}), flush=True)
    return 0


def trace_growth(first: float, last: float) -> None:
    """Under tracemalloc, print to stderr the allocation sites that grew most from ``first`` to ``last``
    seconds after now (a thread takes the snapshots; slower, and the RSS includes tracemalloc's own)."""
    import threading  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    tracemalloc.start(4)

    def watch() -> None:
        time.sleep(first)
        before = tracemalloc.take_snapshot()
        time.sleep(max(0.0, last - first))
        after = tracemalloc.take_snapshot()
        print(f"allocation sites that grew most from {first:.0f} s to {last:.0f} s:", file=sys.stderr)
        for stat in after.compare_to(before, "traceback")[:12]:
            print(f"  {stat.size_diff / 1024:+9.1f} KiB {stat.count_diff:+7d} blocks  "
                  + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in stat.traceback),
                  file=sys.stderr)

    threading.Thread(target=watch, daemon=True).start()


def journal_counts(path: Path) -> tuple[int, int, float | None]:
    """(events, jobs completed, wall time the run began) of the journal, read beside its writer."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0) as db:
            events = db.execute("SELECT max(seq) FROM events").fetchone()[0] or 0
            done = db.execute("SELECT count(*) FROM events WHERE kind = 'complete'").fetchone()[0]
            row = db.execute("SELECT data FROM events WHERE kind = 'begin' LIMIT 1").fetchone()
    except sqlite3.OperationalError:
        return 0, 0, None
    if row is None:
        return events, done, None
    import msgpack  # noqa: PLC0415

    return events, done, msgpack.unpackb(row[0])[0]


def measure(pullers: int, minutes: float, every: float, failures: bool, trace: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="mgst-bench-memory-") as tmp:
        keys, out = Path(tmp) / "keys", Path(tmp) / "run"
        names = [f"P{j + 1}" for j in range(pullers)]
        security.create_keys(keys, names)
        config = {"pullers": pullers, "minutes": minutes, "failures": failures, "keys": str(keys), "out": str(out),
                  "trace": trace}
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        mapper = subprocess.Popen([sys.executable, __file__, "--child", json.dumps(config)], stdout=subprocess.PIPE,
                                  text=True, env=env, cwd=ROOT)
        procs: list[subprocess.Popen] = []
        try:
            endpoint = mapper.stdout.readline().strip()
            if not endpoint:
                raise RuntimeError("the mapper did not start")
            procs = start_pullers(endpoint, names, Path(tmp) / "pullers.log", keys=keys)
            proc = psutil.Process(mapper.pid)
            curve: list[tuple[float, float, int, int]] = []  # (s since the run began, RSS MB, events, jobs done)
            began = None
            print(f"{'t (s)':>7} {'RSS (MB)':>9} {'events':>9} {'jobs done':>9}", flush=True)
            while mapper.poll() is None:
                time.sleep(every)
                try:
                    rss = proc.memory_info().rss / MB
                except psutil.NoSuchProcess:
                    break
                events, done, t0 = journal_counts(out / "journal.sqlite")
                if t0 is None:
                    continue
                began = t0
                t = time.time() - began
                if t > minutes * 60.0:  # generation is over: draining
                    break
                curve.append((t, rss, events, done))
                print(f"{t:7.0f} {rss:9.1f} {events:9d} {done:9d}", flush=True)
            summary_line = mapper.communicate(timeout=REGISTER_TIMEOUT)[0].strip().splitlines()
        finally:
            if mapper.poll() is None:
                mapper.kill()
                mapper.wait()
            stop_pullers(procs)
    after = [c for c in curve if c[0] >= WARMUP]
    if not after:
        raise RuntimeError("the run was too short to measure after its first minute")
    base = after[0]
    growth = max(c[1] for c in after) - base[1]
    jobs = curve[-1][3] - base[3]
    return {"pullers": pullers, "minutes": minutes, "failures": failures, "curve": curve,
            "rss_at_1min_mb": base[1], "rss_end_mb": curve[-1][1], "growth_mb": growth,
            "jobs_after_1min": jobs, "growth_per_job_bytes": growth * MB / jobs if jobs else None,
            "events": curve[-1][2], "summary": json.loads(summary_line[-1]) if summary_line else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pullers", type=int, default=100)
    p.add_argument("--minutes", type=float, default=30.0, help="of job generation (default 30)")
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples (default 5)")
    p.add_argument("--no-failures", action="store_true", help="no injected failures")
    p.add_argument("--json", action="store_true", help="print the result as JSON too")
    p.add_argument("--trace", action="store_true",
                   help="run the mapper under tracemalloc and print where it grew after the first minute")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(json.loads(args.child))
    r = measure(args.pullers, args.minutes, args.every, not args.no_failures, args.trace)
    per_job = f", {r['growth_per_job_bytes']:.0f} B per job completed" if r["growth_per_job_bytes"] else ""
    print(f"{r['pullers']} pullers, {r['minutes']:g} min: RSS {r['rss_at_1min_mb']:.1f} MB at 1 min, "
          f"{r['rss_end_mb']:.1f} MB at the end; growth after the first minute {r['growth_mb']:.1f} MB "
          f"(limit {LIMIT_MB:g} MB at 100 pullers, 30 min){per_job}; {r['jobs_after_1min']} jobs; "
          f"{r['events']} journal events; mapper: {r['summary']}")
    if args.json:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
