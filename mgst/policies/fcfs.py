"""FCFS: a machine that asks gets the oldest waiting job it can run (MGST's baseline)."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from mgst.core.state import JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.base import Policy


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (mgst.build_info); researchers subclass it
class FCFS(Policy):
    """First come, first served over all classes.

    Idle machines wait in the core's ready queue in request order, so an arriving
    job goes to the machine that has waited longest (the rotating server queue:
    mgst's reading of Kondo et al.'s undefined FCFS, docs/readings.md). A machine
    never gets a class whose nominal rate on it is zero.
    """

    name = "fcfs"
    hooks = frozenset({"choose"})

    def choose(self, view: View, machine: MachineRecord) -> JobRecord | None:
        rates = machine.rates
        best: JobRecord | None = None
        for q in view.queues.values():
            head = q.head
            if head is None or rates[head.job.job_class] <= 0.0:
                continue
            if best is None or (head.job.submitted, head.job.id) < (best.job.submitted, best.job.id):
                best = head
        return best


register(FCFS)  # a call, not a class decorator: mypyc compiles only undecorated classes natively
