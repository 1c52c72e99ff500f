"""The mapper at scale: 1,000 to 3,000 fake keyed pullers on this machine (issue 19).

Processes (all on 127.0.0.1):
- the mapper, in a process of its own (``multiprocessing``, spawn), so that its CPU and RSS are its own
  and the fakes' GIL does not slow it; it measures itself (``time.process_time``, RSS) in the steady state;
- ``--workers`` worker processes (default 2), each hosting an equal share of the fake pullers
  (benchmarks/fake_pullers.py): one DEALER socket and one CURVE key pair each (``mgst keys``), speaking
  the real protocol; a job is a timer.

Workload: one class (or ``--classes``), jobs arriving at 1.2 x what the pullers can run, their length
exponential with mean ``pullers / --dispatch-rate`` s: the pullers ask for about ``--dispatch-rate``
jobs a second in all, and every request finds a job waiting, so the latency is the mapper's alone.
Run from the repository root with ``PYTHONPATH=.``, so that the spawned processes import this tree's mgst.

Measured in the steady state (from ``--warmup`` s after the last registration to the end of generation):
- dispatch latency: the puller's Ready or Done(ready=True) to its JobMsg's arrival, both on the
  puller's clock (the journal's t1 and t4r; only requests that found their job already queued);
- false downs: machines the mapper took down (the core's count) while no failure was injected;
- registration: the first hello to the last registration (the mapper's t0);
- the mapper's CPU (% of one core), its CPU per message (all messages to and from it, as the fakes
  count them), its peak RSS, its longest GC pause; the workers' CPU.
Policies ``lpas_dg`` and ``fcfs`` side by side, alternating within each round; ``--policies fcfs,gridbot`` sets GridBot
(its ClassAd expressions evaluated at every request, GRIDBOT_EXPRESSIONS) beside FCFS. GridBot schedules bags: its
run gets a bag every BAG_INTERVAL s of the same tasks (exponential sizes of the same mean, arriving ARRIVAL_FACTOR x as
fast as the pullers run them); ``--bags`` gives every policy those bags instead of the Poisson arrivals above, so that
FCFS beside GridBot differs by the policy alone.
"""

from __future__ import annotations

import argparse
import gc
import logging
import math
import multiprocessing as mp
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import mgst
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, TestbedSettings
from mgst.wire import security

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dispatch import _counts  # noqa: E402
from fake_pullers import run_pullers  # noqa: E402

REGISTER_TIMEOUT = 120.0  # s: generous, so that a slow registration is measured rather than fatal
ARRIVAL_FACTOR = 1.2  # jobs arrive this much faster than the pullers can run them: one always waits
POLICIES = ("lpas_dg", "fcfs", "gridbot")
DEFAULT_POLICIES = ("lpas_dg", "fcfs")
# GridBot's policy, as expressions (bench_gridbot.py's, on the hosts' grid attribute): half the hosts in a "lab" grid
# that a bag's tail keeps to, a rank by priority (by recent work in the tail), a bundle bound and a deadline per
# request; replication when a bag's queue runs low. The bags are mostly in their throughput phase (a tail below 5
# queued jobs), where every host takes work: what a request costs is the expressions' evaluation.
GRIDBOT_EXPRESSIONS = {
    "JobRequirements": '!Tail ? true : Host.Grid == "lab" && Host.ErrorRate < 0.1',
    "Rank": "!Tail ? Priority : Host.JobsToday",
    "Concurrency": "Host.NumCpus",
    "Deadline": "Concurrency * 2000",
    "ReplicationRequirements": "Job.Replicas < 2",
    "tail_threshold": 5,
    "max_replicas": 2,
}
BAG_INTERVAL = 1.0  # s between two bags (600 tasks each at the default dispatch rate)


def experiment(pullers: int, policy: str, dispatch_rate: float, duration: float, classes: int = 1,
               options: dict | None = None, in_bags: bool = False) -> Experiment:
    """``pullers`` identical one-slot machines; jobs of mean ``pullers / dispatch_rate`` s arriving at
    ARRIVAL_FACTOR x the machines' capacity, split evenly over ``classes`` classes; in bags, one every BAG_INTERVAL s
    (:func:`bags`), with ``in_bags`` and for GridBot (whose hosts are in two grids, "lab" and "home")."""
    job_s = pullers / dispatch_rate
    rate = 1.0 / job_s  # jobs of mean size 1 (granularity) take job_s on a machine of this rate
    arrivals = ARRIVAL_FACTOR * dispatch_rate / classes
    gridbot = policy == "gridbot"
    if not gridbot and not in_bags:
        return Experiment(
            name=f"scale-{pullers}",
            classes=tuple(JobClass(str(i + 1), arrivals) for i in range(classes)),
            machines=tuple(Machine(f"P{j + 1}", (rate,) * classes, 1.0) for j in range(pullers)),
            policy=PolicySpec(policy, options or {}),
            testbed=TestbedSettings(time_unit=1.0, duration=duration, timeout_factor=0.0),
        )
    return Experiment(
        name=f"scale-{pullers}",
        classes=tuple(JobClass(str(i + 1), 0.0) for i in range(classes)),
        machines=tuple(Machine(f"P{j + 1}", (rate,) * classes, 1.0, attributes=(("grid", "lab" if j % 2 else "home"),))
                       for j in range(pullers)),
        policy=PolicySpec(policy, {**GRIDBOT_EXPRESSIONS, **(options or {})} if gridbot else options or {}),
        workload=bags(ARRIVAL_FACTOR * dispatch_rate, duration, classes),
        testbed=TestbedSettings(time_unit=1.0, duration=duration, timeout_factor=0.0),
    )


def bags(tasks_per_s: float, duration: float, classes: int, seed: int = 1) -> BagList:
    """A bag every BAG_INTERVAL s over ``duration`` (the first at 0), ``tasks_per_s`` tasks a second in all, their
    sizes exponential of mean 1, their classes in turn."""
    rng = random.Random(seed)
    per_bag = max(1, round(tasks_per_s * BAG_INTERVAL))
    count = max(1, math.ceil(duration / BAG_INTERVAL))
    return BagList(tuple((b * BAG_INTERVAL, tuple((k % classes, rng.expovariate(1.0)) for k in range(per_bag)))
                         for b in range(count)))


def mapper_main(exp: Experiment, key_dir: str | None, warmup: float, out: Any,
                register_timeout: float = REGISTER_TIMEOUT, profile: str | None = None, nice: int = 0) -> None:
    """The mapper's process: send the endpoint, run, send what it measured (or the error). With
    ``profile`` (a path), py-spy samples this process over the steady state into it (collapsed stacks)."""
    import psutil

    from mgst.testbed.mapper import Mapper

    logging.basicConfig(level=logging.WARNING, format="mapper %(levelname)s %(name)s: %(message)s")
    if nice:
        os.nice(nice)  # (below 0 needs the privilege to)
    me = psutil.Process()
    samples: list[tuple[float, float, int]] = []  # (wall, CPU s, RSS)
    spy: list[subprocess.Popen] = []
    gc_pauses: list[tuple[float, int, float]] = []  # (wall at the end, generation, seconds)
    gc_started = [0.0]

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_started[0] = time.perf_counter()
        else:
            gc_pauses.append((time.time(), info["generation"], time.perf_counter() - gc_started[0]))

    gc.callbacks.append(on_gc)

    def progress(m: Mapper) -> None:
        if m.t0 is not None:
            now = time.time()
            samples.append((now, time.process_time(), me.memory_info().rss))
            if profile is not None and not spy and now >= m.t0 + warmup:
                left = max(1, int(m.t0 + m.duration - now))
                spy.append(subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid",
                                             str(os.getpid()), "-d", str(left), "-r", "250", "--nonblocking",
                                             "-f", "raw", "-o", profile], stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL))

    try:
        keys = security.server_keys(Path(key_dir)) if key_dir is not None else None
        mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=keys, drain_timeout=0.0, register_timeout=register_timeout,
                        progress=progress, progress_interval=0.5)
        out.send(("endpoint", mapper.endpoint))
        run = mapper.run()
        for p in spy:
            p.wait(60)
        result = summarise(run, samples, warmup)
        in_window = [g for g in gc_pauses if result["window_from"] <= g[0] <= result["window_to"]]
        result["gc_max_ms"] = max((g[2] for g in in_window), default=0.0) * 1e3
        result["gc_full"] = sum(1 for g in in_window if g[1] == 2)
        out.send(("result", result))
    except BaseException as e:  # noqa: BLE001 (sent to the parent, which raises it)
        out.send(("error", repr(e)))


def summarise(run: Any, samples: list[tuple[float, float, int]], warmup: float) -> dict:
    """Latencies from the journal (the pullers' clocks), downs from the core, CPU and RSS over the window."""
    start = run.t0 + warmup
    stop = min(run.generation_end, run.end)
    jobs = run.journal.jobs
    lat = sorted(r.t4r_remote - r.t1_remote for r in run.journal.replicas.values()
                 if r.t1_remote is not None and r.t4r_remote is not None and r.t2 is not None
                 and start <= r.t3 <= stop and jobs[r.job].submitted < r.t2)
    window = [s for s in samples if start <= s[0] <= stop]
    cpu = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0]) if len(window) > 1 else math.nan
    downs = sum(m.stats.failures + m.stats.suspicions for m in run.core.machines)
    first_registered = min((m.periods[0][0] for m in run.journal.machines if m.periods), default=math.nan)
    return {
        "t0": run.t0,
        "first_registered": first_registered,
        "registered_at": sorted(m.periods[0][0] for m in run.journal.machines if m.periods),
        "latencies": lat,
        "false_downs": downs,
        "re_registered": sum(max(0, len(m.incarnations) - 1) for m in run.journal.machines),
        "cpu": cpu,
        "rss_mb": max((s[2] for s in samples), default=0) / 2**20,
        "done": sum(1 for r in run.journal.replicas.values() if r.t6 is not None),
        "queued_end": run.core.queued_count,
        "drops": dict(run.malformed),
        "solves": getattr(run.core.policy, "solves", None),
        "window": stop - start,
        "window_from": math.ceil(start),  # whole seconds, as the fakes count their messages
        "window_to": math.floor(stop),
    }


def worker_main(endpoint: str, key_dir: str | None, names: list[str], stop_at: float, out: Any) -> None:
    report = run_pullers(endpoint, Path(key_dir) if key_dir else None, names, stop_at)
    out.send(report)


def measure(pullers: int, policy: str, *, workers: int, dispatch_rate: float, duration: float,
            warmup: float, classes: int = 1, options: dict | None = None, profile: str | None = None,
            mapper_nice: int = 0, in_bags: bool = False) -> dict:
    """One run: a mapper process and ``workers`` worker processes; every process is reaped before it returns."""
    exp = experiment(pullers, policy, dispatch_rate, duration, classes, options, in_bags)
    names = [m.name for m in exp.machines]
    ctx = mp.get_context("spawn")
    procs: list = []
    with tempfile.TemporaryDirectory(prefix="mgst-scale-") as tmp:
        key_dir = Path(tmp) / "keys"
        security.create_keys(key_dir, names)
        m_recv, m_send = ctx.Pipe(duplex=False)
        mapper = ctx.Process(target=mapper_main, name="mapper",
                             args=(exp, str(key_dir), warmup, m_send, REGISTER_TIMEOUT, profile, mapper_nice))
        mapper.start()
        procs.append(mapper)
        try:
            if not m_recv.poll(60):
                raise RuntimeError("the mapper did not start")
            kind, endpoint = m_recv.recv()
            if kind != "endpoint":
                raise RuntimeError(f"the mapper failed: {endpoint}")
            stop_at = time.time() + REGISTER_TIMEOUT + duration + 30
            pipes = []
            for w in range(workers):
                r, s = ctx.Pipe(duplex=False)
                p = ctx.Process(target=worker_main, args=(endpoint, str(key_dir), names[w::workers], stop_at, s),
                                name=f"fakes-{w}")
                p.start()
                procs.append(p)
                pipes.append(r)
            if not m_recv.poll(REGISTER_TIMEOUT + duration + 60):
                raise RuntimeError("the mapper did not finish")
            kind, result = m_recv.recv()
            if kind != "result":
                raise RuntimeError(f"the mapper failed: {result}")
            reports = [r.recv() if r.poll(60) else None for r in pipes]
        finally:
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    if any(r is None for r in reports):
        raise RuntimeError("a worker sent no report")
    lat = result.pop("latencies")
    first_hello = min(r.first_hello for r in reports)
    registered = [t - first_hello for t in result.pop("registered_at")]
    lo, hi = result.pop("window_from"), result.pop("window_to")
    messages = sum(c for r in reports for counts in (r.sent, r.received) for sec, c in counts.items()
                   if lo <= sec < hi)
    return {
        "pullers": pullers,
        "policy": policy,
        "registration_s": result["t0"] - first_hello,
        # when half, 90 % and 99 % of the machines had registered (s after the first hello)
        "registration_quantiles_s": [_pct(registered, q) for q in (0.5, 0.9, 0.99)],
        "jobs": len(lat),
        "p50_ms": _pct(lat, 0.50) * 1e3,
        "p99_ms": _pct(lat, 0.99) * 1e3,
        "max_ms": lat[-1] * 1e3 if lat else math.nan,
        "lost_mapper": sum(r.lost_mapper for r in reports),
        "refused": sum(len(r.refused) for r in reports),
        **result,
        "cpu_pct": result["cpu"] * 100,
        "messages_per_s": messages / (hi - lo) if hi > lo else math.nan,
        "cpu_us_per_message": result["cpu"] * (hi - lo) / messages * 1e6 if messages else math.nan,
        "workers_cpu_pct": 100 * sum(r.cpu_s for r in reports) / max(r.wall_s for r in reports),
    }


IDLE = "Poller.poll ("  # the mapper's wait for the next thing to do


def profile_breakdown(path: str, top: int = 25) -> list[tuple[str, float, float]]:
    """From py-spy's collapsed stacks: (function, % of the busy samples inclusive, % self), the ``top`` by
    inclusive; samples waiting in the mapper's poll are not busy."""
    inclusive: Counter = Counter()
    own: Counter = Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not stack:
                continue
            n = int(count)
            frames = [fr.split(" (")[0] + " (" + fr.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                      if " (" in fr else fr for fr in stack.split(";")]
            if frames[-1].startswith(IDLE):  # waiting, not working: left out
                continue
            total += n
            for fr in set(frames):
                inclusive[fr] += n
            own[frames[-1]] += n
    return [(fr, 100 * c / total, 100 * own[fr] / total) for fr, c in inclusive.most_common(top)] if total else []


def _pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _policies(text: str) -> list[str]:
    values = [x.strip() for x in text.split(",") if x.strip()]
    if not values or any(v not in POLICIES for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give some of {', '.join(POLICIES)}, comma-separated")
    return values


ROW = "{pullers:>7} {policy:>8} {registration_s:>8.1f} {p50_ms:>7.2f} {p99_ms:>8.2f} {max_ms:>8.1f} " \
      "{false_downs:>6} {cpu_pct:>6.0f} {rss_mb:>6.0f} {jobs:>7} {lost_mapper:>5} {re_registered:>5} " \
      "{messages_per_s:>7.0f} {cpu_us_per_message:>6.0f} {workers_cpu_pct:>5.0f} " \
      "{gc_max_ms:>5.0f}"
HEAD = f"{'pullers':>7} {'policy':>8} {'reg s':>8} {'p50 ms':>7} {'p99 ms':>8} {'max ms':>8} " \
       f"{'downs':>6} {'CPU%':>6} {'RSS MB':>6} {'jobs':>7} {'lost':>5} {'rereg':>5} {'msg/s':>7} {'us/msg':>6} " \
       f"{'wCPU%':>5} {'gc ms':>5}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pullers", type=_counts, default=[1000, 3000], metavar="N[,N...]",
                   help="puller counts (default 1000,3000)")
    p.add_argument("--policies", type=_policies, default=list(DEFAULT_POLICIES), metavar="P[,P...]",
                   help="some of lpas_dg, fcfs, gridbot, alternating (default lpas_dg,fcfs)")
    p.add_argument("--repeat", type=int, default=3, help="rounds (default 3); medians over them are quoted")
    p.add_argument("--workers", type=int, default=2, help="worker processes hosting the fake pullers (default 2)")
    p.add_argument("--duration", type=float, default=40.0, help="seconds of job generation (default 40)")
    p.add_argument("--warmup", type=float, default=10.0,
                   help="seconds after the last registration not counted (default 10)")
    p.add_argument("--dispatch-rate", type=float, default=500.0,
                   help="jobs a second the pullers ask for in all (default 500): sets the job length")
    p.add_argument("--classes", type=int, default=1, help="job classes (default 1)")
    p.add_argument("--bags", action="store_true",
                   help="every policy's jobs in bags, as GridBot's always are (default: Poisson arrivals)")
    p.add_argument("--mapper-nice", type=int, default=0,
                   help="the mapper process's niceness increment (default 0; e.g. -5, with the privilege, so that "
                        "a machine busy with other work delays the mapper less)")
    p.add_argument("--profile", metavar="DIR", help="py-spy the mapper over each steady state; stacks into DIR")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="a [policy] option for lpas_dg (a number or a word), e.g. resolve_debounce=1 or "
                        "resolve_debounce=off")
    args = p.parse_args(argv)
    if args.repeat < 1 or args.workers < 1 or not args.duration > args.warmup:
        p.error("--repeat and --workers must be at least 1, --duration more than --warmup")
    options = {}
    for item in args.option:
        key, _, value = item.partition("=")
        try:
            options[key.strip()] = float(value)
        except ValueError:
            options[key.strip()] = value.strip()
    print(f"# {platform.python_version()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}, workers {args.workers}, "
          f"dispatch {args.dispatch_rate:g}/s, {args.duration:g} s (warm-up {args.warmup:g}), options {options}, "
          f"mapper nice {args.mapper_nice:+d}, {'bags' if args.bags else 'Poisson arrivals'}, "
          f"mgst from {Path(mgst.__file__).parent}")
    print(HEAD, flush=True)
    rows: dict[tuple[int, str], list[dict]] = {}
    for rnd in range(args.repeat):
        order = args.policies if rnd % 2 == 0 else list(reversed(args.policies))
        for n in args.pullers:
            for policy in order:
                profile = None
                if args.profile:
                    Path(args.profile).mkdir(parents=True, exist_ok=True)
                    profile = str(Path(args.profile) / f"mapper-{n}-{policy}-{rnd}.txt")
                row = measure(n, policy, workers=args.workers, dispatch_rate=args.dispatch_rate,
                              duration=args.duration, warmup=args.warmup, classes=args.classes,
                              options=options if policy == "lpas_dg" else None, profile=profile,
                              mapper_nice=args.mapper_nice, in_bags=args.bags)
                rows.setdefault((n, policy), []).append(row)
                q50, q90, q99 = row["registration_quantiles_s"]
                print(ROW.format(**row), f"load {os.getloadavg()[0]:.1f}; registered: half at {q50:.1f} s, "
                      f"90 % at {q90:.1f} s, 99 % at {q99:.1f} s", flush=True)
                if profile is not None and Path(profile).exists():
                    for fr, inc, own in profile_breakdown(profile):
                        print(f"#   {inc:5.1f} % {own:5.1f} % self  {fr}")
    print("# medians over rounds")
    print(HEAD)
    for (n, policy), rs in rows.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0] if isinstance(rs[0][k], (int, float))}
        print(ROW.format(**{**med, "pullers": n, "policy": policy}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
