"""A replication's results without its records: jobs leave the core once over, their figures summed in arrival
order.

A run that keeps no per-job records needs of each job only its class, its response time and its wait, summed per
class in arrival order (floating-point addition is not associative: the order is the result, and it must be the
kept records' order, digit for digit). The sums advance over the arrival list as its oldest jobs end, each summed
from its record as it leaves the core. A job still running (one suspended on a RECLAIMED machine, say) holds back
all that arrive after it: on a small grid a few dozen, which wait as records; at 10,000 machines most of a short
run. So once more than ``CROWDED`` wait, a job that is over (done, no replica left running) is reduced at once to
its figures, a small tuple in its arrival place, and leaves the core (its replicas' records freed while still in
cache).

A job is found in the arrival list by its id while the workload numbers jobs in arrival order (it does: ids count
up from the first); otherwise jobs wait for the front, as records, and the sums are the same.
"""

from __future__ import annotations

from typing import Any, Final

from mgst.bot_metrics import keep_replica_totals
from mgst.core.scheduler import Scheduler
from mgst.core.state import JobRecord, JobStatus
from mgst.intervals import BATCHES

# The arrival list drops its summed head once it is more than half of the list and more than this many.
RETIRED_MIN: Final = 1024
# Jobs over are reduced ahead of the front only while more than this many wait to be summed: a small grid's few
# never are (they are summed from their records soon, at no cost), a large grid's are bounded.
CROWDED: Final = 1024

_JOB_DONE: Final = JobStatus.DONE
_UNCOUNTED: Final = (-1, 0.0, 0.0, 0)  # the figures of a job that does not count (not done, or outside the window)
# A run of one replication's batch means (docs/intervals.md): the counted window [count_from, horizon) is cut into
# BATCHES windows of equal model time, each a batch of the jobs submitted in it.


def batch_of(submitted: float, count_from: float, width: float) -> int:
    """The batch (0 to BATCHES - 1) of a job submitted at ``submitted`` in the counted window, whose batches are
    ``width`` model time units each from ``count_from``."""
    b = int((submitted - count_from) / width)
    return b if b < BATCHES else BATCHES - 1  # (a job just before the horizon, rounded up)

_JobFields = tuple[int, int, float, float, Any]  # a Job's fields: id, job_class, submitted, size, bag


class StreamedTotals:
    """Per class, the jobs that completed among those submitted in [count_from, horizon): how many, the sums of
    their response times and of their waits (submitted to first sent), in arrival order; and every job's count.
    With ``keep_batches``, also per class how many and the sum of their response times by batch: BATCHES windows
    of equal model time (a run of one replication: its interval is made of their batch means)."""

    def __init__(self, core: Scheduler, n_classes: int, count_from: float, horizon: float,
                 keep_batches: bool = False):
        self.core = core
        self.count_from = count_from
        self.horizon = horizon
        # From ``front`` on, in arrival order: each job's record, or its figures (class or -1, response, wait) once
        # it was reduced ahead of the front; before ``front``, summed.
        self.arrived: list[Any] = []
        self.front = 0
        self.dropped = 0  # entries summed and dropped from the list's head
        self.first_id = 0  # the first job's id
        self.next_id = 0  # the id the next job has if ids follow arrival order
        self.by_id = True  # so far every job's id is first_id plus its arrival index
        self.jobs_total = 0
        self.counts = [0] * n_classes
        self.sums = [0.0] * n_classes
        self.waits = [0.0] * n_classes
        self.batch_width = (horizon - count_from) / BATCHES
        self.batch_counts: list[list[int]] | None = None
        self.batch_sums: list[list[float]] | None = None
        if keep_batches:
            self.batch_counts = [[0] * BATCHES for _ in range(n_classes)]
            self.batch_sums = [[0.0] * BATCHES for _ in range(n_classes)]

    def note(self, rec: JobRecord) -> None:
        """A job arrived (its record is in the core)."""
        arrived = self.arrived
        if self.by_id:
            job: _JobFields = rec.job  # (compiled: the fields are read as a tuple's, natively)
            job_id = job[0]
            if not arrived and self.dropped == 0:
                self.first_id = job_id
            elif job_id != self.next_id:
                self.by_id = False
            self.next_id = job_id + 1
        arrived.append(rec)

    def crowded(self) -> bool:
        """More than CROWDED jobs wait to be summed: jobs over are then worth reducing at once (:meth:`settle`)."""
        return len(self.arrived) - self.front > CROWDED

    def settle(self, rec: JobRecord) -> None:
        """``rec``'s job may be over now: if it is, and older jobs still run, it is reduced to its figures and
        leaves the core at once (the oldest is left to :meth:`advance`, which sums it from its record)."""
        if not self.by_id or rec.status is not _JOB_DONE or rec.replicas:
            return
        job: _JobFields = rec.job
        i = job[0] - self.first_id - self.dropped
        arrived = self.arrived
        if i <= self.front or i >= len(arrived) or arrived[i] is not rec:
            return  # (the front, summed already, or not noted)
        arrived[i] = self._figures(rec)
        self._leave(rec)

    def advance(self) -> None:
        """Sum the jobs over from the front on, in arrival order, up to the first that is not over."""
        arrived = self.arrived
        i = self.front
        n = len(arrived)
        while i < n:
            item = arrived[i]
            if isinstance(item, JobRecord):
                if item.status is not _JOB_DONE or item.replicas:
                    break
                self._add_record(item)
                self._leave(item)
            else:
                self._add_figures(item)
            i += 1
        if i > RETIRED_MIN and 2 * i > n:
            del arrived[:i]
            self.dropped += i
            i = 0
        self.front = i

    def finish(self) -> None:
        """At the run's end: the jobs not summed yet are, in arrival order; those still in the core stay there."""
        arrived = self.arrived
        for i in range(self.front, len(arrived)):
            item = arrived[i]
            if isinstance(item, JobRecord):
                self._add_record(item)
            else:
                self._add_figures(item)
        self.arrived = []
        self.front = 0

    def totals(self) -> tuple[list[int], list[float], list[float]]:
        return self.counts, self.sums, self.waits

    def counted_batches(self) -> tuple[list[list[int]], list[list[float]]] | None:
        """Per class, per batch: the counted jobs and the sum of their response times (None: not kept)."""
        if self.batch_counts is None or self.batch_sums is None:
            return None
        return self.batch_counts, self.batch_sums

    def _figures(self, rec: JobRecord) -> tuple[int, float, float, int]:
        """A job's part of the results (and of the job count): its class, response, wait and batch if it is done
        and was submitted in the window, else _UNCOUNTED."""
        self.jobs_total += 1
        done = rec.completed
        job: _JobFields = rec.job
        _, c, sub, _, _ = job
        if done is None or not self.count_from <= sub < self.horizon:
            return _UNCOUNTED
        first = rec.first_sent
        assert first is not None  # a completed job was sent
        return (c, done - sub, first - sub, batch_of(sub, self.count_from, self.batch_width))

    def _add_record(self, rec: JobRecord) -> None:
        """A job's part of the results, from its record."""
        self._add_figures(self._figures(rec))

    def _add_figures(self, figures: tuple[int, float, float, int]) -> None:
        """A job's part of the results, from the figures it was reduced to (counted already in jobs_total)."""
        c, response, wait, b = figures
        if c >= 0:
            counts = self.counts
            sums = self.sums
            waits = self.waits
            counts[c] = counts[c] + 1  # (x[i] = x[i] + y: native, compiled; x[i] += y is not)
            sums[c] = sums[c] + response
            waits[c] = waits[c] + wait
            batch_counts = self.batch_counts
            if batch_counts is not None:
                of_class = batch_counts[c]
                of_class[b] = of_class[b] + 1
                sums_of_class = self.batch_sums[c]  # type: ignore[index]  # (set with batch_counts)
                sums_of_class[b] = sums_of_class[b] + response

    def _leave(self, rec: JobRecord) -> None:
        """An over job leaves the core (a bag's task: its bag keeps it until all its tasks are over)."""
        self.core.retire(rec)
        bag = rec.bag
        if bag is not None:
            bag.retired += 1
            if bag.completed is not None and bag.retired == bag.size:
                keep_replica_totals(bag)
