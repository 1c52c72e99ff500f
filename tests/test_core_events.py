"""The journal's form of the core's events (mgst.testbed.core_events): every event the mapper feeds round-trips
through the store's encoding to an equal typed event, and an older journal's method-name records read as the same
events."""

from __future__ import annotations

import msgpack
import pytest

from mgst.core.events import (
    BagArrived,
    CpuShareChanged,
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
from mgst.testbed.core_events import EVENTS, LEGACY, UnknownEvent, from_legacy, from_plain, to_plain

BAG = Bag(3, 1.5, (Job(7, 0, 1.5, 2.0, 3), Job(8, 1, 1.5, 0.5, 3)), (("user", "u1"), ("size", 2)))
EXAMPLES = [
    RunStart(), JobArrived(Job(1, 0, 0.25, 3.0)), BagArrived(BAG), MachineReady(2, 0.5, 3), MachineReady(0),
    ReplicaDone(4, True, 1.25), ReplicaFailed(5, "error: exit code 1"), ReplicaComputing(6),
    ReplicaCheckpoint(6, 0.5), CpuShareChanged(1, 0.0), MachineAvailability(1, Availability.RECLAIMED, 0.25),
    MachineUp(0, 1.0), MachineDown(3), TimerFired(("timeout", 9)), MachineSilent(2), MachineHeard(2),
]


def stored(value):
    """As the store gives it back (msgpack, tuples for arrays)."""
    return msgpack.unpackb(msgpack.packb(value, use_bin_type=True), raw=False, use_list=False, strict_map_key=False)


def test_every_event_kind_has_an_example():
    assert {type(e).__name__ for e in EXAMPLES} == set(EVENTS)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_an_event_round_trips_through_the_store(event):
    name, fields = stored(to_plain(event))
    back = from_plain(name, fields)
    assert back == event and type(back) is type(event)
    if type(event) is MachineAvailability:
        assert back.state is Availability.RECLAIMED


def test_an_older_journal_s_method_names_are_the_same_events():
    assert from_legacy("machine_ready", (2, 0.5, 3)) == MachineReady(2, 0.5, 3)
    assert from_legacy("job_arrived", ((1, 0, 0.25, 3.0, None),)) == JobArrived(Job(1, 0, 0.25, 3.0))
    assert from_legacy("start", ()) == RunStart()
    assert from_legacy("timer_fired", (("timeout", 9),)) == TimerFired(("timeout", 9))
    bag = (3, 1.5, ((7, 0, 1.5, 2.0, 3), (8, 1, 1.5, 0.5, 3)), (("user", "u1"), ("size", 2)))
    assert from_legacy("bag_arrived", (bag,)) == BagArrived(BAG)
    assert set(LEGACY.values()) == set(EVENTS.values())


def test_an_unknown_record_is_refused_by_name():
    with pytest.raises(UnknownEvent, match="'set_rate'"):
        from_legacy("set_rate", (1, 2.0))
    with pytest.raises(UnknownEvent, match="'Pwned'"):
        from_plain("Pwned", ())
