"""What one simulated replication leaves behind: its machines' totals, its jobs' records or their sums, and the
counted figures its results are reduced from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from mgst.core.state import BagRecord, JobRecord, MachineStats
from mgst.intervals import BATCHES
from mgst.sim.streamed_totals import batch_of

_JobFields = tuple[Any, int, float, float, Any]  # a Job's: id, job_class, submitted, size, bag


class MachineSummary(NamedTuple):
    """One machine's totals over a replication (a NamedTuple: a compiled frozen dataclass took about
    10,000 instructions to make, which 10,000 machines noticed)."""

    name: str
    busy_time: float
    up_time: float
    completed: int
    lost: int
    cancelled: int
    failures: int
    discarded: int = 0  # replicas that ran on after their job was done (a policy that lets losers run on)
    discarded_time: float = 0.0  # the machine time they held: waste


@dataclass(frozen=True, slots=True)
class ReplicationRun:
    """What one simulated replication leaves behind."""

    replication: int
    end_time: float  # model time when the last counted job finished (or the drain limit)
    jobs: list[JobRecord]  # every job, in id order, with its full record (replicas in .history); [] if not kept
    machines: list[MachineSummary]
    unfinished: int  # jobs still in the system when the drain limit cut the run
    bags: list[BagRecord] = ()  # type: ignore[assignment]  # every bag, in arrival order
    horizon: float = 0.0  # arrivals stopped here
    jobs_total: int = 0  # every job simulated
    # A run that kept no records: its counted_totals, taken as jobs were retired, and the window they count
    # ((warm-up, horizon)); None when the records are kept.
    streamed_totals: tuple[list[int], list[float], list[float]] | None = None
    streamed_window: tuple[float, float] = (0.0, 0.0)
    # A run that kept no records: per class, per batch (StreamedTotals' windows), its counted jobs and the sum of
    # their response times, for a batch-means interval (Simulation's keep_batches); None otherwise.
    streamed_batches: tuple[list[list[int]], list[list[float]]] | None = None
    # Of ``unfinished``, the jobs left when nothing was left to happen before the drain limit (no machine could
    # take them: down for good, excluded, or refused by every requirement); the rest the drain limit cut
    stranded: int = 0

    def counted_batches(self, n_classes: int, warmup: float, horizon: float
                        ) -> tuple[list[list[int]], list[list[float]]] | None:
        """Per class, per batch (BATCHES windows of equal model time of [warmup, horizon)): the jobs submitted in
        it that completed, and the sum of their response times (None: a run that kept neither its records nor them).
        ValueError, as counted_totals, for another window."""
        if self.streamed_totals is not None:
            if self.streamed_batches is not None and self.streamed_window != (warmup, horizon):
                raise ValueError(f"this run kept no records: its batches count [{self.streamed_window[0]}, "
                                 f"{self.streamed_window[1]}), not [{warmup}, {horizon})")
            return self.streamed_batches
        counts = [[0] * BATCHES for _ in range(n_classes)]
        sums = [[0.0] * BATCHES for _ in range(n_classes)]
        width = (horizon - warmup) / BATCHES
        for rec in self.jobs:
            done = rec.completed
            if done is None:
                continue
            job: _JobFields = rec.job
            _, c, sub, _, _ = job
            if warmup <= sub < horizon:
                b = batch_of(sub, warmup, width)
                of_class = counts[c]
                of_class[b] = of_class[b] + 1
                sums_of_class = sums[c]
                sums_of_class[b] = sums_of_class[b] + (done - sub)
        return counts, sums

    def counted_totals(
        self, n_classes: int, warmup: float, horizon: float
    ) -> tuple[list[int], list[float], list[float]]:
        """Per class, of the jobs submitted in [warmup, horizon) that completed: how many, and the sums
        of their response times and of their waits (submitted to first sent), added in job order.

        Here, compiled, rather than in mgst.results: a long run's million records are read natively
        (interpreted, this loop took a tenth of the run's time). A run that kept no records has them already,
        summed in the same order as the jobs were retired (ValueError for another window).
        """
        streamed = self.streamed_totals
        if streamed is not None:
            if self.streamed_window != (warmup, horizon) or len(streamed[0]) != n_classes:
                raise ValueError(f"this run kept no records: its totals count [{self.streamed_window[0]}, "
                                 f"{self.streamed_window[1]}), not [{warmup}, {horizon})")
            counts_kept, sums_kept, waits_kept = streamed
            return list(counts_kept), list(sums_kept), list(waits_kept)
        counts = [0] * n_classes
        sums = [0.0] * n_classes
        waits = [0.0] * n_classes
        for rec in self.jobs:
            done = rec.completed
            if done is None:
                continue
            job: _JobFields = rec.job  # an annotation: compiled, the fields are read as a tuple's, natively
            _, c, sub, _, _ = job
            if warmup <= sub < horizon:
                first = rec.first_sent
                assert first is not None  # a completed job was sent
                counts[c] = counts[c] + 1  # (x[i] = x[i] + y: native, compiled; x[i] += y is not)
                sums[c] = sums[c] + (done - sub)
                waits[c] = waits[c] + (first - sub)
        return counts, sums, waits


def machine_summary(name: str, st: MachineStats) -> MachineSummary:
    """One machine's totals over the replication, from its statistics."""
    # tuple.__new__: a NamedTuple's own __new__ is a Python function (3,000 instructions per machine)
    fields = (name, st.busy_time, st.up_time, st.completed, st.lost, st.cancelled, st.failures, st.discarded,
              st.discarded_time)
    return tuple.__new__(MachineSummary, fields)  # type: ignore[type-var]
