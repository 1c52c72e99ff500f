"""Does the live view stall the mapper? Dispatch latency at 100 fake pullers, the page open and closed (issue 21).

The mapper runs in a process of its own as in benchmarks/bench_mapper_scale.py (its experiment, its fake
keyed pullers of benchmarks/fake_pullers.py, its latency: a puller's request to its job's arrival, on the
puller's clock), with the live view on: the snapshot built in the mapper's loop once a second and served by
the view's HTTP thread (mgst.testbed.live; the background simulation is left out, so that only the view
is measured).

Open and closed alternate within each run, in windows of ``--window`` seconds (the first closed): in an
open window a client polls /api/snapshot at ``--poll-hz`` (default 4 Hz, four times the page's rate), from
this process, as a browser would from outside the mapper's process; in a closed one nobody does. Each
dispatch counts in the window its job was sent in (the windows' first and last 0.5 s are left out), so the
two conditions share the machine's background load, which on a shared machine moves p99 far more than
anything measured here. Rounds are runs; medians over them are quoted, and the p99 of each condition
pooled over every run. Also: the snapshot's build time in the mapper's loop, and its size.
Run from the repository root: ``PYTHONPATH=. python benchmarks/bench_live_view.py``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mapper_scale import REGISTER_TIMEOUT, _pct, experiment, worker_main  # noqa: E402

from mgst.wire import security  # noqa: E402

EDGE = 0.5  # s: dispatches this close to a window's change are not counted (a poll may straddle it)
HEAD = f"{'round':>5} {'closed n':>8} {'p50 ms':>7} {'p99 ms':>7} {'open n':>7} {'p50 ms':>7} {'p99 ms':>7} " \
       f"{'ratio':>6} {'polls':>6} {'snap ms':>8} {'snap max':>8} {'snap kB':>7}"


def mapper_main(exp: Any, key_dir: str, warmup: float, server_kind: str, out: Any) -> None:
    """The mapper's process: its view served (by a process of its own, as the commands do, or a thread of
    this one) and its snapshot published from its loop; sends back each steady-state dispatch as (sent at,
    latency)."""
    from mgst.testbed.live.board import Board
    from mgst.testbed.live.process import ServerProcess
    from mgst.testbed.live.server import LiveServer
    from mgst.testbed.live.snapshot import LivePublisher
    from mgst.testbed.mapper import Mapper

    builds: list[float] = []
    if server_kind == "process":
        server: Any = ServerProcess("127.0.0.1", 0, None)
        board: Any = server.board
    else:
        board = Board()
        server = LiveServer(board, "127.0.0.1", 0).start()
    publisher = LivePublisher(board)

    def progress(m: Any) -> None:
        t = time.perf_counter()
        publisher(m)
        builds.append(time.perf_counter() - t)

    try:
        keys = security.server_keys(Path(key_dir))
        mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=keys, drain_timeout=0.0, register_timeout=REGISTER_TIMEOUT,
                        progress=progress, progress_interval=0.5)
        out.send(("endpoint", mapper.endpoint, server.url))
        run = mapper.run()
        start, stop = run.t0 + warmup, min(run.generation_end, run.end)
        jobs = run.journal.jobs
        # as bench_mapper_scale.summarise: requests that found their job queued, sent in the steady state
        result: dict[str, Any] = {"dispatches": [
            (r.t3, r.t4r_remote - r.t1_remote) for r in run.journal.replicas.values()
            if r.t1_remote is not None and r.t4r_remote is not None and r.t2 is not None
            and start <= r.t3 <= stop and jobs[r.job].submitted < r.t2]}
        real = sorted(b for b in builds if b > 1e-5)  # (the calls between snapshots return at once)
        result["snap_ms"] = statistics.fmean(real) * 1e3 if real else float("nan")
        result["snap_max_ms"] = real[-1] * 1e3 if real else float("nan")
        result["snap_kb"] = len(board.latest) / 1e3
        out.send(("result", result))
    except BaseException as e:  # noqa: BLE001 (sent to the parent, which raises it)
        out.send(("error", repr(e)))
    finally:
        server.close()


def is_open(t: float, origin: float, window: float) -> bool:
    """Odd windows from ``origin`` are open."""
    return int((t - origin) // window) % 2 == 1


def poll(url: str, hz: float, origin: float, window: float, stop: threading.Event, counts: list[int]) -> None:
    """GET the snapshot ``hz`` times a second in the open windows, until ``stop`` (a page open, harshly)."""
    while not stop.wait(1.0 / hz):
        if not is_open(time.time(), origin, window):
            continue
        try:
            with urllib.request.urlopen(url + "api/snapshot", timeout=5) as r:
                r.read()
            counts[0] += 1
        except OSError:
            counts[1] += 1


def measure(*, pullers: int, workers: int, dispatch_rate: float, duration: float, warmup: float,
            poll_hz: float, window: float, server: str = "process") -> dict:
    """One run, open and closed alternating; every process is reaped before it returns."""
    exp = experiment(pullers, "fcfs", dispatch_rate, duration)
    names = [m.name for m in exp.machines]
    ctx = mp.get_context("spawn")
    procs: list = []
    stop = threading.Event()
    counts = [0, 0]
    poller = None
    origin = time.time()
    with tempfile.TemporaryDirectory(prefix="mgst-live-bench-") as tmp:
        key_dir = Path(tmp) / "keys"
        security.create_keys(key_dir, names)
        m_recv, m_send = ctx.Pipe(duplex=False)
        mapper = ctx.Process(target=mapper_main, args=(exp, str(key_dir), warmup, server, m_send))
        mapper.start()
        procs.append(mapper)
        try:
            if not m_recv.poll(60):
                raise RuntimeError("the mapper did not start")
            kind, endpoint, url = m_recv.recv()
            if kind != "endpoint":
                raise RuntimeError(f"the mapper failed: {endpoint}")
            poller = threading.Thread(target=poll, args=(url, poll_hz, origin, window, stop, counts), daemon=True)
            poller.start()
            stop_at = time.time() + REGISTER_TIMEOUT + duration + 30
            reports = []  # (the workers' reports are not used here, but read: a worker must not block sending)
            for w in range(workers):
                r, s = ctx.Pipe(duplex=False)
                p = ctx.Process(target=worker_main, args=(endpoint, str(key_dir), names[w::workers], stop_at, s))
                p.start()
                procs.append(p)
                reports.append(r)
            if not m_recv.poll(REGISTER_TIMEOUT + duration + 60):
                raise RuntimeError("the mapper did not finish")
            kind, result = m_recv.recv()
            if kind != "result":
                raise RuntimeError(f"the mapper failed: {result}")
            for r in reports:
                if r.poll(60):
                    r.recv()
        finally:
            stop.set()
            if poller is not None:
                poller.join(10)
            for p in procs:
                p.join(10)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    split: dict[bool, list[float]] = {False: [], True: []}
    for t, lat in result.pop("dispatches"):
        phase = (t - origin) % window
        if EDGE <= phase <= window - EDGE:
            split[is_open(t, origin, window)].append(lat)
    closed, opened = sorted(split[False]), sorted(split[True])
    return {"closed": closed, "open": opened, "closed_n": len(closed), "open_n": len(opened),
            "closed_p50": _pct(closed, 0.5) * 1e3, "closed_p99": _pct(closed, 0.99) * 1e3,
            "open_p50": _pct(opened, 0.5) * 1e3, "open_p99": _pct(opened, 0.99) * 1e3,
            "polls": counts[0], "poll_errors": counts[1], "snap_ms": result["snap_ms"],
            "snap_max_ms": result["snap_max_ms"], "snap_kb": result["snap_kb"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pullers", type=int, default=100, help="fake pullers (default 100)")
    p.add_argument("--repeat", type=int, default=3, help="runs (default 3); medians over them are quoted")
    p.add_argument("--workers", type=int, default=2, help="worker processes hosting the fake pullers (default 2)")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of job generation (default 60)")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds after registration not counted (default 8)")
    p.add_argument("--dispatch-rate", type=float, default=500.0, help="jobs a second asked for in all (default 500)")
    p.add_argument("--poll-hz", type=float, default=4.0, help="the open page's polls a second (default 4)")
    p.add_argument("--window", type=float, default=5.0, help="seconds open, then closed, in turn (default 5)")
    p.add_argument("--server", choices=("process", "thread"), default="process",
                   help="the view's server in a process of its own, as the commands run it (default), or in a "
                        "thread of the mapper's process")
    args = p.parse_args(argv)
    if args.repeat < 1 or not args.duration > args.warmup or args.poll_hz <= 0 or args.window <= 2 * EDGE:
        p.error("--repeat must be at least 1, --duration more than --warmup, --poll-hz positive, --window > 1")
    print(f"# {platform.python_version()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}, {args.pullers} pullers, fcfs, "
          f"dispatch {args.dispatch_rate:g}/s, {args.duration:g} s (warm-up {args.warmup:g}), poll {args.poll_hz:g} Hz "
          f"in every other {args.window:g} s window, server in a {args.server}")
    print(HEAD, flush=True)
    rows = []
    for rnd in range(args.repeat):
        r = measure(pullers=args.pullers, workers=args.workers, dispatch_rate=args.dispatch_rate,
                    duration=args.duration, warmup=args.warmup, poll_hz=args.poll_hz, window=args.window,
                    server=args.server)
        rows.append(r)
        print(f"{rnd:>5} {r['closed_n']:>8} {r['closed_p50']:>7.2f} {r['closed_p99']:>7.2f} {r['open_n']:>7} "
              f"{r['open_p50']:>7.2f} {r['open_p99']:>7.2f} {r['open_p99'] / r['closed_p99']:>6.3f} {r['polls']:>6} "
              f"{r['snap_ms']:>8.2f} {r['snap_max_ms']:>8.2f} {r['snap_kb']:>7.1f}  load {os.getloadavg()[0]:.1f}",
              flush=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in rows)

    closed = sorted(x for r in rows for x in r["closed"])
    opened = sorted(x for r in rows for x in r["open"])
    print(f"# medians over runs: closed p50 {med('closed_p50'):.2f} ms p99 {med('closed_p99'):.2f} ms; open p50 "
          f"{med('open_p50'):.2f} ms p99 {med('open_p99'):.2f} ms; ratio of p99s "
          f"{med('open_p99') / med('closed_p99'):.3f} (target <= 1.10); snapshot {med('snap_ms'):.2f} ms")
    print(f"# pooled: closed p99 {_pct(closed, 0.99) * 1e3:.2f} ms over {len(closed)}, open p99 "
          f"{_pct(opened, 0.99) * 1e3:.2f} ms over {len(opened)}: ratio "
          f"{_pct(opened, 0.99) / _pct(closed, 0.99):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
