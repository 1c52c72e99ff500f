"""How often the mapper heartbeats its pullers, and when a silent puller counts as down.

The rule, for ``n`` pullers:

- the heartbeat interval is ``max(HEARTBEAT_INTERVAL, n / HEARTBEAT_RATE)`` seconds: 0.2 s up to
  ``HEARTBEAT_RATE / 5`` pullers (a lab), then growing with ``n`` so that the mapper sends (and, as each
  puller heartbeats at the interval of its welcome, receives) at most HEARTBEAT_RATE heartbeats a second;
- a puller is down after ``LIVENESS`` intervals of silence: 1 s for a lab of up to 200 pullers,
  5 s at 1,000, 15 s at 3,000;
- the silence is judged against the last time the mapper had read everything waiting on its socket,
  not against its clock: a message sitting unread in the socket (behind a pause of the mapper: a GC,
  an LP solve, a backlog) counts as heard. Only a socket that has not been emptied for PAUSE_GRACE
  (a flood that never lets up) falls back to the clock, so that a flood delays failure detection by at
  most that much.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import Any

from mgst.core.events import MachineDown, MachineSilent
from mgst.core.scheduler import Scheduler
from mgst.core.state import MachineState
from mgst.model import Experiment
from mgst.testbed.connection import Connection
from mgst.testbed.journal import Journal
from mgst.wire import protocol as P

log = logging.getLogger("mgst.testbed.mapper")

# How often the mapper heartbeats each puller in a lab, and how many silent intervals make a
# machine dead (the Paranoid Pirate pattern of the ZeroMQ guide uses 1 s and 3).
HEARTBEAT_INTERVAL = 0.2
LIVENESS = 5
# Heartbeats a second the mapper sends at most (as many come back): each costs it about 30-60 us of
# CPU (CURVE and msgpack in Python), so 1,000 a second is 5 % of a core however many pullers there are.
HEARTBEAT_RATE = 1000.0
# The machines heartbeated (and judged) in one pass of the mapper's loop: the sweep is spread over
# the interval in slices this big, so that no pass stalls dispatching for long (about 2 ms each).
HEARTBEAT_SLICE = 100
# A socket not emptied for this long (s) is a flood, not a pause: silence is judged against the clock
# again. No GC or LP solve pauses the mapper this long; a flood delays failure detection this much at most.
PAUSE_GRACE = 30.0


def heartbeat_interval_for(pullers: int) -> float:
    """The heartbeat interval (s) for a run of ``pullers`` pullers (see the module's rule)."""
    return max(HEARTBEAT_INTERVAL, pullers / HEARTBEAT_RATE)


def slices_for(pullers: int) -> int:
    """How many slices the heartbeat sweep over ``pullers`` machines is cut into."""
    return max(1, math.ceil(pullers / HEARTBEAT_SLICE))


class Heartbeats:
    """The mapper's heartbeats: the machines heartbeated a slice at a time, and judged by this module's rule.

    Shared with the mapper: the core, the journal, the pullers' connections and ``by_identity`` (a
    registered puller's routing id -> its machine). ``send(identity, msg, machine)`` queues a message
    (it leaves once the journal has committed); ``feed(now, event)`` gives the core an input
    as the mapper does (journalled, its decisions carried out). With ``detect_by_timeout``, a machine
    that stops answering is reported silent (its jobs time out); otherwise it is down.
    """

    def __init__(self, experiment: Experiment, core: Scheduler, journal: Journal, conns: list[Connection],
                 by_identity: dict[bytes, int], *, send: Callable[[bytes | None, Any, int | None], None],
                 feed: Callable[..., None], interval: float, liveness: int, detect_by_timeout: bool):
        self.machines = experiment.machines
        self.timeout_factor = experiment.testbed.timeout_factor
        self.core = core
        self.journal = journal
        self.conns = conns
        self.by_identity = by_identity
        self.send = send
        self.feed = feed
        self.interval = interval
        self.liveness = liveness
        self.detect_by_timeout = detect_by_timeout
        self.slices = slices_for(len(conns))  # a sweep over every machine takes this many calls of beat
        self._next_slice = 0

    def beat(self, now: float, drained_at: float, grace_until: float = -math.inf) -> None:
        """Heartbeat the next slice of the machines, and judge their silence as of ``drained_at``: the last
        time the mapper had read all that was waiting (what sits unread behind a pause of ours, a GC, an LP
        solve, a backlog, was heard). A socket never emptied for PAUSE_GRACE is a flood: judged by the clock.
        Until ``grace_until`` (a liveness window after a stall of the mapper long enough for its pullers to take it
        for silence: mgst.testbed.unreachable) no silence is judged: the pullers' hellos on new connections may
        still be in their handshakes, and the socket, read empty, says nothing of them (a 5 s stall of the mapper
        took every machine down, booked as failures of machines that never failed)."""
        dead_after = self.liveness * self.interval
        heard_until = max(drained_at, now - PAUSE_GRACE) if now >= grace_until else -math.inf
        slices = self.slices
        first = self._next_slice
        self._next_slice = (first + 1) % slices
        for j in range(first, len(self.conns), slices):
            conn = self.conns[j]
            if conn.identity is None:
                continue
            if heard_until - conn.last_seen > dead_after:
                self.unreachable(j, now, f"silent for {now - conn.last_seen:.2f} s")
                if conn.identity is None:  # taken down; a silent one is still heartbeated: back when it answers
                    continue
            conn.hb_seq += 1
            conn.hb_sent = time.time()
            self.send(conn.identity, P.Heartbeat(conn.hb_seq, conn.hb_sent, conn.remote_clock,
                                                 conn.remote_received), j)

    def unreachable(self, j: int, now: float, why: str) -> None:
        """It does not answer (``why``): down, or, when failures are detected by time-out, silent."""
        m = self.core.machines[j]
        name = self.machines[j].name
        if not self.detect_by_timeout:
            log.info("%s %s: down", name, why)
            self.machine_gone(j, now)
        elif m.state is not MachineState.DOWN and not m.silent:
            log.info("%s %s; its jobs time out at %g x their expected time", name, why, self.timeout_factor)
            self.feed(now, MachineSilent(j))

    def machine_gone(self, j: int, now: float, left: bool = False) -> None:
        """Machine ``j`` is gone (silent, unreachable, or it ``left``: its puller said so): its puller unregistered,
        the machine down (journalled as a failure unless it left)."""
        conn = self.conns[j]
        if conn.identity is not None:
            self.by_identity.pop(conn.identity, None)
            conn.identity = None
        if self.core.machines[j].state is not MachineState.DOWN:
            if left:
                self.journal.machine_left(j, now)
            else:
                self.journal.machine_down(j, now)
            self.feed(now, MachineDown(j))
