"""The network relay: carries each link's packets between its two TUN devices, each after the delay, jitter, loss
and rate of its schedule (mgst.netem.schedule); a child of `mgst run --network`, it ends at its stdin's end."""

from __future__ import annotations

import heapq
import json
import logging
import os
import random
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from mgst.netem.priority import as_the_network_stack
from mgst.netem.schedule import DirectionSchedule
from mgst.netem.spec import LinkSpec

log = logging.getLogger(__name__)

# Largest packet read from a TUN device (its MTU is 1500; 64 KiB takes any IP packet).
MAX_PACKET = 65536
# Packets read from one device per wake-up at most, so that one busy link cannot delay the others' departures.
READ_BATCH = 64
# select() takes no fd from this on (glibc's FD_SETSIZE); the relay renumbers higher ones (a run's TUN fds keep
# the mapper's numbers, which can pass it). Not epoll or poll: their timeouts are whole milliseconds, which would
# add up to 1 ms to each packet's delay.
FD_SETSIZE = 1024
COUNTS = "counts: "  # the relay's last line on stderr: this, then its counts as JSON (LabNetwork reads them)


@dataclass(slots=True)
class Direction:
    """Packets read from ``source`` are written to ``target`` as ``schedule`` says."""

    name: str
    source: int
    target: int
    schedule: DirectionSchedule
    packets: int = 0
    bytes: int = 0
    write_errors: int = 0

    def stats(self) -> dict[str, int | str]:
        s = self.schedule
        return {"direction": self.name, "packets": self.packets, "bytes": self.bytes, "lost": s.dropped,
                "overflowed": s.overflowed, "write_errors": self.write_errors}


def directions(config: dict) -> list[Direction]:
    """Two directions per link of the relay's configuration (seeded per link and direction)."""
    found = []
    seed = config["seed"]
    for k, link in enumerate(config["links"]):
        spec = LinkSpec.from_dict(link["link"])
        root, ns, name = int(link["root_fd"]), int(link["namespace_fd"]), link["machine"]
        found.append(Direction(f"{name} up", ns, root, DirectionSchedule(spec, random.Random(f"{seed}-{k}-up"))))
        found.append(Direction(f"{name} down", root, ns, DirectionSchedule(spec, random.Random(f"{seed}-{k}-down"))))
    return found


def relay(dirs: list[Direction], control: int, clock: Callable[[], float] = time.monotonic) -> None:
    """Carry packets until ``control`` reads end of file."""
    low: dict[int, int] = {}  # fds select() refuses -> their duplicates below FD_SETSIZE (closed at the end)
    try:
        for d in dirs:
            d.source, d.target = (_below_setsize(fd, low) for fd in (d.source, d.target))
        _carry(dirs, _below_setsize(control, low), clock)
    finally:
        for fd in low.values():
            os.close(fd)


def _below_setsize(fd: int, low: dict[int, int]) -> int:
    """``fd``, or a duplicate of it below FD_SETSIZE (a dup takes the lowest free number) noted in ``low``."""
    if fd < FD_SETSIZE:
        return fd
    if fd not in low:
        low[fd] = os.dup(fd)
        if low[fd] >= FD_SETSIZE:
            raise OSError(f"no fd below {FD_SETSIZE} free for select()")
    return low[fd]


def _carry(dirs: list[Direction], control: int, clock: Callable[[], float]) -> None:
    by_source = {d.source: d for d in dirs}
    watched = [control, *by_source]
    for fd in by_source:
        os.set_blocking(fd, False)
    heap: list[tuple[float, int, Direction, bytes]] = []
    seq = 0
    while True:
        now = clock()
        while heap and heap[0][0] <= now:
            _, _, d, packet = heapq.heappop(heap)
            d.schedule.sent()
            try:
                os.write(d.target, packet)
            except OSError:  # (the device is down: the packet is lost, as on a wire)
                d.write_errors += 1
        timeout = max(0.0, heap[0][0] - clock()) if heap else None
        readable, _, _ = select.select(watched, [], [], timeout)
        for fd in readable:
            if fd == control:
                if not os.read(control, 4096):
                    return
                continue
            d = by_source[fd]
            for _ in range(READ_BATCH):
                try:
                    packet = os.read(fd, MAX_PACKET)
                except BlockingIOError:
                    break
                except OSError:  # the device went away (its namespace removed)
                    watched.remove(fd)
                    break
                d.packets += 1
                d.bytes += len(packet)
                departure = d.schedule.admit(clock(), len(packet))
                if departure is not None:
                    heapq.heappush(heap, (departure, seq, d, packet))
                    seq += 1


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="mgst relay: %(message)s")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the run, whose end stops the relay
    problem = as_the_network_stack()
    if problem:
        log.warning("%s", problem)
    config = json.loads(sys.argv[1])
    dirs = directions(config)
    print("ready", flush=True)
    started = time.monotonic()
    relay(dirs, sys.stdin.fileno())
    log.info("carried for %.1f s", time.monotonic() - started)
    print(f"{COUNTS}{json.dumps([d.stats() for d in dirs])}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
