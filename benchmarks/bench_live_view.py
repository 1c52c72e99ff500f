"""Does the live view stall the mapper? Dispatch latency at 100 fake pullers, the page open and closed (issue 21).

The mapper runs in a process of its own as in benchmarks/bench_mapper_scale.py (its experiment, its fake
keyed pullers of benchmarks/fake_pullers.py, its latency: a puller's request to its job's arrival, on the
puller's clock), with the live view on: the snapshot built in the mapper's loop once a second and served by
the view's HTTP thread (mgst.testbed.live; the background simulation is left out, so that only the view
is measured). Three modes, alternated within each round (the order rotates):

- ``off``: no live view at all (the reference);
- ``closed``: the view served, nobody polling it;
- ``open``: a client polling /api/snapshot at ``--poll-hz`` (default 4 Hz, four times the page's rate),
  from this process (as a browser would, from outside the mapper's process).

Also: the snapshot's build time in the mapper's loop (mean and max, ms) and its size.
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
from bench_mapper_scale import REGISTER_TIMEOUT, _pct, experiment, summarise, worker_main  # noqa: E402

from mgst import security  # noqa: E402

MODES = ("off", "closed", "open")

HEAD = f"{'mode':>7} {'round':>5} {'jobs':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'polls':>6} " \
       f"{'snap ms':>8} {'snap max':>8} {'snap kB':>7} {'cpu %':>6}"


def mapper_main(exp: Any, key_dir: str, warmup: float, live: bool, out: Any) -> None:
    """The mapper's process: with ``live``, its view served and its snapshot published from its loop."""
    import psutil

    from mgst.testbed.live.server import LiveServer
    from mgst.testbed.live.snapshot import Board, LivePublisher
    from mgst.testbed.mapper import Mapper

    me = psutil.Process()
    samples: list[tuple[float, float, int]] = []
    builds: list[float] = []
    board = Board()
    publisher = LivePublisher(board)
    server = LiveServer(board, "127.0.0.1", 0).start() if live else None

    def progress(m: Any) -> None:
        if m.t0 is not None:
            samples.append((time.time(), time.process_time(), me.memory_info().rss))
        if live:
            t = time.perf_counter()
            publisher(m)
            builds.append(time.perf_counter() - t)

    try:
        keys = security.server_keys(Path(key_dir))
        mapper = Mapper(exp, "tcp://127.0.0.1:0", keys=keys, drain_timeout=0.0, register_timeout=REGISTER_TIMEOUT,
                        progress=progress, progress_interval=0.5)
        out.send(("endpoint", mapper.endpoint, server.url if server else None))
        run = mapper.run()
        result = summarise(run, samples, warmup)
        real = sorted(b for b in builds if b > 1e-5)  # (the calls between snapshots return at once)
        result["snap_ms"] = statistics.fmean(real) * 1e3 if real else float("nan")
        result["snap_max_ms"] = real[-1] * 1e3 if real else float("nan")
        result["snap_kb"] = len(board.latest) / 1e3
        out.send(("result", result))
    except BaseException as e:  # noqa: BLE001 (sent to the parent, which raises it)
        out.send(("error", repr(e)))
    finally:
        if server is not None:
            server.close()


def poll(url: str, hz: float, stop: threading.Event, counts: list[int]) -> None:
    """GET the snapshot ``hz`` times a second until ``stop`` (a page left open, harshly)."""
    while not stop.wait(1.0 / hz):
        try:
            with urllib.request.urlopen(url + "api/snapshot", timeout=5) as r:
                r.read()
            counts[0] += 1
        except OSError:
            counts[1] += 1


def measure(mode: str, *, pullers: int, workers: int, dispatch_rate: float, duration: float, warmup: float,
            poll_hz: float) -> dict:
    exp = experiment(pullers, "fcfs", dispatch_rate, duration)
    names = [m.name for m in exp.machines]
    ctx = mp.get_context("spawn")
    procs: list = []
    stop = threading.Event()
    counts = [0, 0]
    poller = None
    with tempfile.TemporaryDirectory(prefix="mgst-live-bench-") as tmp:
        key_dir = Path(tmp) / "keys"
        security.create_keys(key_dir, names)
        m_recv, m_send = ctx.Pipe(duplex=False)
        mapper = ctx.Process(target=mapper_main, args=(exp, str(key_dir), warmup, mode != "off", m_send))
        mapper.start()
        procs.append(mapper)
        try:
            if not m_recv.poll(60):
                raise RuntimeError("the mapper did not start")
            kind, endpoint, url = m_recv.recv()
            if kind != "endpoint":
                raise RuntimeError(f"the mapper failed: {endpoint}")
            if mode == "open":
                poller = threading.Thread(target=poll, args=(url, poll_hz, stop, counts), daemon=True)
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
    lat = result.pop("latencies")
    return {"mode": mode, "jobs": len(lat), "p50_ms": _pct(lat, 0.5) * 1e3, "p99_ms": _pct(lat, 0.99) * 1e3,
            "max_ms": lat[-1] * 1e3 if lat else float("nan"), "polls": counts[0], "poll_errors": counts[1],
            "snap_ms": result.get("snap_ms", float("nan")), "snap_max_ms": result.get("snap_max_ms", float("nan")),
            "snap_kb": result.get("snap_kb", float("nan")), "cpu_pct": result["cpu"] * 100}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pullers", type=int, default=100, help="fake pullers (default 100)")
    p.add_argument("--repeat", type=int, default=3, help="rounds (default 3); medians over them are quoted")
    p.add_argument("--workers", type=int, default=2, help="worker processes hosting the fake pullers (default 2)")
    p.add_argument("--duration", type=float, default=30.0, help="seconds of job generation (default 30)")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds after registration not counted (default 8)")
    p.add_argument("--dispatch-rate", type=float, default=500.0, help="jobs a second asked for in all (default 500)")
    p.add_argument("--poll-hz", type=float, default=4.0, help="the open page's polls a second (default 4)")
    args = p.parse_args(argv)
    if args.repeat < 1 or not args.duration > args.warmup or args.poll_hz <= 0:
        p.error("--repeat must be at least 1, --duration more than --warmup, --poll-hz positive")
    print(f"# {platform.python_version()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {'/'.join(f'{x:.1f}' for x in os.getloadavg())}, {args.pullers} pullers, fcfs, "
          f"dispatch {args.dispatch_rate:g}/s, {args.duration:g} s (warm-up {args.warmup:g}), poll {args.poll_hz:g} Hz")
    print(HEAD, flush=True)
    rows: dict[str, list[dict]] = {m: [] for m in MODES}
    for rnd in range(args.repeat):
        order = MODES[rnd % 3:] + MODES[:rnd % 3]
        for mode in order:
            r = measure(mode, pullers=args.pullers, workers=args.workers, dispatch_rate=args.dispatch_rate,
                        duration=args.duration, warmup=args.warmup, poll_hz=args.poll_hz)
            rows[mode].append(r)
            print(f"{mode:>7} {rnd:>5} {r['jobs']:>6} {r['p50_ms']:>7.2f} {r['p99_ms']:>7.2f} {r['max_ms']:>7.1f} "
                  f"{r['polls']:>6} {r['snap_ms']:>8.2f} {r['snap_max_ms']:>8.2f} {r['snap_kb']:>7.1f} "
                  f"{r['cpu_pct']:>6.1f}  load {os.getloadavg()[0]:.1f}", flush=True)
    print("# medians over rounds")
    med = {m: {k: statistics.median(r[k] for r in rs) for k in ("p50_ms", "p99_ms", "max_ms", "snap_ms")}
           for m, rs in rows.items()}
    for m in MODES:
        print(f"{m:>7}  p50 {med[m]['p50_ms']:.2f} ms  p99 {med[m]['p99_ms']:.2f} ms  max {med[m]['max_ms']:.1f} ms"
              f"  snapshot {med[m]['snap_ms']:.2f} ms")
    ratio = med["open"]["p99_ms"] / med["closed"]["p99_ms"]
    print(f"# p99 open / closed = {ratio:.3f} (target <= 1.10); open / off = "
          f"{med['open']['p99_ms'] / med['off']['p99_ms']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
