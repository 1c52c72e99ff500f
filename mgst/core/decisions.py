"""Decisions the core returns to drivers, and the notices it adds for their logs.

Policies yield the same decision classes; fields marked "filled by the core" are
ignored on the way in and set on the way out.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from mgst.model import Job


class Assign(NamedTuple):
    """Start a replica of ``job`` on ``machine``.

    A policy yields ``Assign(job, machine)``; the core answers with the replica id
    and the checkpointed fraction of work the replica resumes from.
    """

    job: Job
    machine: int
    replica: int = -1  # filled by the core
    progress: float = 0.0  # filled by the core: fraction of work already done


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


Decision = Assign | Cancel | Hold | SetTimer | CancelTimer
Output = Decision | JobCompleted | JobRequeued
