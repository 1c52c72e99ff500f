"""The scheduling core: a pure state machine shared by the simulator and the mapper."""

from mgst.core.decisions import (
    Assign,
    BagCompleted,
    Cancel,
    CancelTimer,
    Decision,
    Eta,
    Hold,
    InputError,
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
    MachineAvailability,
    MachineDown,
    MachineHeard,
    MachineReady,
    MachineSilent,
    MachineUp,
    ReplicaCheckpoint,
    ReplicaComputing,
    ReplicaDone,
    ReplicaFailed,
    RunStart,
    TimerFired,
)
from mgst.core.hooks import HOOKS, PolicyError, PolicyHooks
from mgst.core.scheduler import Scheduler
from mgst.core.state import (
    COMPUTING,
    STAGING,
    WAITING,
    BagRecord,
    JobQueue,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)
from mgst.core.stats import MachineStats
from mgst.core.view import View

__all__ = [
    "COMPUTING", "HOOKS", "STAGING", "WAITING", "Assign", "BagArrived", "BagCompleted", "BagRecord", "Cancel",
    "CancelTimer", "CpuShareChanged", "Decision", "Eta", "Event", "Hold", "InputError", "JobArrived", "JobCompleted",
    "JobQueue", "JobRecord", "JobRequeued", "JobStatus", "MachineAvailability", "MachineDown", "MachineHeard",
    "MachineReady", "MachineRecord", "MachineSilent", "MachineState", "MachineStats", "MachineSuspected", "MachineUp",
    "Outcome", "Output", "PolicyError", "PolicyHooks", "ReplicaCheckpoint", "ReplicaComputing", "ReplicaDone",
    "ReplicaFailed", "ReplicaRecord", "ReplicaTimedOut", "RunStart", "Scheduler", "SetTimer", "SuspectDown", "TimeOut",
    "TimerFired", "View",
]
