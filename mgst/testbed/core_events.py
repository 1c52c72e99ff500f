"""The core's events as the journal stores them: typed events to plain values and back, and older journals' form.

The mapper feeds the core through one entry point, ``Scheduler.handle(now, event)``, and records each event
first: its type's name, the model time, and its fields as plain values (a job as its fields, a bag as its id,
time, tasks and attributes, an availability state as its number). A replay decodes each into the same typed
event and hands it to the same entry point, so the journal names no method of the core. Journals written before
(a method name and its arguments) are read through :data:`LEGACY`, a table of the same events.
"""

from __future__ import annotations

import typing
from typing import Any, Final

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
from mgst.model import Availability, Bag, Job

# Every event of the core (its Event union), by its type's name: the store's record.
EVENTS: Final[dict[str, type]] = {cls.__name__: cls for cls in typing.get_args(Event)}
# Journals written before events were typed: the core's method name -> the event it took (same arguments, in order).
LEGACY: Final[dict[str, type]] = {
    "start": RunStart, "job_arrived": JobArrived, "bag_arrived": BagArrived, "machine_ready": MachineReady,
    "replica_done": ReplicaDone, "replica_failed": ReplicaFailed, "replica_computing": ReplicaComputing,
    "replica_checkpoint": ReplicaCheckpoint, "cpu_share_changed": CpuShareChanged,
    "machine_availability": MachineAvailability, "machine_up": MachineUp, "machine_down": MachineDown,
    "timer_fired": TimerFired, "machine_silent": MachineSilent, "machine_heard": MachineHeard,
}


class UnknownEvent(ValueError):
    """A stored event whose type (or old method name) no version of the core takes."""


def to_plain(event: Event) -> tuple[str, list[Any]]:
    """The event's type name and its fields as plain values, for the store."""
    t = type(event)
    if t is JobArrived:
        return "JobArrived", [list(event.job)]  # type: ignore[union-attr]
    if t is BagArrived:
        bag: Bag = event.bag  # type: ignore[union-attr]
        return "BagArrived", [[bag.id, bag.submitted, [list(x) for x in bag.tasks], [list(a) for a in bag.attributes]]]
    if t is MachineAvailability:
        return "MachineAvailability", [event.machine, int(event.state), event.cpu_share]  # type: ignore[union-attr]
    return t.__name__, list(event)


def from_plain(name: str, fields: list[Any] | tuple[Any, ...]) -> Event:
    """The typed event a store's record names; UnknownEvent if no event has that name."""
    cls = EVENTS.get(name)
    if cls is None:
        raise UnknownEvent(f"unknown core event {name!r}")
    return _build(cls, fields)


def from_legacy(method: str, args: list[Any] | tuple[Any, ...]) -> Event:
    """The typed event of an older journal's record (the core's method name and its arguments)."""
    cls = LEGACY.get(method)
    if cls is None:
        raise UnknownEvent(f"unknown core input {method!r}")
    return _build(cls, args)


def _build(cls: type, fields: list[Any] | tuple[Any, ...]) -> Event:
    if cls is JobArrived:
        (job,) = fields
        return JobArrived(job if isinstance(job, Job) else Job(*job))
    if cls is BagArrived:
        (arg,) = fields
        if isinstance(arg, Bag):
            return BagArrived(arg)
        bid, submitted, tasks, attributes = arg
        return BagArrived(Bag(bid, submitted, tuple(Job(*t) for t in tasks), tuple((k, v) for k, v in attributes)))
    if cls is MachineAvailability:
        machine, state, share = fields
        return MachineAvailability(machine, Availability(state), share)
    if cls is TimerFired:
        (key,) = fields
        return TimerFired(tuple(key) if isinstance(key, list) else key)
    return cls(*fields)  # type: ignore[no-any-return]


__all__ = ["EVENTS", "LEGACY", "UnknownEvent", "from_legacy", "from_plain", "to_plain"]
