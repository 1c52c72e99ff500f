"""The mapper's CPU per message, in this process, without sockets or pullers: what its message handling costs.

A real Mapper (its socket bound on 127.0.0.1, never read) registers ``--machines`` pullers by calling its
message handler directly, then, per cycle, a job arrives and one machine reports Done asking for more: the
core completes the replica and assigns the job, and the mapper journals it and queues the JobMsg (what a
dispatch costs the mapper, bar CURVE and the socket). Then one heartbeat per machine, handled. Times are
CPU time of this process (``time.process_time``), so a machine busy with other work blurs them less than
wall time; the best of ``--rounds`` is quoted. Run it from a tree's root with ``PYTHONPATH=.`` on the tree
before a change and after it, alternately.

It also runs on the tree before issue 20, whose Mapper handled messages in mixins (``_hello``, ``_handle``,
``_core``, ``_outbox``): the names are looked up once, so that both trees are measured doing the same work.
"""

from __future__ import annotations

import argparse
import gc
import logging
import time

import zmq

from mgst.model import Experiment, Job, JobClass, Machine, PolicySpec, TestbedSettings
from mgst.wire import protocol as P

try:
    from mgst.testbed.mapper import Mapper
except ImportError:  # the tree before issue 20
    from mgst.mapper import Mapper  # type: ignore[no-redef]


def _typed_events(mapper: Mapper) -> tuple | None:
    """(RunStart, JobArrived) where the mapper takes the core's typed events (``feed(now, event)``), else None."""
    try:
        from mgst.core.events import JobArrived, RunStart  # noqa: PLC0415
    except ImportError:
        return None
    import inspect  # noqa: PLC0415

    params = list(inspect.signature(mapper.feed).parameters) if hasattr(mapper, "feed") else []
    return (RunStart, JobArrived) if params[:2] == ["now", "event"] else None


def measure(policy: str, machines: int, cycles: int, rounds: int) -> tuple[float, float]:
    """The best (us per dispatch cycle, us per heartbeat) over ``rounds``."""
    exp = Experiment(name="messages", classes=(JobClass("1", 1.0),),
                     machines=tuple(Machine(f"M{i}", (1.0,), 1.0) for i in range(machines)),
                     policy=PolicySpec(policy),
                     testbed=TestbedSettings(time_unit=1.0, duration=1e6, timeout_factor=0.0))
    ctx = zmq.Context()
    mapper = Mapper(exp, "tcp://127.0.0.1:0", context=ctx)
    objects = hasattr(mapper, "messages")  # (else the mixins of before issue 20)
    events = _typed_events(mapper)
    if events is not None:  # the core's typed events: feed(now, event)
        run_start, job_arrived = events

        def feed(kind: str, at: float, *args: object) -> None:
            mapper.feed(at, run_start() if kind == "start" else job_arrived(*args))
    else:  # feed(kind, now, *args), as the trees of before typed events had it
        feed = mapper.feed if objects else mapper._core
    hello = mapper.messages.hello if objects else mapper._hello
    handle = mapper.messages.handle if objects else mapper._handle
    outbox = mapper.router.outbox if objects else mapper._outbox
    try:
        now = time.time()
        feed("start", now)
        identities = [f"puller-{i}".encode() for i in range(machines)]
        for i, identity in enumerate(identities):
            hello(identity, P.Hello(P.PROTOCOL_VERSION, f"M{i}", 1, ("emulate",), 0.0, now, 1, (), ()), None, now)
        mapper._begin(now)
        for identity in identities:
            handle(identity, P.Ready(1.0, now, 1), now)
        next_id = 0

        def arrive(at: float) -> None:
            nonlocal next_id
            job = Job(next_id, 0, 0.0, 1.0)
            next_id += 1
            mapper.journal.job_arrived(job, at)
            feed("job_arrived", at, job)

        for _ in range(machines):  # every machine busy
            arrive(now)
        running = [next(iter(mapper.core.machines[j].replicas)) for j in range(machines)]
        best_cycle = best_heartbeat = float("inf")
        gc.collect()
        gc.disable()
        for _ in range(rounds):
            outbox.clear()
            started = time.process_time()
            for c in range(cycles):
                j = c % machines
                now += 1e-4
                arrive(now)
                handle(identities[j], P.Done(running[j], now, now, now, 1.0, True), now)
                running[j] = next(iter(mapper.core.machines[j].replicas))
                if c % 1000 == 999:
                    outbox.clear()
            best_cycle = min(best_cycle, (time.process_time() - started) / cycles * 1e6)
            started = time.process_time()
            for c in range(cycles):
                handle(identities[c % machines], P.Heartbeat(c, now, -1.0, -1.0), now)
            best_heartbeat = min(best_heartbeat, (time.process_time() - started) / cycles * 1e6)
        gc.enable()
        return best_cycle, best_heartbeat
    finally:
        if objects:
            mapper.close()
        else:
            mapper.socket.close(linger=0)
            mapper._close_auth()
        ctx.term()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="lpas_dg", help="lpas_dg (default) or fcfs")
    ap.add_argument("--machines", type=int, default=200, help="registered pullers (default 200)")
    ap.add_argument("--cycles", type=int, default=20_000, help="dispatch cycles (and heartbeats) per round")
    ap.add_argument("--rounds", type=int, default=7, help="rounds; the best is quoted (default 7)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR)
    cycle, heartbeat = measure(args.policy, args.machines, args.cycles, args.rounds)
    print(f"{args.policy}, {args.machines} machines: arrival + Done(ready) + dispatch {cycle:.2f} us CPU, "
          f"heartbeat {heartbeat:.2f} us CPU (best of {args.rounds} x {args.cycles:,})")


if __name__ == "__main__":
    main()
