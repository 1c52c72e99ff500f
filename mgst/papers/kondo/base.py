"""What Kondo, Chien and Casanova's policies share: one application (a Bag of Tasks), hosts ranked or excluded.

The slides (docs/policies.md, section 10, "Kondo, Chien and Casanova's policies"): the application is a bag of T
identical tasks submitted at once; its makespan is the last task's completion. A policy here decides which
ready hosts get the waiting tasks, and in which order (:meth:`KondoPolicy.rank`); the replicating ones
(mgst.papers.kondo.pred) also give leftover hosts replicas (:meth:`KondoPolicy.replicas`). No checkpoints
(Kondo et al.'s tasks restart from scratch). A host's clock rate is read as its class-0 power ``rates[0]``
(clock_ghz / 1.5 by the experiments' conventions): the order and the ratios are the clock rates'.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

from mgst.core.decisions import Assign, Decision
from mgst.core.state import BagRecord, JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies.bag_workload import require_bag_workload
from mgst.policies.base import NOTHING, Decisions, Policy


def power(m: MachineRecord) -> float:
    """The host's clock rate, as its power (work per second at full CPU share) for class 0."""
    return m.rates[0]


def dedicated_time(size: float, m: MachineRecord) -> float:
    """How long a task of ``size`` takes on host ``m`` at its clock rate, dedicated (inf on a host of power 0)."""
    p = power(m)
    return size / p if p > 0.0 else math.inf


def fastest_first(hosts: Sequence[MachineRecord]) -> list[MachineRecord]:
    """The hosts by clock rate, fastest first; ties keep their order (the ready queue's)."""
    return sorted(hosts, key=power, reverse=True)  # (reverse keeps a stable sort stable)


class KondoPolicy(Policy):
    """Base of Kondo et al.'s policies: after every event, the waiting tasks of each bag (oldest bag first) go to the
    ready hosts :meth:`rank` lets them have, in its order, as many as a host asks for; then the hosts left over may get
    replicas (:meth:`replicas`, none here). Jobs without a bag are refused (ValueError naming the policy)."""

    hooks = frozenset({"dispatch"})
    resume_from_checkpoint = False  # Kondo et al.: no checkpoints, a lost task restarts from scratch

    def __init__(self, options: Any = None, rng: Any = None):
        super().__init__(options, rng)
        self.replicas_started = 0  # replicas of tasks that were running already

    @classmethod
    def check_experiment(cls, experiment: Any) -> None:
        """Called when an experiment file is loaded: ValueError if this policy cannot run its workload."""
        require_bag_workload(cls.name, experiment, "one application, a Bag of Tasks")

    def observe(self, view: View) -> Decisions:
        """Called first in every dispatch, whatever is waiting (a bag's arrival, its completions): set timers."""
        return NOTHING

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        """The ready hosts (in ready-queue order) that may get ``bag``'s tasks, in the order they get them."""
        return hosts

    def replicas(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[JobRecord]:
        """Running tasks of ``bag`` to replicate on the leftover ready ``hosts`` (ranked), in that order."""
        return []

    def dispatch(self, view: View, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        if view.queued_count > sum(b.queued for b in view.bags.values()):
            raise ValueError(f"policy {self.name} schedules Bags of Tasks; jobs without a bag are waiting")
        first = self.observe(view)
        if not view.ready_count or not view.bags or (not view.queued_count and self.max_replicas <= 1):
            return first
        return itertools.chain(first, self._assign(view))  # lazily: each Assign is applied before the next

    def _assign(self, view: View) -> Iterator[Decision]:
        free = view.ready_machines()
        for bag in list(view.bags.values()):
            if not free:
                return
            if not bag.queued and self.max_replicas <= 1:
                continue
            hosts = self.rank(view, bag, free)
            # oldest first; no more than the hosts ask for (a bag of 400 tasks is not read whole at every event)
            waiting = list(itertools.islice(bag.queue, sum(m.asking for m in hosts)))
            next_task = 0
            used: set[int] = set()
            for m in hosts:
                while m.asking and next_task < len(waiting):  # (the core applies each Assign: asking drops)
                    task = waiting[next_task]
                    if m.rates[task.job.job_class] <= 0.0:
                        break
                    used.add(m.index)
                    next_task += 1
                    yield Assign(task.job, m.index)
            left = [m for m in hosts if m.index not in used]
            if left and self.max_replicas > 1:
                for task in self.replicas(view, bag, left):
                    m = next((h for h in left if h.rates[task.job.job_class] > 0.0
                              and all(r.machine != h.index for r in task.replicas.values())), None)
                    if m is not None:
                        left.remove(m)
                        used.add(m.index)
                        self.replicas_started += 1
                        yield Assign(task.job, m.index)
            free = [m for m in free if m.index not in used]
