"""Testbed dispatch on loopback: request-to-job latency and sustained dispatch rate, by number of pullers."""

from __future__ import annotations

import argparse
import logging
import platform
import statistics
import sys
import tempfile
import threading
from pathlib import Path

from mgst.local import start_pullers, stop_pullers
from mgst.mapper import Mapper
from mgst.model import Experiment, JobClass, Machine, PolicySpec, TestbedSettings


def experiment(pullers: int, arrivals_per_s: float, duration: float, job_ms: float) -> Experiment:
    """One class of jobs arriving faster than they can be served, so that every request for work finds a
    job waiting and the latency is the system's alone. ``job_ms`` 0: zero-length jobs (a rate so high the
    work is ~0); otherwise exponential jobs of that mean."""
    rate = 1e12 if job_ms <= 0 else 1000.0 / job_ms
    return Experiment(
        name=f"dispatch-{pullers}",
        classes=(JobClass("1", arrivals_per_s),),
        machines=tuple(Machine(f"P{j + 1}", (rate,), 1.0) for j in range(pullers)),
        policy=PolicySpec("fcfs"),
        testbed=TestbedSettings(time_unit=1.0, duration=duration, timeout_factor=0.0),
    )


def measure(pullers: int, arrivals_per_s: float, duration: float, job_ms: float = 0.0) -> dict:
    exp = experiment(pullers, arrivals_per_s, duration, job_ms)
    mapper = Mapper(exp, "tcp://127.0.0.1:0", drain_timeout=0.0, register_timeout=120.0, timeout_factor=0.0)
    with tempfile.TemporaryDirectory() as tmp:
        procs = start_pullers(mapper.endpoint, [m.name for m in exp.machines], Path(tmp) / "pullers.log")
        result: dict = {}
        thread = threading.Thread(target=lambda: result.setdefault("run", mapper.run()), daemon=True)
        try:
            thread.start()
            thread.join(duration + 180)
        finally:
            mapper.stopping = True
            thread.join(30)
            stop_pullers(procs, grace=10.0)
    run = result["run"]
    # Latency: the puller's request (t1: Ready, or Done with ready) to the job's arrival at that
    # puller (t4r), both on the puller's clock. Skip the first second (start-up).
    start = run.t0 + 1.0
    # Only requests that found their job already waiting: otherwise the wait for an arrival counts too.
    jobs = run.journal.jobs
    lat = [r.t4r_remote - r.t1_remote for r in run.journal.replicas.values()
           if r.t1_remote is not None and r.t4r_remote is not None and r.t2 is not None and r.t3 >= start
           and jobs[r.job].submitted < r.t2]
    done_times = sorted(r.t6 for r in run.journal.replicas.values() if r.t6 is not None and r.t6 >= start)
    window = min(run.generation_end, run.end) - start
    in_window = sum(1 for t in done_times if t <= start + window)
    lat.sort()
    return {
        "pullers": pullers,
        "jobs": len(lat),
        "median_ms": statistics.median(lat) * 1e3 if lat else float("nan"),
        "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1e3 if lat else float("nan"),
        "rate": in_window / window if window > 0 else float("nan"),
        "backlog_end": run.core.queued_count,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pullers", type=int, nargs="+", default=[1, 21, 100])
    p.add_argument("--duration", type=float, default=10.0, help="seconds of job generation per measurement")
    p.add_argument("--arrivals", type=float, default=6000.0,
                   help="jobs per second offered with zero-length jobs (above capacity)")
    p.add_argument("--job-ms", type=float, default=0.0,
                   help="mean job length in ms (0: zero-length jobs); jobs are then offered at 1.2x what the "
                        "pullers can run, so one always waits")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the drain time-out is expected: the backlog never empties
    print(f"Python {platform.python_version()}, {platform.machine()}, {platform.platform()}")
    what = "zero-length jobs" if args.job_ms <= 0 else f"jobs of mean {args.job_ms:g} ms"
    print(f"{what}, {args.duration:g} s per measurement; fcfs; loopback")
    print(f"{'pullers':>8} {'jobs':>8} {'latency median':>15} {'latency p99':>12} {'dispatch rate':>14} {'backlog':>8}")
    for n in args.pullers:
        offered = args.arrivals if args.job_ms <= 0 else 1.2 * n * 1000.0 / args.job_ms
        r = measure(n, offered, args.duration, args.job_ms)
        print(f"{r['pullers']:>8} {r['jobs']:>8} {r['median_ms']:>12.3f} ms {r['p99_ms']:>9.3f} ms "
              f"{r['rate']:>10.0f} /s {r['backlog_end']:>8}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
