"""A replication's results without its records: each job settled once it is over, added up in arrival order.

A run that keeps its records sums, per class, the counted jobs' response times and waits in job order once the
run ends (``ReplicationRun.counted_totals``). A run that keeps none (``mgst simulate``, sweeps) must give the
very same sums, and floating-point addition is not associative: the parts are added in arrival order too.

A job is *settled* as soon as it is over (done, no replica of it running): its part is taken from its record,
which leaves the core at once (``Scheduler.retire``) while it is still in the processor's cache. What waits for
the older jobs to be over is the part alone, a small tuple, where it was the whole record, visited again and
freed once the oldest job ahead of it ended, by then long out of the cache (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any, Final

from mgst.bot_metrics import keep_replica_totals
from mgst.core.scheduler import Scheduler
from mgst.core.state import JobRecord, JobStatus

_JOB_DONE: Final = JobStatus.DONE
# The part of a job that counts nothing but itself (not done, or submitted outside the counted window).
_UNCOUNTED: Final[tuple[int, float, float]] = (-1, 0.0, 0.0)
# Parts added at the head of the list are dropped once they are more than half of it and more than this many.
DROP_MIN: Final = 1024


class StreamedTotals:
    """Per class, the number of counted jobs and the sums of their response times and of their waits (submitted
    to first sent), as ``ReplicationRun.counted_totals`` adds them from kept records, and every job's count.

    ``arrived`` for each job's record in arrival order; ``settle`` when a replica of a job ended (the job may be
    over); ``advance`` to add what is settled at the head; ``finish`` at the run's end."""

    def __init__(self, core: Scheduler, n_classes: int, count_from: float, horizon: float):
        self.core = core
        self.count_from = count_from
        self.horizon = horizon
        # From the oldest job not added yet, in arrival order: its record (not over yet) or its part.
        self.pending: list[Any] = []
        self.front = 0  # pending[:front] are added
        self.dropped = 0  # jobs dropped from the head of pending
        self.jobs_total = 0
        self.counts = [0] * n_classes
        self.sums = [0.0] * n_classes
        self.waits = [0.0] * n_classes

    def arrived(self, rec: JobRecord) -> None:
        """A job's record, in arrival order."""
        pending = self.pending
        if rec.arrival != self.dropped + len(pending):
            raise RuntimeError(f"job {rec.job.id} is number {rec.arrival} in arrival order, noted as "
                               f"{self.dropped + len(pending)}")
        pending.append(rec)

    def settle(self, rec: JobRecord) -> None:
        """If ``rec`` is over, its part is taken and it leaves the core; otherwise (or if settled already) nothing."""
        if rec.status is not _JOB_DONE or rec.replicas:
            return
        i = rec.arrival - self.dropped
        pending = self.pending
        if i < self.front or pending[i] is not rec:
            return
        pending[i] = self._part(rec)
        self._leave(rec)

    def advance(self) -> None:
        """Add the parts at the head, in arrival order, up to the first job not over (settled here if it is now)."""
        pending = self.pending
        i = self.front
        n = len(pending)
        while i < n:
            item = pending[i]
            if type(item) is JobRecord:  # not settled when its last replica ended (a late or lost one): maybe now
                rec: JobRecord = item
                if rec.status is not _JOB_DONE or rec.replicas:
                    break
                item = self._part(rec)
                self._leave(rec)
            self._add(item)
            i += 1
        if i > DROP_MIN and 2 * i > n:
            del pending[:i]
            self.dropped += i
            i = 0
        self.front = i

    def finish(self) -> None:
        """At the run's end: every job not added yet is, in arrival order, over or not (its record stays)."""
        pending = self.pending
        for i in range(self.front, len(pending)):
            item = pending[i]
            self._add(self._part(item) if type(item) is JobRecord else item)
        self.pending = []
        self.front = 0

    def _part(self, rec: JobRecord) -> tuple[int, float, float]:
        """A job's part of the totals: (class, response time, wait), or _UNCOUNTED."""
        done = rec.completed
        if done is None:
            return _UNCOUNTED
        job: tuple[Any, int, float, float, Any] = rec.job  # (compiled: the fields read natively, as a tuple's)
        _, c, sub, _, _ = job
        if not self.count_from <= sub < self.horizon:
            return _UNCOUNTED
        first = rec.first_sent
        assert first is not None  # a completed job was sent
        return (c, done - sub, first - sub)

    def _add(self, part: tuple[int, float, float]) -> None:
        self.jobs_total += 1
        c, response, wait = part
        if c >= 0:
            counts = self.counts
            sums = self.sums
            waits = self.waits
            counts[c] = counts[c] + 1  # (x[i] = x[i] + y: native, compiled; x[i] += y is not)
            sums[c] = sums[c] + response
            waits[c] = waits[c] + wait

    def _leave(self, rec: JobRecord) -> None:
        """An over job leaves the core; a bag whose tasks have all left keeps its replica totals alone."""
        self.core.retire(rec)
        bag = rec.bag
        if bag is not None:
            bag.retired += 1
            if bag.completed is not None and bag.retired == bag.size:
                keep_replica_totals(bag)
