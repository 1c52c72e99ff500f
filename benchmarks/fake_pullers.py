"""Many fake keyed pullers in one process: each a DEALER socket with its own CURVE key pair, speaking the
real protocol (mgst.wire.protocol) as puller/daemon.py and puller/slots.py do, with one slot and jobs emulated
by a timer. Used by benchmarks/bench_mapper_scale.py and tests/test_mapper_scale.py.

What one fake puller does, as the real one:
- Hello (random 63-bit incarnation, the "emulate" executor, one slot, holding nothing);
- on Welcome: heartbeats every ``heartbeat_interval`` of the welcome, each echoing the mapper's last
  heartbeat clock and when it arrived; then Ready(share, clock, 1);
- on JobMsg: Started at once, then, ``work * time_unit / share`` seconds later, Done(ready=True);
- on CancelMsg: drops the replica and asks again (Ready); on Bye: leaves;
- a mapper silent for LIVENESS heartbeat intervals is lost: the fake says hello again (the same
  incarnation, holding its replica), as the real puller does, but on the same socket (no new CURVE
  handshake); each time is counted (``lost_mapper``).
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import itertools
import json
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from mgst.wire import protocol as P
from mgst.wire import security

# Silent mapper intervals after which a fake puller counts the mapper as lost (the real puller's LIVENESS).
LIVENESS = 5
# A fake puller whose hello is not welcomed within this many seconds says hello again, as the real
# one does (a CURVE handshake that raced the mapper's bind is retried by ZeroMQ, a lost hello is not).
HELLO_RETRY = 5.0

_HEARTBEAT, _DONE = 0, 1


@dataclass(slots=True)
class FakePuller:
    """One fake machine: its socket and what it knows of the mapper."""

    name: str
    sock: zmq.Socket
    incarnation: int
    welcome: P.Welcome | None = None
    hello_at: float = 0.0
    hb_seq: int = 0
    session: int = 0  # counts welcomes: a heartbeat timer of an earlier one is stale
    last_heard: float = 0.0
    mapper_clock: float = -1.0
    mapper_clock_received: float = -1.0
    replica: int | None = None  # the replica it runs (one slot)
    job_received: float = 0.0
    asked_at: float | None = None  # monotonic time of its Ready / Done(ready=True), until a job comes
    gone: bool = False  # refused for good, or told bye: never says hello again


@dataclass
class WorkerReport:
    """What one worker's fake pullers saw (sent back to the benchmark's parent process)."""

    first_hello: float = math.inf  # time.time()
    welcomed: int = 0
    jobs: int = 0
    done: int = 0
    refused: list[str] = field(default_factory=list)
    lost_mapper: int = 0  # a fake puller heard nothing for LIVENESS intervals
    byes: int = 0
    cpu_s: float = 0.0  # this worker's CPU time and wall time (its load on the machine)
    wall_s: float = 0.0
    replicas_done: list[int] = field(default_factory=list)
    # Every request's latency (s, monotonic: its Ready or Done(ready=True) to its JobMsg), and when the job
    # came (time.time(), to keep the steady state only).
    latencies: list[float] = field(default_factory=list)
    latency_at: list[float] = field(default_factory=list)
    # Messages to and from the mapper by second (int(time.time())): the mapper's message rate in a window.
    sent: Counter = field(default_factory=Counter)
    received: Counter = field(default_factory=Counter)


def load_keys(key_dir: Path, names: list[str]) -> list[security.ClientKeys]:
    mapper_key = key_dir / "mapper.key"
    return [security.client_keys(key_dir / "pullers" / f"{name}.key_secret", mapper_key) for name in names]


def run_pullers(endpoint: str, key_dir: Path | None, names: list[str], stop_at: float,
                should_stop: Callable[[], bool] = lambda: False, liveness: int = LIVENESS) -> WorkerReport:
    """Run fake pullers ``names`` against the mapper at ``endpoint`` until every one has been told bye,
    ``stop_at`` (time.time()) passes, or ``should_stop()``; with ``key_dir`` (mgst keys) each uses its
    own key pair from it, else none (a plain loopback mapper). A mapper silent for ``liveness``
    heartbeat intervals is lost (the real puller's 5 by default)."""
    keys = load_keys(key_dir, names) if key_dir is not None else [None] * len(names)
    ctx = zmq.Context()
    ctx.max_sockets = len(names) + 16  # (ZeroMQ's default is 1,023)
    report = WorkerReport()
    started, cpu_started = time.monotonic(), time.process_time()
    pullers: list[FakePuller] = []
    by_socket: dict[zmq.Socket, FakePuller] = {}
    timers: list[tuple[float, int, int, int, FakePuller]] = []  # (monotonic due, seq, kind, session, puller)
    seq = itertools.count()
    rng = random.Random()
    poller = zmq.Poller()
    try:
        for name, k in zip(names, keys):
            sock = ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            if k is not None:
                security.secure_client(sock, k)
            sock.connect(endpoint)
            p = FakePuller(name, sock, rng.getrandbits(63))
            pullers.append(p)
            by_socket[sock] = p
            poller.register(sock, zmq.POLLIN)
        report.first_hello = time.time()
        for p in pullers:
            _hello(p)
        live = len(pullers)
        next_retry = 0.0
        while live and time.time() < stop_at and not should_stop():
            now = time.monotonic()
            while timers and timers[0][0] <= now:
                _, _, kind, session, p = heapq.heappop(timers)
                if kind == _HEARTBEAT:
                    if p.welcome is None or session != p.session:
                        continue
                    if now - p.last_heard > liveness * p.welcome.heartbeat_interval:
                        report.lost_mapper += 1
                        p.welcome = None
                        p.asked_at = None
                        _hello(p)
                        continue
                    p.hb_seq += 1
                    _send(p, P.Heartbeat(p.hb_seq, time.time(), p.mapper_clock, p.mapper_clock_received))
                    heapq.heappush(timers, (now + p.welcome.heartbeat_interval, next(seq), _HEARTBEAT, session, p))
                elif p.replica is not None and session == p.replica:  # _DONE, unless cancelled meanwhile
                    t = time.time()
                    report.done += 1
                    report.replicas_done.append(p.replica)
                    _send(p, P.Done(p.replica, p.job_received, p.job_received, t, 1.0, True))
                    p.replica = None
                    p.asked_at = time.monotonic()
            timeout = 1000 if not timers else max(0, math.ceil((timers[0][0] - time.monotonic()) * 1000))
            for sock, _ in poller.poll(min(timeout, 200)):
                p = by_socket[sock]
                while True:
                    try:
                        frame = sock.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    now = time.monotonic()
                    p.last_heard = now
                    report.received[int(time.time())] += 1
                    msg = P.decode(frame)
                    t = type(msg)
                    if t is P.JobMsg:
                        p.job_received = time.time()
                        if p.asked_at is not None:
                            report.latencies.append(now - p.asked_at)
                            report.latency_at.append(p.job_received)
                            p.asked_at = None
                        report.jobs += 1
                        p.replica = msg.replica
                        _send(p, P.Started(msg.replica, p.job_received, p.job_received))
                        share = p.welcome.share if p.welcome is not None else 1.0
                        delay = msg.work * (1.0 - msg.progress) * p.welcome.time_unit / share if p.welcome else 0.0
                        heapq.heappush(timers, (now + delay, next(seq), _DONE, msg.replica, p))
                    elif t is P.Heartbeat:
                        p.mapper_clock, p.mapper_clock_received = msg.clock, time.time()
                    elif t is P.Welcome:
                        if p.welcome is None:
                            if p.session == 0:
                                report.welcomed += 1
                            p.session += 1
                            heapq.heappush(timers, (now, next(seq), _HEARTBEAT, p.session, p))
                            if p.replica is None:
                                _send(p, P.Ready(msg.share, time.time(), 1))
                                p.asked_at = now
                        p.welcome = msg
                    elif t is P.CancelMsg:
                        if p.replica == msg.replica:
                            p.replica = None
                            _send(p, P.Ready(p.welcome.share if p.welcome else 1.0, time.time(), 1))
                            p.asked_at = now
                    elif t is P.Refused:
                        report.refused.append(f"{p.name}: {msg.reason}")
                        if msg.fatal:
                            p.gone = True
                            p.welcome = None
                            live -= 1
                            poller.unregister(sock)
                            break
                    elif t is P.Bye:
                        report.byes += 1
                        p.gone = True
                        p.welcome = None
                        live -= 1
                        poller.unregister(sock)
                        break
            now = time.monotonic()
            if now >= next_retry:
                next_retry = now + 1.0
                for p in pullers:
                    if p.welcome is None and not p.gone and now - p.hello_at > HELLO_RETRY:
                        _hello(p)
    finally:
        for p in pullers:
            p.sock.close(linger=0)
        ctx.term()
    report.sent = Counter(_sent)
    report.cpu_s, report.wall_s = time.process_time() - cpu_started, time.monotonic() - started
    return report


_sent: Counter = Counter()  # this process's sends by second (one worker per process)


def _hello(p: FakePuller) -> None:
    p.hello_at = time.monotonic()
    holds = () if p.replica is None else (p.replica,)
    _send(p, P.Hello(P.PROTOCOL_VERSION, p.name, p.incarnation, ("emulate",), 0.0, time.time(), 1, holds, ()))


def _send(p: FakePuller, msg: P.Message) -> None:
    try:
        p.sock.send(P.encode(msg), zmq.NOBLOCK)
        _sent[int(time.time())] += 1
    except zmq.Again:  # its queue to the mapper is full: the mapper is far behind (counted by it as silence)
        pass


def report_to_json(report: WorkerReport) -> dict:
    """A worker's report as JSON values (the seconds of its message counts as strings)."""
    values = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    return {k: dict(v) if isinstance(v, Counter) else v for k, v in values.items()}


def main(argv: list[str] | None = None) -> int:
    """Run as a worker process: ``--names`` pullers against ``--connect``, the report into ``--report``."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--connect", required=True, help="the mapper's endpoint")
    p.add_argument("--keys", type=Path, help="the mgst keys folder (each puller uses pullers/NAME.key_secret)")
    p.add_argument("--names", required=True, help="machine names, comma-separated")
    p.add_argument("--seconds", type=float, required=True, help="leave after this long at most")
    p.add_argument("--report", type=Path, required=True, help="write the report here (JSON)")
    p.add_argument("--liveness", type=int, default=LIVENESS,
                   help=f"silent mapper intervals before saying hello again (default {LIVENESS}, as the puller)")
    args = p.parse_args(argv)
    report = run_pullers(args.connect, args.keys, args.names.split(","), time.time() + args.seconds,
                         liveness=args.liveness)
    args.report.write_text(json.dumps(report_to_json(report)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
