"""Where and how replicas run in the scheduling core: machine slots, work tracked through CPU-share
changes (0 suspends), staging before computing, machine attributes.

A real Scheduler driven by events; every expected value is worked out by hand in the comments
(work, times and rates are exact in binary floating point; fractions of a size of 10 are compared
with pytest.approx).
"""

from __future__ import annotations

import math

import pytest
from helpers import plain

from mgst.core import (
    Assign,
    Cancel,
    CpuShareChanged,
    Eta,
    Hold,
    JobCompleted,
    JobRecord,
    JobRequeued,
    MachineRecord,
    MachineState,
    MachineUp,
    ReplicaComputing,
    Scheduler,
)
from mgst.model import Job, JobClass, Machine, StagingModel
from mgst.policies.base import Policy


class Oldest(Policy):
    """The oldest queued job (by submission, then id) the machine can run."""
    hooks = frozenset({"choose"})

    name = "test-oldest"

    def __init__(self, resume: bool = True) -> None:
        super().__init__()
        self.resume_from_checkpoint = resume

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        waiting = [r for q in view.queues.values() for r in q if machine.rates[r.job_class] > 0]
        return min(waiting, key=lambda r: (r.submitted, r.id)) if waiting else None


class GroupOnly(Oldest):
    """Runs jobs only on machines of group 3 (an attribute from the experiment file)."""
    hooks = frozenset({"choose"})

    def choose(self, view: Scheduler, machine: MachineRecord) -> JobRecord | None:
        return super().choose(view, machine) if machine.attributes.get("group") == 3 else None


def make(*machines: Machine, n_classes: int = 1, policy: Policy | None = None, **kw) -> Scheduler:
    """Machines all down; started at t=0."""
    core = Scheduler([JobClass(f"c{i}", 0.0) for i in range(n_classes)], machines, policy or Oldest(), **kw, check=True)
    core.start(0.0)
    return core


def jobs(*ids: int, t: float = 0.0, size: float = 1.0) -> list[Job]:
    return [Job(i, 0, t, size) for i in ids]


# ---------------------------------------------------------------- slots


def test_a_machine_with_three_slots_never_runs_four_replicas():
    core = make(Machine("M0", (1.0,), slots=3))
    j = jobs(1, 2, 3, 4, 5)
    for x in j:
        core.job_arrived(0.0, x)
    m = core.machines[0]

    assert plain(core.machine_ready(1.0, 0)) == [Assign(j[0], 0, 1), Assign(j[1], 0, 2), Assign(j[2], 0, 3)]
    assert len(m.replicas) == 3 and m.asking == 0 and m.state is MachineState.BUSY and m.free_slots == 0

    stale = core.stale_events
    assert core.machine_ready(2.0, 0) == []  # all it has free: nothing
    assert core.stale_events == stale
    assert core.machine_ready(2.0, 0, slots=1) == []  # more than it has free: clamped to 0, stale
    assert core.stale_events == stale + 1
    assert len(m.replicas) == 3 and m.asking == 0 and not core.is_ready(0)

    # a result with a request asks for the slot it frees, and only that one
    assert plain(core.replica_done(3.0, 1, ready=True)) == [JobCompleted(j[0], 1, 0), Assign(j[3], 0, 4)]
    assert len(m.replicas) == 3 and m.asking == 0
    assert core.machine_ready(4.0, 0, slots=2) == []
    assert core.stale_events == stale + 2
    assert sorted(m.replicas) == [2, 3, 4]
    core.check_invariants()


def test_machine_ready_asks_for_the_slots_it_names():
    core = make(Machine("M0", (1.0,), slots=3))
    j = jobs(1, 2, 3, 4, 5)
    for x in j:
        core.job_arrived(0.0, x)
    m = core.machines[0]
    assert plain(core.machine_ready(1.0, 0, slots=2)) == [Assign(j[0], 0, 1), Assign(j[1], 0, 2)]
    assert m.asking == 0 and m.state is MachineState.BUSY and m.free_slots == 1
    stale = core.stale_events
    assert plain(core.machine_ready(2.0, 0, slots=3)) == [Assign(j[2], 0, 3)]  # clamped to its one free slot
    assert core.stale_events == stale + 1
    assert m.free_slots == 0
    core.check_invariants()


def test_free_slots_left_over_keep_asking_and_a_result_asks_for_one_more():
    core = make(Machine("M0", (1.0,), slots=3))
    j1, j2 = jobs(1, 2)
    core.job_arrived(0.0, j1)
    m = core.machines[0]
    assert plain(core.machine_ready(1.0, 0)) == [Assign(j1, 0, 1), Hold(0)]  # three asked, one job
    assert m.asking == 2 and m.state is MachineState.READY
    assert plain(core.job_arrived(2.0, j2)) == [Assign(j2, 0, 2)]
    assert m.asking == 1
    assert core.replica_done(3.0, 1, ready=True) == [JobCompleted(j1, 1, 0), Hold(0)]
    assert m.asking == 2  # one more
    assert core.replica_done(4.0, 2) == [JobCompleted(j2, 2, 0)]  # without a request: asking unchanged
    assert m.asking == 2 and m.free_slots == 3 and m.state is MachineState.READY
    core.check_invariants()


def test_machine_ready_for_zero_slots_withdraws_its_request():
    core = make(Machine("M0", (1.0,), slots=3))
    core.machine_ready(0.0, 0)
    assert core.machines[0].asking == 3
    assert core.machine_ready(1.0, 0, slots=0) == []
    m = core.machines[0]
    assert m.asking == 0 and m.state is MachineState.FREE and not core.is_ready(0)
    core.check_invariants()


def test_a_machine_with_several_slots_asking_while_busy_keeps_its_replicas():
    core = make(Machine("M0", (1.0,), slots=2))
    j1, j2 = jobs(1, 2)
    core.job_arrived(0.0, j1)
    core.machine_ready(0.0, 0, slots=1)
    assert plain(core.job_arrived(1.0, j2)) == []
    assert plain(core.machine_ready(2.0, 0)) == [Assign(j2, 0, 2)]  # its other slot; replica 1 still runs
    assert sorted(core.machines[0].replicas) == [1, 2]
    core.check_invariants()


def test_machine_down_loses_every_replica_it_runs():
    core = make(Machine("M0", (1.0,), slots=3))
    j = jobs(1, 2, 3, 4)
    for x in j:
        core.job_arrived(0.0, x)
    core.machine_ready(1.0, 0)
    out = core.machine_down(2.0, 0)
    assert out == [JobRequeued(j[0], 1, 0, "machine down"), JobRequeued(j[1], 2, 0, "machine down"),
                   JobRequeued(j[2], 3, 0, "machine down")]
    m = core.machines[0]
    assert not m.replicas and m.state is MachineState.DOWN and m.asking == 0
    assert [r.id for r in core.queue(0)] == [1, 2, 3, 4]
    assert m.stats.lost == 3 and m.stats.failures == 1
    core.check_invariants()


def test_request_clamped_to_nothing_while_another_machine_waits_is_stale_only():
    # M1 cannot run class 0: it asks, and is held, while a job waits
    core = make(Machine("M0", (1.0,), slots=3), Machine("M1", (0.0,)))
    j = jobs(1, 2, 3, 4)
    for x in j:
        core.job_arrived(0.0, x)
    core.machine_ready(1.0, 0)  # M0 takes jobs 1-3
    assert core.machine_ready(1.0, 1) == [Hold(1)]
    stale = core.stale_events
    assert core.machine_ready(2.0, 0, slots=1) == []
    assert core.stale_events == stale + 1
    assert len(core.machines[0].replicas) == 3


def test_late_result_with_a_request_from_a_machine_with_no_free_slot():
    core = make(Machine("M0", (1.0,)), Machine("M1", (0.0,)), Machine("M2", (1.0,)))
    j1, j2, j3 = jobs(1, 2, 3, t=1.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)  # held: it cannot run class 0
    for x in (j1, j2, j3):
        core.job_arrived(1.0, x)  # j1 on M0 (replica 1)
    core.machine_down(2.0, 0)  # replica 1 given up on
    assert plain(core.machine_ready(3.0, 2)) == [Assign(j1, 2, 2)]
    assert plain(core.machine_ready(4.0, 0)) == [Assign(j2, 0, 3)]  # M0's only slot
    # M0 delivers replica 1 after all, and asks: it has no free slot, j3 stays queued
    assert core.replica_done(5.0, 1, ready=True) == [Cancel(2, 2, 1), JobCompleted(j1, 1, 0)]
    assert core.machines[0].asking == 0 and [r.id for r in core.queue(0)] == [3]
    core.check_invariants()


# ---------------------------------------------------------------- work and CPU share


def test_share_changes_move_the_completion_exactly_and_zero_suspends():
    core = make(Machine("M0", (2.0,)))
    core.job_arrived(0.0, Job(1, 0, 0.0, 10.0))
    core.machine_ready(0.0, 0)  # rate 2 x share 1
    r = core.replica(1)
    assert (r.rate, r.remaining(0.0), r.eta(0.0)) == (2.0, 10.0, 5.0)
    assert r.remaining(1.0) == 8.0 and r.progress_at(1.0) == pytest.approx(0.2)

    assert core.cpu_share_changed(2.0, 0, 0.5) == [Eta(1, 8.0, 1.0)]  # 6 left at t=2, now at rate 1: done at 8
    assert (r.remaining(2.0), r.rate, r.eta(2.0)) == (6.0, 1.0, 8.0)
    assert r.progress_at(2.0) == pytest.approx(0.4) and r.progress_at(3.0) == 0.5

    core.cpu_share_changed(4.0, 0, 0.0)  # 4 left at t=4: suspended
    assert (r.remaining(4.0), r.rate, r.suspended) == (4.0, 0.0, True)
    assert r.eta(4.0) == math.inf and r.eta(9.0) == math.inf
    assert r.remaining(9.0) == 4.0 and r.progress_at(9.0) == pytest.approx(0.6)

    core.handle(10.0, CpuShareChanged(0, 1.0))  # resumes with exactly its 4 left, at rate 2
    assert (r.remaining(10.0), r.rate, r.eta(10.0), r.suspended) == (4.0, 2.0, 12.0, False)
    assert r.remaining(11.0) == 2.0 and r.progress_at(11.0) == pytest.approx(0.8)

    assert core.replica_done(12.0, 1) == [JobCompleted(Job(1, 0, 0.0, 10.0), 1, 0)]
    assert r.remaining(15.0) == 0.0 and r.progress_at(15.0) == 1.0  # frozen at its end
    assert r.eta(15.0) == math.inf  # not live
    core.check_invariants()


def test_a_share_change_moves_every_replica_on_the_machine():
    core = make(Machine("M0", (1.0, 4.0), slots=2), n_classes=2)
    core.job_arrived(0.0, Job(1, 0, 0.0, 6.0))
    core.job_arrived(0.0, Job(2, 1, 0.0, 8.0))
    core.machine_ready(0.0, 0)
    r1, r2 = core.replica(1), core.replica(2)
    assert (r1.eta(0.0), r2.eta(0.0)) == (6.0, 2.0)
    core.handle(1.0, CpuShareChanged(0, 0.5))  # r1: 5 left at 0.5; r2: 4 left at 2
    assert (r1.remaining(1.0), r1.eta(1.0), r2.remaining(1.0), r2.eta(1.0)) == (5.0, 11.0, 4.0, 3.0)
    core.handle(2.0, MachineUp(0, 0.25))  # the share a MachineUp reports counts too: 4.5 at 0.25, 2 at 1
    assert (r1.remaining(2.0), r1.eta(2.0), r2.remaining(2.0), r2.eta(2.0)) == (4.5, 20.0, 2.0, 4.0)
    assert core.machines[0].cpu_share == 0.25
    core.check_invariants()


def test_share_reported_with_a_request_sets_the_rate_of_what_it_gets():
    core = make(Machine("M0", (1.0,)))
    core.job_arrived(0.0, Job(1, 0, 0.0, 3.0))
    assert core.machine_ready(1.0, 0, cpu_share=0.0) == []  # no CPU to give: it asks for nothing
    assert core.replica(1) is None and not core.is_ready(0) and core.machines[0].state is MachineState.FREE
    core.machine_ready(5.0, 0, cpu_share=0.5)  # a share again: it asks, and computes 3 at 0.5
    r = core.replica(1)
    assert (r.rate, r.eta(5.0)) == (0.5, 5.0 + 3.0 / 0.5)
    core.cpu_share_changed(6.0, 0, 0.0)  # suspended, with 2.5 left
    assert (r.rate, r.eta(6.0), r.suspended, r.remaining(9.0)) == (0.0, math.inf, True, 2.5)
    core.check_invariants()


def test_nominal_availability_is_the_first_share():
    core = make(Machine("M0", (2.0,), availability=0.5))
    core.job_arrived(0.0, Job(1, 0, 0.0, 10.0))
    core.machine_ready(0.0, 0)
    assert core.replica(1).rate == 1.0 and core.replica(1).eta(0.0) == 10.0


def test_a_replica_resuming_from_a_checkpoint_has_only_the_rest_to_do():
    core = make(Machine("M0", (2.0,)))
    j1 = Job(1, 0, 0.0, 10.0)
    core.job_arrived(0.0, j1)
    core.machine_ready(0.0, 0)
    core.replica_checkpoint(1.0, 1, 0.25)
    core.machine_down(2.0, 0)
    assert plain(core.machine_ready(3.0, 0)) == [Assign(j1, 0, 2, 0.25, False)]  # no staging model: computes at once
    r = core.replica(2)
    assert (r.remaining(3.0), r.progress_at(3.0), r.eta(3.0)) == (7.5, 0.25, 3.0 + 7.5 / 2.0)


# ---------------------------------------------------------------- staging


def _resumed(core: Scheduler, j1: Job) -> list:
    """Replica 1 checkpoints 0.25 and is lost; the outputs of the request that starts replica 2 at t=3."""
    core.job_arrived(0.0, j1)
    core.machine_ready(0.0, 0)
    core.replica_checkpoint(1.0, 1, 0.25)
    core.machine_down(2.0, 0)
    return core.machine_ready(3.0, 0)


def test_replica_resuming_from_a_checkpoint_stages_until_it_computes():
    core = make(Machine("M0", (2.0,)), staging=StagingModel(resume=(240.0, 720.0)))
    j1 = Job(1, 0, 0.0, 10.0)
    assert plain(core.job_arrived(0.0, j1)) == []
    assert plain(core.machine_ready(0.0, 0)) == [Assign(j1, 0, 1, 0.0, False)]  # nothing to fetch
    assert core.replica(1).phase == "computing" and core.replica(1).eta(0.0) == 5.0
    core.replica_checkpoint(1.0, 1, 0.25)
    core.machine_down(2.0, 0)

    assert plain(core.machine_ready(3.0, 0)) == [Assign(j1, 0, 2, 0.25, True)]
    r = core.replica(2)
    assert (r.phase, r.rate, r.eta(3.0), r.suspended) == ("staging", 0.0, math.inf, False)
    assert r.remaining(100.0) == 7.5 and r.progress_at(100.0) == 0.25  # no work while staging
    core.cpu_share_changed(50.0, 0, 0.5)  # a share change does not end staging
    assert (r.phase, r.rate, r.eta(50.0), r.remaining(60.0)) == ("staging", 0.0, math.inf, 7.5)

    assert core.handle(300.0, ReplicaComputing(2)) == [Eta(2, 307.5, 1.0)]  # its 7.5 left at rate 1
    assert (r.phase, r.rate) == ("computing", 1.0)  # rate 2 at the current share 0.5
    assert r.eta(300.0) == 307.5 and r.remaining(301.5) == 6.0 and r.progress_at(301.5) == pytest.approx(0.4)
    stale = core.stale_events
    assert core.replica_computing(301.0, 2) == []  # again: nothing moves
    assert r.eta(301.0) == 307.5 and core.stale_events == stale
    assert core.replica_done(307.5, 2) == [JobCompleted(j1, 2, 0)]
    core.check_invariants()


def test_without_a_staging_model_a_resumed_replica_does_not_stage():
    core = make(Machine("M0", (2.0,)))
    assert plain(_resumed(core, Job(1, 0, 0.0, 10.0))) == [Assign(Job(1, 0, 0.0, 10.0), 0, 2, 0.25, False)]
    assert core.replica(2).eta(3.0) == 6.75


def test_a_policy_that_does_not_resume_does_not_stage_for_a_checkpoint():
    core = make(Machine("M0", (2.0,)), policy=Oldest(resume=False), staging=StagingModel(resume=(240.0, 720.0)))
    assert plain(_resumed(core, Job(1, 0, 0.0, 10.0))) == [Assign(Job(1, 0, 0.0, 10.0), 0, 2, 0.0, False)]
    assert core.replica(2).eta(3.0) == 8.0


def test_start_staging_stages_every_replica():
    core = make(Machine("M0", (2.0,)), staging=StagingModel(start=(1.0, 2.0)))
    j1 = Job(1, 0, 0.0, 10.0)
    core.job_arrived(0.0, j1)
    assert plain(core.machine_ready(0.0, 0)) == [Assign(j1, 0, 1, 0.0, True)]
    r = core.replica(1)
    assert r.phase == "staging" and r.eta(1.0) == math.inf
    core.replica_computing(1.5, 1)
    assert r.eta(1.5) == 6.5
    core.replica_checkpoint(2.5, 1, 0.25)
    core.machine_down(3.0, 0)
    assert plain(core.machine_ready(4.0, 0)) == [Assign(j1, 0, 2, 0.25, True)]


def test_staging_replica_may_be_lost_and_its_job_requeued():
    core = make(Machine("M0", (2.0,)), staging=StagingModel(start=(1.0, 2.0)))
    j1 = Job(1, 0, 0.0, 10.0)
    core.job_arrived(0.0, j1)
    core.machine_ready(0.0, 0)
    assert core.machine_down(1.0, 0) == [JobRequeued(j1, 1, 0, "machine down")]
    core.check_invariants()


@pytest.mark.parametrize("rid", [1, 99])
def test_computing_of_a_replica_that_is_not_running_is_stale(rid):
    core = make(Machine("M0", (2.0,)), staging=StagingModel(start=(1.0, 2.0)))
    core.job_arrived(0.0, Job(1, 0, 0.0, 10.0))
    core.machine_ready(0.0, 0)
    core.machine_down(1.0, 0)  # replica 1 lost while staging
    stale = core.stale_events
    assert core.replica_computing(2.0, rid) == []
    assert core.stale_events == stale + 1
    assert core.jobs[1].history[0].phase == "staging"
    core.check_invariants()


# ---------------------------------------------------------------- machine attributes


def test_machine_attributes_are_visible_to_the_policy():
    core = make(
        Machine("M0", (1.0,), attributes=(("group", 3), ("power", 10.0))),
        Machine("M1", (1.0,), attributes=(("group", 1),)),
        Machine("M2", (1.0,)),
        policy=GroupOnly(),
    )
    assert core.machines[0].attributes["group"] == 3 and core.machines[0].attributes["power"] == 10.0
    assert core.machines[1].attributes == {"group": 1} and core.machines[2].attributes == {}
    core.machine_ready(0.0, 1)  # asks first, but is not in group 3
    core.machine_ready(0.0, 2)
    core.machine_ready(0.0, 0)
    j1 = Job(1, 0, 1.0)
    assert plain(core.job_arrived(1.0, j1)) == [Assign(j1, 0, 1)]
    core.check_invariants()
