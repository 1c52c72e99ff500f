"""Job generators: where the jobs of an experiment come from (make_workload picks the model)."""

from __future__ import annotations

from typing import Protocol

from mgst.model import Bag, BagList, BagStream, Experiment, Job, PoissonClasses, SwfTrace
from mgst.workload.bags import BagListWorkload, BagStreamWorkload
from mgst.workload.poisson import PoissonWorkload
from mgst.workload.swf import SwfWorkload

__all__ = ["JobSource", "make_workload"]


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
