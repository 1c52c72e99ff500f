"""The scheduling core: a pure state machine shared by the simulator and the mapper."""

from mgst.core.decisions import (
    Assign,
    Cancel,
    CancelTimer,
    Decision,
    Hold,
    JobCompleted,
    JobRequeued,
    Output,
    SetTimer,
)
from mgst.core.events import (
    CpuShareChanged,
    Event,
    JobArrived,
    MachineDown,
    MachineReady,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaDone,
    ReplicaFailed,
    TimerFired,
)
from mgst.core.scheduler import PolicyError, Scheduler
from mgst.core.state import JobQueue, JobRecord, JobStatus, MachineRecord, MachineState, ReplicaRecord

__all__ = [
    "Assign", "Cancel", "CancelTimer", "CpuShareChanged", "Decision", "Event", "Hold",
    "JobArrived", "JobCompleted", "JobQueue", "JobRecord", "JobRequeued", "JobStatus",
    "MachineDown", "MachineReady", "MachineRecord", "MachineState", "MachineUp", "Output",
    "PolicyError", "ReplicaCheckpoint", "ReplicaDone", "ReplicaFailed", "ReplicaRecord",
    "Scheduler", "SetTimer", "TimerFired",
]
