"""Runs tightly-coupled iterations (mgst.core.iterations) on per-slot availability chains, slot-exactly.

Time is in slots: every worker's availability changes only at integer times (its chain's periods are whole
slots), transfers and computations have integral sizes and go at rate 0 or 1, so every end falls on a slot
boundary and the event-driven run is the paper's discrete model exactly. At each instant the loop gathers every
end due and every availability change and hands them to the core's :meth:`~mgst.core.iterations.Iterations.instant`
(the order of an instant's steps is the core's, shared with the testbed), with, for a proactive policy, a
check: at instants with events and at the slot the policy names for its next look (``checks="events"``:
:meth:`~mgst.core.iterations.Iterations.next_check`; never, for a policy whose look reads nothing but the
configurations, since between events the running one only progresses or stalls), or at every slot
(``checks="slots"``, the paper's literal reading, for comparison).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mgst.availability.process import AvailabilityProcess
from mgst.core.decisions import Eta
from mgst.core.iterations import Iterations


@dataclass
class IterationsRun:
    """A run's outcome: its makespan (None: it hit the cap, a failure) and the core's log."""

    makespan: float | None
    iterations: int
    log: list[Any] = field(default_factory=list)
    checks: int = 0


def run_iterations(app: Iterations, chains: Iterable[AvailabilityProcess], cap: float = 1_000_000.0,
                   checks: str = "events", proactive: bool = True) -> IterationsRun:
    """Drive ``app`` until its iterations are done or time passes ``cap``."""
    if checks not in ("events", "slots"):
        raise ValueError("checks must be 'events' or 'slots'")
    heap: list[tuple[float, int, int, Any]] = []  # (time, 0 end | 1 change, seq, payload)
    due: dict[Hashable, float] = {}
    seq = 0
    processes = list(chains)
    if len(processes) != len(app.states):
        raise ValueError("one availability chain per worker")
    for q, proc in enumerate(processes):
        first = proc.next()
        if int(first.state) != app.states[q]:  # a chain may start elsewhere than UP: so it is from 0, before the
            app.state_changed(0.0, q, int(first.state))  # first choice (no configuration yet: nothing moves)
        heap.append((first.duration, 1, seq, (q, None, 0.0, first.duration)))
        seq += 1
    heapq.heapify(heap)

    def take(outs: list[Any]) -> None:
        nonlocal seq
        for o in outs:
            if type(o) is Eta:
                key, at = o.replica, o.at  # (an activity's key here, not a replica id)
                due[key] = at
                if at < math.inf:
                    heapq.heappush(heap, (at, 0, seq, key))
                    seq += 1

    per_slot = checks == "slots"
    now = 0.0
    n_checks = 0
    wake = math.inf  # when the policy asked to look again with no event (Iterations.next_check)
    take(app.settle(now))
    if proactive and not per_slot:  # a configuration just chosen is the policy's own: as if looked at
        wake = app.next_check(now)
    while not app.finished():
        nxt = heap[0][0] if heap else math.inf
        if per_slot:
            nxt = min(nxt, math.floor(now) + 1.0)
        elif proactive:
            nxt = min(nxt, wake)
        if nxt > cap:
            return IterationsRun(None, app.done, app.log, n_checks)
        now = nxt
        ends: list[Hashable] = []
        changes: list[tuple[int, int]] = []
        while heap and heap[0][0] == now:  # ends sort before changes at one time
            _, kind, _, payload = heapq.heappop(heap)
            if kind == 0:
                if due.get(payload) == now:  # not moved since (a stale Eta is skipped)
                    del due[payload]
                    ends.append(payload)
            else:
                q, state, start, length = payload
                if state is None:  # the period ends: the chain's next period begins now
                    period = processes[q].next()
                    state, length = int(period.state), period.duration
                changes.append((q, state))
                heapq.heappush(heap, (now + length, 1, seq, (q, None, now, length)))
                seq += 1
        take(app.instant(now, ends, changes, check=proactive))
        if proactive and not app.finished():  # (a check never ends the iterations: it was looked at)
            n_checks += 1
            if not per_slot:
                wake = app.next_check(now)
    return IterationsRun(now, app.done, app.log, n_checks)


__all__ = ["IterationsRun", "run_iterations"]
