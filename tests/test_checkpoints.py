"""The mapper's checkpoints, machine by machine (mgst.testbed.checkpoints.MachineCheckpoints): recorded at once,
held within the gate, and recorded before the core inputs that could lose them."""

from __future__ import annotations

from types import SimpleNamespace

from mgst.core.events import MachineDown, ReplicaCheckpoint, ReplicaDone, TimerFired
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.testbed.checkpoints import RELEASE_CHECKPOINTS_BEFORE, MachineCheckpoints

# a checkpoint every 2 time units of 1 s: the gate is half that, 1 s
EXP = Experiment(name="cp", classes=(JobClass("1", 1.0),),
                 machines=(Machine("M0", (1.0,), 1.0, slots=2), Machine("M1", (1.0,), 1.0)),
                 policy=PolicySpec("fcfs"), simulation=SimulationSettings(checkpoint_interval=2.0))


class FakeCore:
    """Replicas by id: the machine each runs on and its recorded checkpoint (what MachineCheckpoints reads)."""

    def __init__(self, **replicas: int):
        self.replicas = {int(r[1:]): SimpleNamespace(machine=j, checkpoint=0.0) for r, j in replicas.items()}
        self.fed: list[tuple] = []

    def replica(self, rid: int):
        return self.replicas.get(rid)

    def feed(self, now: float, event) -> None:
        assert type(event) is ReplicaCheckpoint
        self.fed.append((now, *event))
        self.replicas[event.replica].checkpoint = event.progress


def checkpoints(core: FakeCore) -> MachineCheckpoints:
    return MachineCheckpoints(core, EXP, 1.0, core.feed)  # type: ignore[arg-type]


def test_one_within_the_gate_is_held_and_recorded_at_the_heartbeat_once_the_gate_has_passed():
    core = FakeCore(r1=0)
    cp = checkpoints(core)
    cp.offer(0, 1, 0.1, 10.0)
    cp.offer(0, 1, 0.2, 10.3)  # within 1 s: held
    cp.offer(0, 1, 0.3, 10.6)  # the latest is kept
    assert core.fed == [(10.0, 1, 0.1)] and cp.holding == {0}
    cp.record_due(0, 10.9)
    assert core.fed == [(10.0, 1, 0.1)]
    cp.record_due(0, 11.0)
    assert core.fed == [(10.0, 1, 0.1), (11.0, 1, 0.3)]


def test_a_held_checkpoint_is_recorded_before_its_replica_ends_and_only_its_own():
    core = FakeCore(r1=0, r2=0)
    cp = checkpoints(core)
    for rid in (1, 2):
        cp.offer(0, rid, 0.1, 10.0)
        cp.offer(0, rid, 0.5, 10.1)
    assert ReplicaDone in RELEASE_CHECKPOINTS_BEFORE
    cp.release(ReplicaDone(2), 10.2)
    assert core.fed[2:] == [(10.2, 2, 0.5)]  # replica 1's stays held
    cp.release(MachineDown(0), 10.3)
    assert core.fed[3:] == [(10.3, 1, 0.5)]


def test_a_timer_records_every_machine_s_held_checkpoints_and_forgets_who_held():
    core = FakeCore(r1=0, r2=1)
    cp = checkpoints(core)
    cp.offer(0, 1, 0.1, 10.0)
    cp.offer(0, 1, 0.4, 10.1)
    cp.offer(1, 2, 0.2, 10.0)
    cp.offer(1, 2, 0.6, 10.1)
    assert cp.holding == {0, 1}
    cp.release(TimerFired("a timer"), 10.2)
    assert sorted(core.fed[2:]) == [(10.2, 1, 0.4), (10.2, 2, 0.6)] and cp.holding == set()


def test_a_held_checkpoint_of_a_replica_no_longer_on_the_machine_or_no_better_is_not_recorded():
    core = FakeCore(r1=0, r2=0)
    cp = checkpoints(core)
    for rid in (1, 2):
        cp.offer(0, rid, 0.1, 10.0)
        cp.offer(0, rid, 0.5, 10.1)
    core.replicas[1].machine = 1  # (replica 1 now runs elsewhere)
    core.replicas[2].checkpoint = 0.5  # (replica 2 already has it)
    cp.release(TimerFired("a timer"), 10.2)
    assert core.fed == [(10.0, 1, 0.1), (10.0, 2, 0.1)]
