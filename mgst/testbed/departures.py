"""Where a replayed core departs from the run: its decisions checked against the journal's records of the run's.

The mapper journals each input before the core handles it, and each decision as it carries it out (dispatch.py):
a replica sent, a job completed, requeued or given up on (a time-out), a replica cancelled or its late result
discarded. A replay feeds a fresh core the same inputs; a policy that decides the same from the same inputs makes the
same decisions, so every such record names one of the replay's, and none of the replay's is left without its record.
Decisions are matched by what they name (replica, job), not by order: a decision's record may follow a later input's
(a dispatch feeds ReplicaComputing right after sending a replica that stages for no time, in the middle of carrying
out its own input). A log may end inside an input's carrying out (a salvaged journal is cut at its damage): the
decisions of its last input, with those fed inside it, are not asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mgst.core.decisions import Assign, Cancel, JobCompleted, JobRequeued, ReplicaDiscarded, ReplicaTimedOut
from mgst.core.events import ReplicaComputing
from mgst.model import Experiment

# The journal's "end" outcomes recorded for a decision only while its replica is running in the journal: such a
# record needs the replay's decision, but the decision may have no record.
_CONDITIONAL_ENDS = {"cancelled": "cancelled replica", "discarded": "discarded the late result of replica"}


class Departures:
    """The replay's decisions not yet matched by the run's records; ``found``: the first departure, said, or None."""

    def __init__(self, experiment: Experiment, policy: str):
        self.names = [m.name for m in experiment.machines]
        self.policy = policy
        # ("sent" | "complete", replica) -> (job, machine, the input that decided it, its model time)
        self.by_replica: dict[tuple[str, int], tuple[int, int, int, float]] = {}
        # ("requeue" | "timeout", job) -> (the input, its model time) of each such decision not yet recorded
        self.by_job: dict[tuple[str, int], list[tuple[int, float]]] = {}
        self.ends: set[tuple[str, int]] = set()  # (outcome, replica), for _CONDITIONAL_ENDS
        self.found: str | None = None
        self.now = 0.0  # the model time of the latest input
        self.outer = 0  # inputs fed from outside the carrying out of another, counted: the current one's number
        self._sent_last: int | None = None  # the replica of the latest record, if it was its sending

    def fed(self, event: Any, now: float, outputs: Iterable[Any]) -> None:
        """An input of the log (at model time ``now``) and the replay's decisions for it."""
        self.now = now
        if not (type(event) is ReplicaComputing and event.replica == self._sent_last):  # (else fed inside the last)
            self.outer += 1
        self._sent_last = None
        if self.found is not None:
            return
        at = (self.outer, now)
        for d in outputs:
            t = type(d)
            if t is Assign:
                self.by_replica["sent", d.replica] = (d.job.id, d.machine, *at)
            elif t is JobCompleted:
                self.by_replica["complete", d.replica] = (d.job.id, d.machine, *at)
            elif t is JobRequeued:
                self.by_job.setdefault(("requeue", d.job.id), []).append(at)
            elif t is ReplicaTimedOut:
                self.by_job.setdefault(("timeout", d.job_id), []).append(at)
            elif t is Cancel:
                self.ends.add(("cancelled", d.replica))
            elif t is ReplicaDiscarded:
                self.ends.add(("discarded", d.replica))

    def recorded(self, kind: str, args: tuple) -> None:
        """A journal record of the run (``kind``, its fields as stored)."""
        self._sent_last = args[0] if kind == "sent" else None
        if self.found is not None:
            return
        if kind == "sent" or kind == "complete":
            (replica, job, machine) = args[:3] if kind == "sent" else (args[1], args[0], args[2])
            made = self.by_replica.pop((kind, replica), None)
            if made is None or made[:2] != (job, machine):
                self._depart(self.now, f"the run {self._did(kind, replica, job, machine)}, where the replay "
                                       + ("did not" if made is None else self._instead(kind, job, made[0], made[1])))
        elif kind == "requeue" or kind == "timeout":
            pending = self.by_job.get((kind, args[0]))
            if not pending:
                self._depart(self.now, f"the run {_JOB_DID[kind]} job {args[0]}, where the replay did not")
            else:
                del pending[0]
                if not pending:
                    del self.by_job[kind, args[0]]
        elif kind == "end" and args[0] in _CONDITIONAL_ENDS:
            key = (args[0], args[1])
            if key in self.ends:
                self.ends.discard(key)
            else:
                self._depart(self.now, f"the run {_CONDITIONAL_ENDS[args[0]]} {args[1]}, where the replay did not")

    def finish(self) -> None:
        """The log's end: a decision of the replay that the run never recorded is a departure too, but for those of
        the last input (the log may end inside its carrying out)."""
        if self.found is not None:
            return
        owed = [(outer, now, f"the replay {self._did(kind, replica, job, machine)}, which the run did not")
                for (kind, replica), (job, machine, outer, now) in self.by_replica.items()]
        owed += [(outer, now, f"the replay {_JOB_DID[kind]} job {job}, which the run did not")
                 for (kind, job), pending in self.by_job.items() for outer, now in pending]
        owed = [o for o in owed if o[0] < self.outer]
        if owed:
            _, now, what = min(owed)
            self._depart(now, what)

    def _did(self, kind: str, replica: int, job: int, machine: int) -> str:
        """What a "sent" or "complete" of these says was done."""
        if kind == "sent":
            return f"sent replica {replica} (job {job}) to {self._name(machine)}"
        return f"completed job {job} with replica {replica} on {self._name(machine)}"

    def _instead(self, kind: str, job: int, made_job: int, machine: int) -> str:
        """What the replay did instead, of the same replica."""
        verb = "sent it" if kind == "sent" else "completed it"
        return f"{verb}{'' if made_job == job else f' as job {made_job}'} {'to' if kind == 'sent' else 'on'} " \
               f"{self._name(machine)}"

    def _name(self, machine: Any) -> str:
        names = self.names
        return names[machine] if isinstance(machine, int) and 0 <= machine < len(names) else repr(machine)

    def _depart(self, now: float, what: str) -> None:
        self.found = (f"at model time {now:g}, {what}; the policy {self.policy!r} does not decide the same from the "
                      "same inputs (a policy must draw only on its inputs and the random stream it is given: not on "
                      "the clock, Python's global random, or the order of a set of strings, which changes from "
                      "process to process), or its code (or mgst's) changed since the run, or the journal was edited")


_JOB_DID = {"requeue": "requeued", "timeout": "gave up (a time-out) on"}
