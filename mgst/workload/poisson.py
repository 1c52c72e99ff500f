"""Poisson job classes: exponential inter-arrival times and Exp(1) job sizes, per class."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from mgst.model import Job
from mgst.streams import ExpStream, Purpose, generator


class PoissonWorkload:
    """The time-ordered job sequence of an experiment.

    Class i arrives at rate alpha_i; each job's size (work at unit rate) is drawn
    once from Exp(1). Every class has its own arrival and size streams, so the
    sequence of one class does not depend on the others, nor on the policy.
    Job ids count from 0 in arrival order.
    """

    def __init__(self, arrival_rates: Sequence[float], seed: int, replication: int = 0, start: float = 0.0):
        self._gaps = [
            ExpStream(generator(seed, replication, Purpose.ARRIVALS, i), 1.0 / a) if a > 0 else None
            for i, a in enumerate(arrival_rates)
        ]
        self._sizes = [
            ExpStream(generator(seed, replication, Purpose.SIZES, i), 1.0) for i in range(len(arrival_rates))
        ]
        self._next = [start + g() if g is not None else math.inf for g in self._gaps]
        self._id = 0

    def peek_time(self) -> float:
        """When the next job arrives (inf if no class ever arrives)."""
        return min(self._next)

    def next_job(self) -> Job:
        nxt = self._next
        t = min(nxt)
        i = nxt.index(t)
        if t == math.inf:
            raise StopIteration("no job class has a positive arrival rate")
        nxt[i] = t + self._gaps[i]()  # type: ignore[misc]
        job = Job(self._id, i, t, self._sizes[i]())
        self._id += 1
        return job

    def __iter__(self) -> Iterator[Job]:
        while self.peek_time() < math.inf:
            yield self.next_job()
