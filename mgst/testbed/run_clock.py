"""A testbed run's model time on the wall clock (zero at t0, held while resuming), and the core's timers on it."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Hashable, Mapping


class RunClock:
    """Model time (the experiment's time units) from wall time (s): ``(wall - t0) / time_unit``.

    Shared by the mapper (which starts it), its resume (which holds it still while a resumed
    mapper waits for its pullers, then runs it on with the outage cut out) and its message
    handler (which tells a puller its failure law only once the run has begun).
    """

    def __init__(self, time_unit: float):
        self.time_unit = time_unit
        self.t0: float | None = None  # the wall time of model time 0; None until the run begins
        self.held: float | None = None  # model time, held while a resumed mapper waits for its pullers

    def model_now(self, wall: float) -> float:
        """Model time at wall time ``wall`` (0 before the run begins; the held time while it is held)."""
        if self.held is not None:
            return self.held
        return 0.0 if self.t0 is None else max(0.0, (wall - self.t0) / self.time_unit)

    def begin(self, wall: float) -> None:
        """Model time 0 is at wall time ``wall``."""
        self.t0 = wall

    def hold(self, model_time: float, wall: float) -> None:
        """Stand still at ``model_time`` (a resumed run, waiting for its pullers), provisionally as of ``wall``."""
        self.held = model_time
        self.t0 = wall - model_time * self.time_unit

    def run_on(self, wall: float) -> float:
        """Run on from the held model time as of ``wall`` (the wait is cut out); the new t0."""
        assert self.held is not None
        self.t0 = wall - self.held * self.time_unit
        self.held = None
        return self.t0


class WallTimers:
    """The core's timers on the wall clock: a heap of (wall time, sequence, key), earliest first.

    An entry whose key the core no longer holds is stale: the mapper skips it when it comes due,
    rather than searching the heap when the core drops a timer.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()  # ties at one wall time fire in the order they were set

    def push(self, wall: float, key: Hashable) -> None:
        """Fire timer ``key`` at wall time ``wall``."""
        heapq.heappush(self._heap, (wall, next(self._seq), key))

    def next_at(self) -> float:
        """When the earliest timer is due (wall); infinity if none is set."""
        return self._heap[0][0] if self._heap else math.inf

    def pop(self) -> Hashable:
        """The key of the earliest timer, taken off."""
        return heapq.heappop(self._heap)[2]

    def rebase(self, t0: float, time_unit: float, held: Mapping[Hashable, float]) -> None:
        """Model time 0 is at wall time ``t0`` now: each timer still ``held`` (key -> model time) is due at its
        model time from then; the others are dropped."""
        self._heap = [(t0 + held[key] * time_unit, seq, key) for _, seq, key in self._heap if key in held]
        heapq.heapify(self._heap)
