"""Testbed dispatch on loopback: request-to-job latency and sustained dispatch rate, by number of pullers,
with CURVE and without it, side by side in one run.

Each measurement is a real mapper (in this process) and one puller process per machine on 127.0.0.1.
``curve``: ephemeral keys, one pair per puller, made in a temporary folder that is removed afterwards;
the mapper admits exactly those keys. ``plain``: no keys, pullers started with ``--insecure``.
The modes alternate within each round, and which one goes first alternates from round to round
(curve, plain, then plain, curve, ...), so the machine's noise and any drift hit both alike.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from mgst.model import Experiment, JobClass, Machine, PolicySpec, TestbedSettings
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.mapper import Mapper
from mgst.wire import security

MODES = ("curve", "plain", "journal")  # journal: CURVE and the run's journal on disk, as mgst run and mgst mapper
DEFAULT_MODES = ("curve", "plain")
REGISTER_TIMEOUT = 120.0  # s: 100 Python processes starting on 2 cores take a while


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


def measure(pullers: int, arrivals_per_s: float, duration: float, job_ms: float = 0.0,
            mode: str = "plain") -> dict:
    """One measurement: a mapper and ``pullers`` puller processes on loopback, with CURVE (``mode``
    "curve": fresh keys in a temporary folder) or without ("plain": ``--insecure`` pullers).
    Every puller is reaped and the folder removed before it returns (or raises)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {', '.join(MODES)}")
    exp = experiment(pullers, arrivals_per_s, duration, job_ms)
    names = [m.name for m in exp.machines]
    wall = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mgst-bench-") as tmp:  # keys (0700 pullers/) and the log
        key_dir = None
        server_keys = None
        if mode in ("curve", "journal"):
            key_dir = Path(tmp) / "keys"
            security.create_keys(key_dir, names)
            server_keys = security.server_keys(key_dir)
        mapper = Mapper(exp, "tcp://127.0.0.1:0", drain_timeout=0.0, register_timeout=REGISTER_TIMEOUT,
                        keys=server_keys,  # (no time-outs: the experiment's timeout_factor is 0)
                        out=Path(tmp) / "run" if mode == "journal" else None)
        result: dict = {}

        def target() -> None:
            try:
                result["run"] = mapper.run()
            except BaseException as e:  # noqa: BLE001 (re-raised in the main thread)
                result["error"] = e

        procs: list = []
        thread = threading.Thread(target=target, name="mapper", daemon=True)
        spawned = time.time()  # the mapper's clock (run.t0 is time.time())
        thread.start()  # first: if anything below fails, stopping ends the mapper's wait and closes it
        try:
            expected = "none (loopback)" if mode == "plain" else "curve"
            if mapper.security != expected:  # the comparison would be meaningless
                raise RuntimeError(f"mapper security is {mapper.security!r}, expected {expected!r}")
            if not security.is_loopback(mapper.endpoint):
                raise RuntimeError(f"{mapper.endpoint} is not a loopback endpoint")
            for name in names:  # one at a time: if a start fails, those already started are still reaped
                procs += start_pullers(mapper.endpoint, [name], Path(tmp) / "pullers.log", keys=key_dir)
            thread.join(REGISTER_TIMEOUT + duration + 60)
        finally:
            mapper.stopping = True
            if thread.is_alive():
                thread.join(30)
            stop_pullers(procs, grace=10.0)  # bye'd pullers leave at once; the others: TERM, then KILL
    if thread.is_alive():
        raise RuntimeError(f"{mode}, {pullers} pullers: the mapper did not stop")
    if "error" in result:
        raise RuntimeError(f"{mode}, {pullers} pullers: the mapper failed: {result['error']!r}") \
            from result["error"]
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
    # Anything that would make the measurement suspect: a puller registering again (it lost the mapper),
    # a replica lost, a message dropped (by reason).
    incidents = {
        "re-registered": sum(max(0, len(m.incarnations) - 1) for m in run.journal.machines),
        "lost": sum(1 for r in run.journal.replicas.values() if r.outcome == "lost"),
        **{f"dropped ({reason})": count for reason, count in sorted(run.malformed.items())},
    }
    return {
        "pullers": pullers,
        "mode": mode,
        "latencies": lat,  # seconds, sorted
        "jobs": len(lat),
        "median_ms": statistics.median(lat) * 1e3 if lat else math.nan,
        "p99_ms": p99(lat) * 1e3,
        "done": in_window,
        "window": window,
        "rate": in_window / window if window > 0 else math.nan,
        "backlog_end": run.core.queued_count,
        "startup": run.t0 - spawned,  # s: starting the pullers until all registered
        "wall": time.monotonic() - wall,
        "incidents": {k: v for k, v in incidents.items() if v},
    }


def p99(sorted_values: list[float]) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(0.99 * len(sorted_values)))]


def pooled(rows: list[dict]) -> dict:
    """One mode at one puller count over all rounds: latencies pooled, rate over the summed windows."""
    lat = sorted(x for r in rows for x in r["latencies"])
    window = sum(r["window"] for r in rows)
    return {
        "jobs": len(lat),
        "median_ms": statistics.median(lat) * 1e3 if lat else math.nan,
        "p99_ms": p99(lat) * 1e3,
        "rate": sum(r["done"] for r in rows) / window if window > 0 else math.nan,
        "round_medians": [r["median_ms"] for r in rows],
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else math.nan


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _counts(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give puller counts such as 1,21,100 or 1000,3000") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive puller counts such as 1,21,100 or 1000,3000")
    return values


def _modes(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values or any(v not in MODES for v in values) or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r}: give curve, plain or curve,plain")
    return values


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pullers", type=_counts, nargs="+", default=[[1, 21, 100]], metavar="N[,N...]",
                   help="puller counts (default 1,21,100)")
    p.add_argument("--modes", type=_modes, default=list(DEFAULT_MODES), metavar="MODE[,MODE]",
                   help="curve, plain, or both alternating (default curve,plain)")
    p.add_argument("--repeat", type=int, default=2,
                   help="rounds; each round measures every puller count in every mode (default 2)")
    p.add_argument("--duration", type=float, default=5.0,
                   help="seconds of job generation per measurement (the first one is not counted; default 5)")
    p.add_argument("--arrivals", type=float, default=6000.0,
                   help="jobs per second offered with zero-length jobs (above capacity)")
    p.add_argument("--job-ms", type=float, default=0.0,
                   help="mean job length in ms (0: zero-length jobs); jobs are then offered at 1.2x what the "
                        "pullers can run, so one always waits")
    args = p.parse_args(argv)
    counts = [n for group in args.pullers for n in group]
    if args.repeat < 1 or not args.duration > 1.0:
        p.error("--repeat must be at least 1 and --duration more than 1 s (the first second is skipped)")
    logging.basicConfig(level=logging.ERROR)  # the drain time-out is expected: the backlog never empties
    print(f"Python {platform.python_version()}, {platform.machine()}, {platform.platform()}")
    what = "zero-length jobs" if args.job_ms <= 0 else f"jobs of mean {args.job_ms:g} ms"
    order = (f"modes {' and '.join(args.modes)} alternating, the first one swapped each round"
             if len(args.modes) > 1 else f"mode {args.modes[0]}")
    print(f"{what}, {args.duration:g} s per measurement, {args.repeat} round(s), {order}; fcfs; loopback")
    print(f"{'round':>5} {'pullers':>7} {'mode':>5} {'jobs':>7} {'median':>10} {'p99':>10} {'dispatch':>9} "
          f"{'backlog':>7} {'start-up':>8} {'wall':>6}  incidents")
    rows: dict[tuple[int, str], list[dict]] = {}
    load0 = _load()
    began = time.monotonic()
    for k in range(args.repeat):
        for n in counts:
            sequence = args.modes if k % 2 == 0 else list(reversed(args.modes))
            for mode in sequence:
                offered = args.arrivals if args.job_ms <= 0 else 1.2 * n * 1000.0 / args.job_ms
                r = measure(n, offered, args.duration, args.job_ms, mode)
                rows.setdefault((n, mode), []).append(r)
                incidents = ", ".join(f"{count} {kind}" for kind, count in r["incidents"].items()) or "-"
                print(f"{k + 1:>5} {n:>7} {mode:>5} {r['jobs']:>7} {r['median_ms']:>7.3f} ms {r['p99_ms']:>7.3f} ms "
                      f"{r['rate']:>7.0f}/s {r['backlog_end']:>7} {r['startup']:>7.1f}s {r['wall']:>5.0f}s  "
                      f"{incidents}", flush=True)
    print(f"total {time.monotonic() - began:.0f} s; load average {_load()} (at the start: {load0}; it counts "
          "this benchmark's own pullers)")
    print()
    print("pooled over the rounds (latency: request to job, on the puller's clock; dispatch: jobs done per s)")
    pairs = [(a, b) for a, b in (("curve", "plain"), ("journal", "curve")) if a in args.modes and b in args.modes]
    for a, b in pairs:
        print(f"{a[0]}/{b[0]}: {a} / {b}, pooled; then the ratio of the medians round by round")
    print(f"{'pullers':>7} {'mode':>5} {'jobs':>7} {'median':>10} {'p99':>10} {'dispatch':>9}  median per round (ms)")
    for n in counts:
        agg = {mode: pooled(rows[(n, mode)]) for mode in args.modes}
        for mode in args.modes:
            a = agg[mode]
            per_round = " ".join(f"{m:.3f}" for m in a["round_medians"])
            print(f"{n:>7} {mode:>5} {a['jobs']:>7} {a['median_ms']:>7.3f} ms {a['p99_ms']:>7.3f} ms "
                  f"{a['rate']:>7.0f}/s  {per_round}")
        for a_mode, b_mode in pairs:
            c, q = agg[a_mode], agg[b_mode]
            paired = [_ratio(x["median_ms"], y["median_ms"]) for x, y in zip(rows[(n, a_mode)], rows[(n, b_mode)])]
            print(f"{n:>7} {a_mode[0] + '/' + b_mode[0]:>5} {'':>7} {_ratio(c['median_ms'], q['median_ms']):>8.2f}x "
                  f"{_ratio(c['p99_ms'], q['p99_ms']):>8.2f}x {_ratio(c['rate'], q['rate']):>8.2f}x  "
                  + " ".join(f"{x:.2f}x" for x in paired)
                  + (f" (median {statistics.median(paired):.2f}x)" if len(paired) > 1 else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
