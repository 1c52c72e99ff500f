"""Job generators: where the jobs of an experiment come from (make_workload picks the model)."""

from __future__ import annotations

import math
from typing import Final, Protocol

from mgst.model import Bag, BagList, BagStream, Experiment, Job, PoissonClasses, SwfTrace
from mgst.workload.bags import BagListWorkload, BagStreamWorkload
from mgst.workload.poisson import PoissonWorkload
from mgst.workload.swf import SwfWorkload

__all__ = ["ENDLESS_AFTER", "JobSource", "late_arrivals", "make_workload"]

# A workload still going after this many items past a run's horizon is taken as endless (a bag stream): no warning
# that the run leaves its end out.
ENDLESS_AFTER: Final = 100_000


class JobSource(Protocol):
    """What every workload gives a driver: time-ordered jobs (Poisson classes, SWF) or bags."""

    def peek_time(self) -> float:
        """Model time of the next item; inf when exhausted."""
        ...

    def next(self) -> Job | Bag:
        """The next item; raises StopIteration when exhausted."""
        ...


def make_workload(experiment: Experiment, seed: int, replication: int = 0, start: float = 0.0) -> JobSource:
    """The job (or bag) sequence of ``experiment``'s workload model for one replication.

    Every model draws from its own named streams (mgst.streams), so the sequence depends
    on the seed, the replication and the model, never on the policy. Times are shifted by
    ``start``.
    """
    spec = experiment.workload
    granularity = [c.granularity for c in experiment.classes]
    if isinstance(spec, PoissonClasses):
        return PoissonWorkload(experiment.arrival_rates, seed, replication, start, granularity=granularity)
    if isinstance(spec, BagStream):
        return BagStreamWorkload(spec, granularity, seed, replication, start)
    if isinstance(spec, BagList):
        return BagListWorkload(spec, start)
    if isinstance(spec, SwfTrace):
        return SwfWorkload(spec, start)
    raise TypeError(f"unknown workload model {spec!r}")


def late_arrivals(experiment: Experiment, horizon: float, seed: int) -> tuple[int, int] | None:
    """(arrivals at or after model time ``horizon``, arrivals in all) of a finite workload (a bag list, a job trace)
    that has some, replication 0's; None if none is late, or for an endless workload."""
    if isinstance(experiment.workload, PoissonClasses):
        return None
    workload = make_workload(experiment, seed, 0)
    generated = 0
    while workload.peek_time() < horizon:
        workload.next()
        generated += 1
    late = 0
    while math.isfinite(workload.peek_time()):
        if late >= ENDLESS_AFTER:
            return None
        workload.next()
        late += 1
    return (late, generated + late) if late else None
