"""The master's link: transfers as tracked work under the bounded multi-port model (a rate rule).

At most ``n_com`` transfers move at once, each at the full per-worker rate ``bw``, and a worker receives one
message at a time (its link from the master carries ``bw``); the others wait. Queue
order is first queued, first served: the earliest-queued transfers whose worker is UP take the ``n_com``
ports (a program is queued before its worker's data, so it goes first). A transfer whose worker is RECLAIMED
pauses and gives up its port (it is not receiving) and keeps its progress; its owner cancels it when the
worker goes DOWN or leaves the configuration, and a transfer queued again starts from scratch.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from mgst.core.progress import Activity
from mgst.model import Availability

_UP = Availability.UP


class Transfer:
    """One message to one worker: its work is its size in time units at rate ``bw``."""

    __slots__ = ("key", "worker", "activity")

    def __init__(self, key: Hashable, worker: int, activity: Activity):
        self.key = key
        self.worker = worker
        self.activity = activity


class MasterLink:
    """The master's ``n_com`` ports; a :class:`~mgst.core.progress.RateRule` over the queued transfers."""

    __slots__ = ("n_com", "bw", "queue", "states")

    def __init__(self, n_com: int, bw: float = 1.0):
        if n_com < 1 or bw <= 0:
            raise ValueError("n_com must be at least 1 and bw positive")
        self.n_com = n_com
        self.bw = bw
        self.queue: dict[Hashable, Transfer] = {}  # in the order queued
        self.states: dict[int, int] = {}  # workers' availability (UP when not said)

    def add(self, now: float, key: Hashable, worker: int, size: float) -> Transfer:
        """Queue a transfer of ``size`` work units (from scratch) to ``worker``."""
        if key in self.queue:
            raise ValueError(f"transfer {key!r} is already queued")
        t = Transfer(key, worker, Activity(size, now, 0.0))
        self.queue[key] = t
        return t

    def remove(self, key: Hashable) -> Transfer:
        """Drop a transfer (ended, or cancelled: its progress is lost)."""
        return self.queue.pop(key)

    def worker_state(self, worker: int, state: int) -> None:
        self.states[worker] = state

    def moving(self) -> list[Transfer]:
        """The transfers holding a port now, in queue order."""
        out: list[Transfer] = []
        busy: set[int] = set()
        states = self.states
        for t in self.queue.values():
            if len(out) == self.n_com:
                break
            if t.worker not in busy and states.get(t.worker, _UP) == _UP:
                out.append(t)
                busy.add(t.worker)
        return out

    def rates(self, now: float) -> Iterable[tuple[Any, Activity, float, float]]:
        """The rule: ``bw`` (pace 1) for the moving transfers, 0 for the waiting and paused ones (one pass:
        a transfer moves if a port is free, its worker is UP and not already receiving, as in :meth:`moving`)."""
        bw, n_com, states = self.bw, self.n_com, self.states
        busy: set[int] = set()
        for t in self.queue.values():
            worker = t.worker
            if len(busy) < n_com and worker not in busy and states.get(worker, _UP) == _UP:
                busy.add(worker)
                yield t.key, t.activity, bw, 1.0
            else:
                yield t.key, t.activity, 0.0, 0.0


__all__ = ["MasterLink", "Transfer"]
