"""WQR-FT: WorkQueue with Replication, fault-tolerant (Anglano & Canonico)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from mgst.core.decisions import Assign, Decision
from mgst.core.state import JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.base import NOTHING, Decisions, Policy, PolicyOptions


@dataclasses.dataclass(frozen=True)
class WqrOptions(PolicyOptions):
    # RepThresh: the most replicas of one task running at once (the paper uses 2).
    replicas: int = 2
    # Start new replicas from the task's best checkpoint (the "FT" of WQR-FT).
    checkpoints: bool = True
    # Let the losers run on when a replica wins (GridBot's reading): each ends as it would, its result discarded
    # and its machine time counted as waste. Off: the core cancels them (the paper's WQR).
    run_on_losers: bool = False

    def validate(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {self.replicas}")


@register
class WqrFT(Policy):
    """WQR-FT, knowledge-free.

    - A free machine is picked uniformly at random among those asking.
    - It gets the waiting job that has waited longest (a WorkQueue); when nothing
      waits, a replica of a running job with fewer than ``replicas`` live
      replicas, fewest first, ties broken at random.
    - The first replica to finish wins; the core cancels its siblings (with ``run_on_losers``
      they run on, and their results are discarded: waste).
    - A job whose last replica is lost goes back to the queue and, with
      ``checkpoints``, its next replica resumes from the best checkpoint.
    - A class whose nominal rate on a machine is zero never runs there.
    """

    name = "wqr_ft"
    # dispatch shuffles the ready machines and asks choose() for each
    hooks = frozenset({"dispatch", "choose"})
    Options = WqrOptions
    options: WqrOptions

    def __init__(self, options: WqrOptions | None = None, rng=None):
        super().__init__(options, rng)
        self.max_replicas = self.options.replicas
        self.resume_from_checkpoint = self.options.checkpoints
        self.cancel_losers = not self.options.run_on_losers

    def dispatch(self, view: View, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        if not view.ready_count:
            return NOTHING
        if not view.queued_count and (self.max_replicas <= 1 or not view.running):
            return NOTHING
        return self._dispatch(view)

    def _dispatch(self, view: View) -> Iterator[Decision]:
        ready = view.ready_machines()
        self.rng.shuffle(ready)
        for m in ready:
            rec = self.choose(view, m)
            if rec is not None:
                yield Assign(rec.job, m.index)

    def choose(self, view: View, machine: MachineRecord) -> JobRecord | None:
        rates = machine.rates
        best: JobRecord | None = None
        for q in view.queues.values():
            for rec in q:
                if rates[rec.job.job_class] > 0.0:
                    if best is None or (rec.job.submitted, rec.job.id) < (best.job.submitted, best.job.id):
                        best = rec
                    break
        if best is not None or self.max_replicas <= 1:
            return best
        limit = fewest = self.max_replicas
        candidates: list[JobRecord] = []
        j = machine.index
        for rec in view.running.values():
            n = len(rec.replicas)
            if n >= limit or rates[rec.job.job_class] <= 0.0:
                continue
            if machine.slots > 1 and any(r.machine == j for r in rec.replicas.values()):
                continue  # a machine of several slots already running a replica of it: never two on one machine
            if n < fewest:
                fewest, candidates = n, [rec]
            elif n == fewest:
                candidates.append(rec)
        if not candidates:
            return None
        return candidates[self.rng.randrange(len(candidates))] if len(candidates) > 1 else candidates[0]
