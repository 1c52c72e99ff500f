"""Events the drivers feed into the scheduling core: what happened, never what to do.

Events are NamedTuples: immutable, and cheap to make in a simulator's inner loop.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from mgst.model import Availability, Bag, Job


class RunStart(NamedTuple):
    """The run begins: the policy sets itself up over the state the events so far have set up, and dispatches
    (Scheduler.start). Events before it only set up the initial state."""


class JobArrived(NamedTuple):
    job: Job


class BagArrived(NamedTuple):
    """A whole bag arrives: every task enters the bag's queue, then matching runs once."""

    bag: Bag


class MachineReady(NamedTuple):
    """Machine asks for work (the pull request). ``cpu_share`` is its current a_j, if known.

    ``slots`` is how many free slots it asks to fill (None: every slot it has free).
    """

    machine: int
    cpu_share: float | None = None
    slots: int | None = None


class MachineSilent(NamedTuple):
    """The driver has not heard from an up machine for its liveness window; it is not declared down.

    Its replicas stay live (they may be running, or lost with it): a policy's
    failure detector decides (``mgst.policies.timeouts.SilenceTimeouts``). It is
    offered no work until it is heard again.
    """

    machine: int


class MachineHeard(NamedTuple):
    """A silent machine spoke again."""

    machine: int


class ReplicaDone(NamedTuple):
    """A replica ran to completion.

    The machine is then free; with ``ready`` it also asks for work at once (a
    puller that piggybacks its next request on the result), as MachineReady would.
    ``computed`` is how long it computed (model time), if the driver measured it (the
    testbed: the puller's t5 - t4); None: the core takes result time - start of computing.
    """

    replica: int
    ready: bool = False
    computed: float | None = None


class ReplicaFailed(NamedTuple):
    """A replica ended without a result while its machine stayed up (crash, time-out)."""

    replica: int
    reason: str = "failed"


class ReplicaComputing(NamedTuple):
    """A replica finished staging (checkpoint, program or data transfer) and started computing."""

    replica: int


class ReplicaCheckpoint(NamedTuple):
    """A replica saved a checkpoint: ``progress`` is the fraction of the job's work done."""

    replica: int
    progress: float


class MachineDown(NamedTuple):
    """The machine failed or left; whatever it ran is lost."""

    machine: int


class MachineUp(NamedTuple):
    """The machine is back (or joined). It is free but not asking until MachineReady."""

    machine: int
    cpu_share: float | None = None


class CpuShareChanged(NamedTuple):
    """The machine's a_j changed: its replicas' completions move; 0 suspends them."""

    machine: int
    cpu_share: float


class MachineAvailability(NamedTuple):
    """The machine's availability changed while it is up: UP or RECLAIMED, at ``cpu_share`` (DOWN: MachineDown).

    Its replicas go on at the new share (0 suspends them). A RECLAIMED machine, or one at share 0, asks for no
    work: its request, if any, is withdrawn, and it asks again (MachineReady) once UP with a share.
    """

    machine: int
    state: Availability
    cpu_share: float


class TimerFired(NamedTuple):
    key: Hashable


Event = (
    RunStart
    | JobArrived
    | BagArrived
    | MachineReady
    | MachineSilent
    | MachineHeard
    | ReplicaDone
    | ReplicaFailed
    | ReplicaComputing
    | ReplicaCheckpoint
    | MachineDown
    | MachineUp
    | CpuShareChanged
    | MachineAvailability
    | TimerFired
)
