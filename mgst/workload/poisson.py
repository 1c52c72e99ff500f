"""Poisson job classes: exponential inter-arrival times and exponential job sizes, per class."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Final

from mgst.core.tuples import new_tuple
from mgst.draws import ExpStream
from mgst.model import Job
from mgst.streams import Purpose, generator

# Final: a C static when compiled, where a plain global is a dict lookup at every use (docs/build.md).
_new_tuple: Final = new_tuple
_JOB: Final = Job


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
        self._first = _first_min(self._next)  # the class whose job arrives next
        self._id = 0

    def peek_time(self) -> float:
        """When the next job arrives (inf if no class ever arrives)."""
        return self._next[self._first] if self._next else math.inf

    def next_job(self) -> Job:
        nxt = self._next
        t = self.peek_time()
        if t == math.inf:
            raise StopIteration("no job class has a positive arrival rate")
        i = self._first
        gap = self._gaps[i]
        assert gap is not None  # its class arrives: t is finite
        nxt[i] = t + gap.draw()
        self._first = _first_min(nxt)
        # new_tuple, not Job(...): a NamedTuple's own __new__ is a Python function (the same Job, made faster)
        job: Job = _new_tuple(_JOB, self._id, i, t, self._sizes[i].draw() * self._scale[i], None)
        self._id += 1
        return job

    def next(self) -> Job:
        """The name every workload shares (mgst.workload.make_workload); a method, not an alias of
        next_job, which a compiled class would not have."""
        return self.next_job()

    def __iter__(self) -> Iterator[Job]:
        while self.peek_time() < math.inf:
            yield self.next_job()


def _first_min(times: list[float]) -> int:
    """The index of the smallest time, the first of equals (as ``times.index(min(times))``)."""
    best = 0
    least = times[0] if times else math.inf
    for k in range(1, len(times)):
        t = times[k]
        if t < least:
            best, least = k, t
    return best
