"""Events the drivers feed into the scheduling core: what happened, never what to do."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from mgst.model import Job


@dataclass(frozen=True, slots=True)
class JobArrived:
    job: Job


@dataclass(frozen=True, slots=True)
class MachineReady:
    """Machine asks for work (the pull request). ``cpu_share`` is its current a_j, if known."""

    machine: int
    cpu_share: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaDone:
    """A replica ran to completion.

    The machine is then free; with ``ready`` it also asks for work at once (a
    puller that piggybacks its next request on the result), as MachineReady would.
    """

    replica: int
    ready: bool = False


@dataclass(frozen=True, slots=True)
class ReplicaFailed:
    """A replica ended without a result while its machine stayed up (crash, time-out)."""

    replica: int
    reason: str = "failed"


@dataclass(frozen=True, slots=True)
class ReplicaCheckpoint:
    """A replica saved a checkpoint: ``progress`` is the fraction of the job's work done."""

    replica: int
    progress: float


@dataclass(frozen=True, slots=True)
class MachineDown:
    """The machine failed or left; whatever it ran is lost."""

    machine: int


@dataclass(frozen=True, slots=True)
class MachineUp:
    """The machine is back (or joined). It is free but not asking until MachineReady."""

    machine: int
    cpu_share: float | None = None


@dataclass(frozen=True, slots=True)
class CpuShareChanged:
    machine: int
    cpu_share: float


@dataclass(frozen=True, slots=True)
class TimerFired:
    key: Hashable


Event = (
    JobArrived
    | MachineReady
    | ReplicaDone
    | ReplicaFailed
    | ReplicaCheckpoint
    | MachineDown
    | MachineUp
    | CpuShareChanged
    | TimerFired
)
