"""RANDOM: a machine that asks gets a uniformly random waiting job it can run (a baseline)."""

from __future__ import annotations

from mgst.core.state import JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.base import Policy


@register
class RandomJob(Policy):
    """Uniformly random over every queued job whose class runs on the machine."""

    name = "random"
    hooks = frozenset({"choose"})

    def choose(self, view: View, machine: MachineRecord) -> JobRecord | None:
        rates = machine.rates
        queues = [q for q in view.queues.values() if q and rates[q.head.job.job_class] > 0.0]
        total = sum(len(q) for q in queues)
        if total == 0:
            return None
        k = self.rng.randrange(total)
        for q in queues:
            if k < len(q):
                for i, rec in enumerate(q):
                    if i == k:
                        return rec
            k -= len(q)
        raise AssertionError("unreachable: k < total")
