"""Per-replica time-outs at k times the expected time (MGST's rule), as pieces any policy can hold."""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable

from mgst.core.decisions import CancelTimer, Decision, SetTimer, SuspectDown, TimeOut
from mgst.core.hooks import NO_DECISIONS
from mgst.core.state import MachineRecord, ReplicaRecord
from mgst.core.view import View

# The first element of every timer key this piece sets: ("timeout", replica id). Keys are a
# string and an int, which the mapper's journal can store.
KEY = "timeout"

Expected = Callable[[View, ReplicaRecord], float]
Decisions = Iterable[Decision]
NOTHING = NO_DECISIONS


def nominal_expected(view: View, replica: ReplicaRecord) -> float:
    """The replica's expected run time when it starts: its class's mean size times the work left,
    over the machine's nominal rate mu'_ij times its current CPU share (inf if that is 0).

    Staging time is not included; pass another ``expected`` to add it.
    """
    machine = view.machines[replica.machine]
    c = replica.job.job.job_class
    rate = machine.rates[c] * machine.cpu_share
    if rate <= 0.0:
        return math.inf
    return view.classes[c].granularity * (1.0 - replica.progress) / rate


class ReplicaTimeouts:
    """Give up on a replica still running ``factor`` times its expected time after it was sent.

    Not a policy: a policy holds one and forwards three hooks to it::

        def on_replica_start(self, view, replica):
            return self.timeouts.on_replica_start(view, replica)

        def on_replica_end(self, view, replica):
            return self.timeouts.on_replica_end(view, replica)

        def on_timer(self, view, key):
            return self.timeouts.on_timer(view, key)   # NOTHING for a key it does not own

    - On a replica's start it arms ``SetTimer(("timeout", replica.id), at)``,
      ``at = replica.sent + factor * expected(view, replica)``; ``expected``
      defaults to :func:`nominal_expected` (MGST's k x expected time). No timer
      when the expected time is infinite (the machine's share is 0 when it starts).
    - When the timer fires and the replica is still live, it yields
      ``TimeOut(replica.id)``: the core counts it as timed out (T/O), frees its
      slot, requeues the task if it was its last replica, and still takes its
      result once if it comes. With ``suspect`` it also yields
      ``SuspectDown(machine)``: the core treats the machine as down until it asks
      for work again.
    - On a replica's end (any outcome) it cancels the replica's timer, if set.
    """

    def __init__(self, factor: float, *, suspect: bool = False, expected: Expected | None = None):
        if not (factor > 0.0 and math.isfinite(factor)):
            raise ValueError(f"factor: must be a positive number, got {factor}")
        self.factor = factor
        self.suspect = suspect
        self.expected: Expected = expected if expected is not None else nominal_expected

    @staticmethod
    def key(replica_id: int) -> tuple[str, int]:
        """The timer key of a replica."""
        return (KEY, replica_id)

    @staticmethod
    def owns(key: Hashable) -> bool:
        """Whether a timer key is one of this piece's."""
        return type(key) is tuple and len(key) == 2 and key[0] == KEY

    def on_replica_start(self, view: View, replica: ReplicaRecord) -> Decisions:
        wait = self.factor * self.expected(view, replica)
        if not wait < math.inf:
            return NOTHING
        return (SetTimer((KEY, replica.id), replica.sent + wait),)

    def on_replica_end(self, view: View, replica: ReplicaRecord) -> Decisions:
        key = (KEY, replica.id)
        return (CancelTimer(key),) if key in view.timers else NOTHING

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if not self.owns(key):
            return NOTHING
        replica = view.replica(key[1])  # type: ignore[index]
        if replica is None:  # ended meanwhile (its timer is normally cancelled then)
            return NOTHING
        if self.suspect:
            return (TimeOut(replica.id), SuspectDown(replica.machine))
        return (TimeOut(replica.id),)


# The first element of every timer key SilenceTimeouts sets: ("silence", replica id).
SILENCE_KEY = "silence"


class SilenceTimeouts:
    """MGST's per-job time-out as the failure detector it was there, for machines that fall silent.

    The paper's mapper learnt of a failure only when a job outlived ``factor`` (k)
    times its expected time: the job was then resubmitted and the machine taken
    for down. A machine that still answers is merely running a long job (sizes are
    exponential: one job in e^k outlasts k means), so the rule here acts only on a
    machine the driver reports silent (``MachineSilent``):

    - when a machine falls silent, each of its replicas gets a timer at
      ``max(now, replica.sent + factor * expected)``;
    - when one fires and the machine is still silent, the replica is given up on
      (``TimeOut``: T/O, its job is resubmitted; a late result still counts once)
      and the machine is suspected down (``SuspectDown``: its other replicas are
      lost with it); it is back with its next request;
    - when the machine is heard again, its timers are cancelled.

    Every policy holds one in ``silence_timeouts`` when the experiment detects
    failures by time-out (``[testbed] detection = "timeout"``); the base Policy's
    ``on_machine_silent``, ``on_machine_heard`` and ``on_timer`` forward to it.
    It costs nothing while no machine is silent.
    """

    def __init__(self, factor: float, *, expected: Expected | None = None):
        if not (factor > 0.0 and math.isfinite(factor)):
            raise ValueError(f"factor: must be a positive number, got {factor}")
        self.factor = factor
        self.expected: Expected = expected if expected is not None else nominal_expected

    @staticmethod
    def owns(key: Hashable) -> bool:
        """Whether a timer key is one of this piece's."""
        return type(key) is tuple and len(key) == 2 and key[0] == SILENCE_KEY

    def on_machine_silent(self, view: View, machine: MachineRecord) -> Decisions:
        timers = []
        for r in machine.replicas.values():
            wait = self.factor * self.expected(view, r)
            if wait < math.inf:
                timers.append(SetTimer((SILENCE_KEY, r.id), max(view.now, r.sent + wait)))
        return timers

    def on_machine_heard(self, view: View, machine: MachineRecord) -> Decisions:
        keys = [(SILENCE_KEY, rid) for rid in machine.replicas]
        return [CancelTimer(k) for k in keys if k in view.timers]

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if not self.owns(key):
            return NOTHING
        replica = view.replica(key[1])  # type: ignore[index]
        if replica is None or not view.machines[replica.machine].silent:
            return NOTHING  # ended meanwhile, or its machine was lost or heard from
        return (TimeOut(replica.id), SuspectDown(replica.machine))
