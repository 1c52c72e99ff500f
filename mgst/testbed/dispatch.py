"""What the mapper does with the core's decisions: jobs sent, replicas cancelled, outcomes journalled, timers set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mgst.core.decisions import (
    Assign,
    Cancel,
    Eta,
    JobCompleted,
    JobRequeued,
    MachineSuspected,
    ReplicaDiscarded,
    ReplicaTimedOut,
    SetTimer,
)
from mgst.core.events import ReplicaComputing
from mgst.model import Experiment
from mgst.staging import StagingSampler
from mgst.testbed.connection import Connection
from mgst.testbed.journal import Journal
from mgst.testbed.run_clock import RunClock, WallTimers
from mgst.wire import protocol as P


class Dispatcher:
    """Carries out the core's decisions, on the state it shares with the mapper: the journal (which records
    each first), the pullers' connections, the run's clock and its timers.

    ``send(identity, msg, machine)`` queues a message (it leaves once the journal has committed);
    ``feed(now, event)`` gives the core an input as the mapper does. A job is sent with its
    length on its machine (at unit share), its staging time (drawn from ``staging``, when the core
    asks for it), how long its result is held before it is reported (drawn from ``hold``: a grid's
    returned-result delay) and, with the command executor, its class's command.
    """

    def __init__(self, experiment: Experiment, journal: Journal, conns: list[Connection], clock: RunClock,
                 timers: WallTimers, *, send: Callable[[bytes | None, Any, int | None], None],
                 feed: Callable[..., None], executor: str, staging: StagingSampler | None,
                 hold: Callable[[int], float] | None = None):
        self.experiment = experiment
        self.journal = journal
        self.conns = conns
        self.clock = clock
        self.time_unit = clock.time_unit
        self.timers = timers
        self.send = send
        self.feed = feed
        self.executor = executor
        self.staging = staging
        # the returned-result delay of a job on machine j, drawn as it is sent (None: results come back at once)
        self.hold = hold

    def carry_out(self, outputs: list, now: float) -> None:
        """Carry out ``outputs``, the core's decisions on an input at wall time ``now``."""
        for d in outputs:
            t = type(d)
            if t is Assign:
                self._dispatch(d, now)
            elif t is Eta:  # the core moved a replica's end: its puller keeps the time, and needs only its pace
                self._pace(d.replica, d.pace)
            elif t is Cancel:
                self.journal.end("cancelled", d.replica)
                conn = self.conns[d.machine]
                if conn.identity is not None:
                    self.send(conn.identity, P.CancelMsg(d.replica), d.machine)
            elif t is JobCompleted:
                self.journal.completed(d.job.id, d.replica, d.machine)
                self.journal.end("done", d.replica)
            elif t is ReplicaDiscarded:  # a loser that ran on delivered: its result is recorded, not used
                self.journal.end("discarded", d.replica)
            elif t is JobRequeued:  # (its replica ended first: the requeue's cause is how, "lost" if not said)
                self.journal.end("lost", d.replica)
                self.journal.requeued(d.job.id, d.replica)
            elif t is SetTimer:
                wall = (self.clock.t0 or now) + d.at * self.time_unit
                self.timers.push(wall, d.key)
            elif t is ReplicaTimedOut:  # a policy gave up on it: nothing to kill, a late result still counts
                self.journal.timed_out(d.job_id)
                self.journal.end("timeout", d.replica)
            elif t is MachineSuspected:  # a policy took it down; it is back at its next request
                self.journal.machine_suspected(d.machine, now)

    def _dispatch(self, d: Assign, now: float) -> None:
        j = d.machine
        job = d.job
        m = self.experiment.machines[j]
        rate = m.rates[job.job_class]
        conn = self.conns[j]
        t1, t2 = conn.pending
        conn.pending = (None, None)
        self.journal.sent(d.replica, job.id, j, t1, t2, now)
        key, argv = "", ()
        if self.executor == "command":
            command = self.experiment.testbed.commands[job.job_class]
            key, argv = (command, ()) if isinstance(command, str) else ("", tuple(command))
        stage = 0.0
        if d.staging and self.staging is not None:
            stage = self.staging.duration(d.progress > 0.0)
            if stage <= 0.0:  # nothing to transfer after all: it computes from the start
                self.feed(now, ReplicaComputing(d.replica))
        hold = self.hold(j) if self.hold is not None else 0.0
        self.send(conn.identity, P.JobMsg(job.id, d.replica, job.job_class, job.size, job.size / rate,
                                          d.progress, stage, key, argv, d.pace, hold), j)

    def _pace(self, replica: int, pace: float) -> None:
        """Send the replica's pace to its puller. Every Eta's: a share change's too (the puller ignores a pace it
        has), so that nothing here must remember what a puller was told, across a resume either (the registration
        sends each held replica's pace again)."""
        r = self.journal.replicas.get(replica)
        if r is None:
            return
        conn = self.conns[r.machine]
        if conn.identity is not None:
            self.send(conn.identity, P.Pace(replica, pace), r.machine)
