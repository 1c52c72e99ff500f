"""Decisions the core returns to drivers, and the notices it adds for their logs.

Policies yield the same decision classes; fields marked "filled by the core" are
ignored on the way in and set on the way out.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any, NamedTuple

from mypy_extensions import mypyc_attr

from mgst.model import Job


@mypyc_attr(native_class=False)  # mypyc: a native class cannot subclass RuntimeError
class PolicyError(RuntimeError):
    """A policy asked for something impossible, or declared its hooks wrongly (a bug in the policy, not the input)."""


def shown(value: object, limit: int = 80) -> str:
    """A value in a PolicyError's words: its text, cut to ``limit`` characters with an ellipsis if longer."""
    text = str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


class InputError(ValueError):
    """An input the core refuses (a CPU share outside [0, 1], a job of an unknown class, ...), before it changed
    anything: the driver's (or its peer's) fault, not the policy's; the core may go on."""


class Assign(NamedTuple):
    """Start a replica of ``job`` on ``machine``.

    A policy yields ``Assign(job, machine)``; the core answers with the replica id,
    the checkpointed fraction of work the replica resumes from, whether it
    stages first (the driver then reports ReplicaComputing when it computes), when
    it ends if nothing changes (inf while it stages, waits on the host or is
    suspended: an :class:`Eta` says when that moves) and its pace (see Eta).
    """

    job: Job
    machine: int
    replica: int = -1  # filled by the core
    progress: float = 0.0  # filled by the core: fraction of work already done
    staging: bool = False  # filled by the core
    eta: float = math.inf  # filled by the core: model time it ends at, if nothing changes
    pace: float = 1.0  # filled by the core: 1 computing, 0 waiting on the host for a CPU


class Eta(NamedTuple):
    """A live replica's end moved (mgst.core.progress): it now ends at model time ``at`` (inf: held).

    The core says so whenever a rate changes: staging over, a CPU share changed, a CPU freed for a
    replica waiting on its host. ``pace`` is the share of its machine's speed (at the machine's CPU
    share) it is given by the rules: 1 computing on its own CPU, 0 waiting or stalled. The simulator
    schedules the end; the mapper sends the pace to the puller when it changes.
    """

    replica: Any  # the activity's key: a replica's id in the core; a chain's key in the iterations model
    at: float
    pace: float


class Cancel(NamedTuple):
    """Stop a running replica; its machine becomes free (not asking)."""

    replica: int
    machine: int = -1  # filled by the core
    job_id: int = -1  # filled by the core


class Hold(NamedTuple):
    """Keep ``machine``'s request waiting.

    From a policy: move the machine to the back of the ready queue. From the core:
    the machine asked for work and got none for now.
    """

    machine: int


class SetTimer(NamedTuple):
    """Deliver TimerFired(key) at model time ``at``; replaces a timer with the same key."""

    key: Hashable
    at: float


class CancelTimer(NamedTuple):
    key: Hashable


class TimeOut(NamedTuple):
    """Give up on a running replica: it counts as timed out (T/O) and frees its slot.

    Nothing is killed: its result, if it still comes, is taken once.
    """

    replica: int


class SuspectDown(NamedTuple):
    """Treat the machine as down: its replicas are lost (late results still count once).

    It is back up at its next request for work.
    """

    machine: int


# Notices: no action needed from a driver, but they make its log complete.


class JobCompleted(NamedTuple):
    job: Job
    replica: int
    machine: int


class JobRequeued(NamedTuple):
    """A job lost its last running replica and went back to its queue."""

    job: Job
    replica: int
    machine: int
    reason: str


class ReplicaDiscarded(NamedTuple):
    """A replica that ran on after its job was done delivered: its result is recorded, not used (waste)."""

    replica: int
    machine: int
    job_id: int


class BagCompleted(NamedTuple):
    """The bag's last task completed."""

    bag: int


class ReplicaTimedOut(NamedTuple):
    """The core gave up on a replica after a policy's TimeOut."""

    replica: int
    machine: int
    job_id: int


class MachineSuspected(NamedTuple):
    """A policy's SuspectDown took the machine down."""

    machine: int


Decision = Assign | Cancel | Hold | SetTimer | CancelTimer | TimeOut | SuspectDown
Output = (
    Decision | Eta | JobCompleted | JobRequeued | BagCompleted | ReplicaTimedOut | MachineSuspected | ReplicaDiscarded
)
