"""Poisson job classes: exponential inter-arrival times and exponential job sizes, per class."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from mgst.model import Job
from mgst.streams import ExpStream, Purpose, generator


class PoissonWorkload:
    """The time-ordered job sequence of an experiment.

    Class i arrives at rate alpha_i; each job's size (work at unit rate) is drawn
    once from Exp with mean X_i, the class's granularity (1 unless given): the unit
    draw of the class's size stream times X_i, so the streams do not depend on the
    granularities. Every class has its own arrival and size streams, so the
    sequence of one class does not depend on the others, nor on the policy.
    Job ids count from 0 in arrival order.
    """

    def __init__(
        self,
        arrival_rates: Sequence[float],
        seed: int,
        replication: int = 0,
        start: float = 0.0,
        granularity: Sequence[float] | None = None,
    ):
        self._gaps = [
            ExpStream(generator(seed, replication, Purpose.ARRIVALS, i), 1.0 / a) if a > 0 else None
            for i, a in enumerate(arrival_rates)
        ]
        self._sizes = [
            ExpStream(generator(seed, replication, Purpose.SIZES, i), 1.0) for i in range(len(arrival_rates))
        ]
        if granularity is None:
            granularity = (1.0,) * len(arrival_rates)
        if len(granularity) != len(arrival_rates):
            raise ValueError(f"{len(granularity)} granularities for {len(arrival_rates)} classes")
        self._scale = [float(x) for x in granularity]
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
        job = Job(self._id, i, t, self._sizes[i]() * self._scale[i])
        self._id += 1
        return job

    next = next_job  # the name every workload shares (mgst.workload.make_workload)

    def __iter__(self) -> Iterator[Job]:
        while self.peek_time() < math.inf:
            yield self.next_job()
