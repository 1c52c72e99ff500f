"""GridBot's Algorithm 2, the periodic replication cycle: replicas past their deadline, then speculative replicas for
the bags whose queue runs low, drawn in a weighted sample."""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from typing import TypeVar

from mgst.core.state import JobRecord, JobStatus
from mgst.core.view import View
from mgst.papers.gridbot.classads import REPLICATION_REQUIREMENTS
from mgst.papers.gridbot.evaluation import Evaluation

T = TypeVar("T")


def weighted_order(items: Sequence[tuple[int, T]], rng: random.Random) -> list[T]:
    """``items`` (copies, item) in a weighted random order, each of weight 1 / copies: the fewer replicas a job has,
    the likelier it comes early (Efraimidis and Spirakis: sort by u^(1/w), u uniform, largest first; one draw of
    ``rng`` per item, in the given order, so the order is the same for a seed)."""
    keyed = [(-(rng.random() ** copies), i, item) for i, (copies, item) in enumerate(items)]
    keyed.sort(key=lambda k: k[:2])
    return [item for _, _, item in keyed]


class Replication:
    """The cycle's state: the deadlines of the replicas sent with one, and those past it.

    A replica past its deadline is marked expired and its job gets a replica enqueued (if under the cap); it runs
    on (mgst.papers.gridbot.policy's docstring says why it is not the core's TimeOut). Then each bag whose queue
    holds fewer than ``below`` jobs (its waiting tasks and pending replicas) has its running jobs under the cap
    drawn in a weighted sample (:func:`weighted_order`, from ``rng``), and each whose ReplicationRequirements hold
    gets a replica enqueued, until the queue holds ``below``. ReplicationRequirements is evaluated for nothing else.
    """

    def __init__(self, max_replicas: int, below: int, rng: random.Random, counts: dict[str, int]):
        self.max_replicas = max_replicas
        self.below = below
        self.rng = rng
        self.counts = counts  # the policy's (deadline_expired, replicas_enqueued)
        self.deadlines: list[tuple[float, int]] = []  # (expiry, replica id) of the replicas sent with a deadline
        self.expired: set[int] = set()  # live replicas past their deadline (each replicated once)

    def stamp(self, job: JobRecord, deadline: float) -> None:
        """A replica of ``job`` was just sent with ``deadline`` (model time from now; inf: none)."""
        if deadline < float("inf"):
            r = job.history[-1]
            heapq.heappush(self.deadlines, (r.sent + max(0.0, deadline), r.id))

    def cycle(self, view: View, ev: Evaluation) -> None:
        """Algorithm 2, at ``view.now``."""
        ev.forget_completed()
        self._expire(view, ev)
        self._speculate(view, ev)

    def _expire(self, view: View, ev: Evaluation) -> None:
        now = view.now
        live = view.live
        deadlines = self.deadlines
        if len(deadlines) > 2 * len(live) + 64:  # mostly replicas that ended: dropped
            deadlines[:] = [d for d in deadlines if d[1] in live]
            heapq.heapify(deadlines)
        while deadlines and deadlines[0][0] < now:  # (the paper's "t > deadline_j")
            _, rid = heapq.heappop(deadlines)
            r = live.get(rid)
            if r is None or r.job.status is not JobStatus.RUNNING or r.job.bag is None:
                continue  # ended, or a loser of a job already done
            self.expired.add(rid)
            self.counts["deadline_expired"] += 1
            state = ev.state(r.job.bag)
            state.pending_jobs()
            if state.copies(r.job) < self.max_replicas:
                state.enqueue(r.job, now)
                self.counts["replicas_enqueued"] += 1
        if len(self.expired) > 2 * len(live) + 64:
            self.expired = {rid for rid in self.expired if rid in live}

    def _speculate(self, view: View, ev: Evaluation) -> None:
        below = self.below
        prepared = False
        for bag in view.bags.values():
            state = ev.state(bag)
            if state.queue_length() >= below or state.policy.constants.get(REPLICATION_REQUIREMENTS) is False:
                continue  # ("evaluated only when the number of idle jobs of the BOT becomes too low")
            state.pending_jobs()
            items = [(state.copies(job), job) for job in bag.running.values()]
            order = weighted_order([(c, job) for c, job in items if c < self.max_replicas], self.rng)
            if not order:
                continue
            if not prepared:  # the cycle evaluates no host
                ev.ads.no_host()
                ev.ads.queue(ev.pending_total())
                prepared = True
            for job in order:
                if state.queue_length() >= below:
                    break
                ev.set_bag(state)
                ev.set_job(state, job, self.expired, cycle=True)
                if ev.holds(REPLICATION_REQUIREMENTS, state):
                    state.enqueue(job, view.now)
                    self.counts["replicas_enqueued"] += 1
