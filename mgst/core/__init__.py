"""The scheduling core: a pure state machine shared by the simulator and the mapper."""

from mgst.core.decisions import (
    Assign,
    BagCompleted,
    Cancel,
    CancelTimer,
    Decision,
    Hold,
    JobCompleted,
    JobRequeued,
    MachineSuspected,
    Output,
    ReplicaTimedOut,
    SetTimer,
    SuspectDown,
    TimeOut,
)
from mgst.core.events import (
    BagArrived,
    CpuShareChanged,
    Event,
    JobArrived,
    MachineDown,
    MachineReady,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaComputing,
    ReplicaDone,
    ReplicaFailed,
    TimerFired,
)
from mgst.core.scheduler import PolicyError, Scheduler
from mgst.core.state import (
    BagRecord,
    JobQueue,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)

__all__ = [
    "Assign", "BagArrived", "BagCompleted", "BagRecord", "Cancel", "CancelTimer", "CpuShareChanged",
    "Decision", "Event", "Hold", "JobArrived", "JobCompleted", "JobQueue", "JobRecord", "JobRequeued",
    "JobStatus", "MachineDown", "MachineReady", "MachineRecord", "MachineState", "MachineSuspected",
    "MachineUp", "Outcome", "Output", "PolicyError", "ReplicaCheckpoint", "ReplicaComputing", "ReplicaDone",
    "ReplicaFailed", "ReplicaRecord", "ReplicaTimedOut", "Scheduler", "SetTimer", "SuspectDown", "TimeOut",
    "TimerFired",
]
