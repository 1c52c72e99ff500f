"""Where a replayed core departs from the run: its decisions checked against the journal's records of the run's.

The mapper journals each input before the core handles it, and each decision as it carries it out (dispatch.py):
a replica sent, a job completed, requeued or given up on (time-out), a replica cancelled or its late result
discarded. A replay feeds a fresh core the same inputs; a policy that decides the same from the same inputs makes the
same decisions, so every such record names one of the replay's, and at the log's end none of the replay's is left
without its record. Decisions are matched by what they name (replica, job), not by order: a decision's record may
follow a later input's (the input a dispatch feeds, ReplicaComputing, is journalled in the middle of its own).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from mgst.core.decisions import Assign, Cancel, JobCompleted, JobRequeued, ReplicaDiscarded, ReplicaTimedOut
from mgst.model import Experiment

# The journal's "end" outcomes recorded for a decision only while its replica is running in the journal: such a
# record needs the replay's decision, but the decision may have no record.
_CONDITIONAL_ENDS = {"cancelled": "cancelled replica", "discarded": "discarded the late result of replica"}


class Departures:
    """The replay's decisions not yet matched by the run's records; ``found``: the first departure, said, or None."""

    def __init__(self, experiment: Experiment, policy: str):
        self.names = [m.name for m in experiment.machines]
        self.policy = policy
        self.by_replica: dict[tuple[str, int], tuple[int, int]] = {}  # ("sent" | "complete", replica) -> (job, machine)
        self.by_job: Counter[tuple[str, int]] = Counter()  # ("requeue" | "timeout", job) -> how many
        self.ends: set[tuple[str, int]] = set()  # (outcome, replica), for _CONDITIONAL_ENDS
        self.found: str | None = None

    def decided(self, outputs: Iterable[Any]) -> None:
        """The replay's decisions for one input."""
        if self.found is not None:
            return
        for d in outputs:
            t = type(d)
            if t is Assign:
                self.by_replica["sent", d.replica] = (d.job.id, d.machine)
            elif t is JobCompleted:
                self.by_replica["complete", d.replica] = (d.job.id, d.machine)
            elif t is JobRequeued:
                self.by_job["requeue", d.job.id] += 1
            elif t is ReplicaTimedOut:
                self.by_job["timeout", d.job_id] += 1
            elif t is Cancel:
                self.ends.add(("cancelled", d.replica))
            elif t is ReplicaDiscarded:
                self.ends.add(("discarded", d.replica))

    def recorded(self, kind: str, args: tuple) -> None:
        """A journal record of the run (``kind``, its fields as stored)."""
        if self.found is not None:
            return
        if kind == "sent" or kind == "complete":
            (replica, job, machine) = args[:3] if kind == "sent" else (args[1], args[0], args[2])
            made = self.by_replica.pop((kind, replica), None)
            if made != (job, machine):
                replay = "did not" if made is None else self._did(kind, replica, *made)
                self._depart(f"the run {self._did(kind, replica, job, machine)}, where the replay {replay}")
        elif kind == "requeue" or kind == "timeout":
            key = (kind, args[0])
            if self.by_job[key] <= 0:
                did = "requeued" if kind == "requeue" else "gave up on (a time-out)"
                self._depart(f"the run {did} job {args[0]}, where the replay did not")
            else:
                self.by_job[key] -= 1
                if not self.by_job[key]:
                    del self.by_job[key]
        elif kind == "end" and args[0] in _CONDITIONAL_ENDS:
            key = (args[0], args[1])
            if key in self.ends:
                self.ends.discard(key)
            else:
                self._depart(f"the run {_CONDITIONAL_ENDS[args[0]]} {args[1]}, where the replay did not")

    def finish(self) -> None:
        """The log's end: a decision of the replay that the run never recorded is a departure too (the records of
        an input are committed with it)."""
        if self.found is not None:
            return
        if self.by_replica:
            (kind, replica), (job, machine) = min(self.by_replica.items(), key=lambda item: item[0][1])
            self._depart(f"the replay {self._did(kind, replica, job, machine)}, which the run did not")
        elif self.by_job:
            kind, job = min(self.by_job)
            self._depart(f"the replay {'requeued' if kind == 'requeue' else 'gave up on'} job {job}, which the run "
                         "did not")

    def _did(self, kind: str, replica: int, job: int, machine: int) -> str:
        """What a "sent" or "complete" of these says was done."""
        if kind == "sent":
            return f"sent replica {replica} (job {job}) to {self._name(machine)}"
        return f"completed job {job} with replica {replica} on {self._name(machine)}"

    def _name(self, machine: Any) -> str:
        names = self.names
        return names[machine] if isinstance(machine, int) and 0 <= machine < len(names) else repr(machine)

    def _depart(self, what: str) -> None:
        self.found = (f"{what}. The policy {self.policy!r} does not decide the same from the same inputs (a policy "
                      "must draw only on its inputs and the random stream it is given: not on the clock, Python's "
                      "global random, or the order of a set of strings, which changes from process to process), or "
                      "its code (or mgst's) changed since the run")
