"""Progress belongs to the core (mgst.core.progress): Activity's arithmetic, the machine rule's cpus beside slots
(bundles that wait on the host), Eta decisions, and the seam new couplings plug into (the gang and the master's
link rules). Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest

from mgst.core import Assign, Eta, JobCompleted, Scheduler
from mgst.core.gang import Gang
from mgst.core.link import MasterLink
from mgst.core.progress import Activity, Progress
from mgst.core.state import COMPUTING, WAITING
from mgst.model import Availability, BagList, Experiment, Job, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.policies.fcfs import FCFS
from mgst.sim.loop import Simulation

# ---------------------------------------------------------------- Activity


def test_an_activity_is_work_left_at_a_mark_going_down_at_its_rate():
    a = Activity(10.0, 0.0, 2.0)  # 10 left at 0, 2 per unit: ends at 5
    assert (a.remaining(1.0), a.finish_time()) == (8.0, 5.0)
    a.set_rate(2.0, 1.0)  # 6 left at 2, at 1 per unit: ends at 8
    assert (a.left, a.mark, a.rate, a.finish_time()) == (6.0, 2.0, 1.0, 8.0)
    a.set_rate(4.0, 0.0)  # held with 4 left: no end
    assert (a.remaining(100.0), a.finish_time()) == (4.0, math.inf)
    a.set_rate(10.0, 4.0)  # back at 4 per unit: its 4 left end at 11
    assert a.finish_time() == 11.0 and a.remaining(20.0) == 0.0  # never below 0


# ---------------------------------------------------------------- cpus beside slots


def bundle_core() -> Scheduler:
    """One machine of rate 1 holding 3 replicas and computing 1 at a time; FCFS; in check mode."""
    core = Scheduler([JobClass("c", 1.0)], [Machine("M0", (1.0,), slots=3, cpus=1)], FCFS(), check=True)
    core.start(0.0)
    return core


def test_a_one_cpu_host_with_a_bundle_of_three_runs_them_one_after_another():
    core = bundle_core()
    j1, j2, j3 = Job(1, 0, 0.0, 2.0), Job(2, 0, 0.0, 3.0), Job(3, 0, 0.0, 1.0)
    for j in (j1, j2, j3):
        core.job_arrived(0.0, j)
    out = core.machine_ready(0.0, 0)  # it asks for its 3 slots: all three are sent; one computes
    assert out == [Assign(j1, 0, 1, 0.0, False, 2.0, 1.0),  # 2 units at rate 1: ends at 2
                   Assign(j2, 0, 2, 0.0, False, math.inf, 0.0),  # waits on the host: no end yet, pace 0
                   Assign(j3, 0, 3, 0.0, False, math.inf, 0.0)]
    m = core.machines[0]
    assert [r.phase for r in m.replicas.values()] == [COMPUTING, WAITING, WAITING]
    assert (m.computing, [r.id for r in m.waiting]) == (1, [2, 3])
    core.check_invariants()

    # r1 ends at 2: r2, which waited longest, takes the CPU: 3 units from 2, ends at 5.
    assert core.replica_done(2.0, 1) == [Eta(2, 5.0, 1.0), JobCompleted(j1, 1, 0)]
    assert [r.id for r in m.waiting] == [3] and core.replica(2).computing_since == 2.0
    core.check_invariants()
    # r2 ends at 5: r3 computes its 1 unit from 5, ends at 6.
    assert core.replica_done(5.0, 2) == [Eta(3, 6.0, 1.0), JobCompleted(j2, 2, 0)]
    assert core.replica_done(6.0, 3) == [JobCompleted(j3, 3, 0)]
    # The machine was charged its computing only: 2 + 3 + 1, not the 2 + 3 its replicas waited.
    assert m.stats.busy_time == 6.0
    assert [core.jobs[i].history[0].computed for i in (1, 2, 3)] == [2.0, 3.0, 1.0]
    core.check_invariants()


def test_a_share_change_moves_only_the_computing_replica_and_a_lost_one_frees_its_cpu():
    core = bundle_core()
    for i, size in ((1, 4.0), (2, 2.0)):
        core.job_arrived(0.0, Job(i, 0, 0.0, size))
    core.machine_ready(0.0, 0)
    # At 1, share 0.5: r1 has 3 left at rate 0.5, ends at 7; r2 waits and does not move.
    assert core.cpu_share_changed(1.0, 0, 0.5) == [Eta(1, 7.0, 1.0)]
    # r1 fails at 3 (its machine stays up): r2 computes its 2 units at rate 0.5 from 3, ends at 7.
    out = core.replica_failed(3.0, 1)
    assert out[0] == Eta(2, 7.0, 1.0)
    core.check_invariants()


def test_a_machine_that_goes_down_loses_its_waiting_replicas_before_any_takes_a_cpu():
    core = bundle_core()
    for i in (1, 2, 3):
        core.job_arrived(0.0, Job(i, 0, 0.0, 2.0))
    core.machine_ready(0.0, 0)
    out = core.machine_down(1.0, 0)
    assert not [o for o in out if type(o) is Eta]  # nothing computes on a machine that is gone
    assert all(not r.live for j in core.jobs.values() for r in j.history)
    core.check_invariants()


def test_staging_over_with_every_cpu_taken_waits_and_says_so():
    from mgst.model import StagingModel

    core = Scheduler([JobClass("c", 1.0)], [Machine("M0", (1.0,), slots=2, cpus=1)], FCFS(),
                     StagingModel(start=(1.0, 2.0)), check=True)
    core.start(0.0)
    core.job_arrived(0.0, Job(1, 0, 0.0, 2.0))
    core.job_arrived(0.0, Job(2, 0, 0.0, 2.0))
    core.machine_ready(0.0, 0)  # both stage first
    assert core.replica_computing(1.0, 1) == [Eta(1, 3.0, 1.0)]  # 2 units from 1
    assert core.replica_computing(1.5, 2) == [Eta(2, math.inf, 0.0)]  # staged; the CPU is r1's: it waits
    assert core.replica_done(3.0, 1)[0] == Eta(2, 5.0, 1.0)  # its 2 units from 3
    core.check_invariants()


def test_cpus_must_be_between_one_and_the_slots():
    with pytest.raises(ValueError, match="cpus"):
        Scheduler([JobClass("c", 1.0)], [Machine("M0", (1.0,), slots=2, cpus=3)], FCFS())
    with pytest.raises(ValueError, match="cpus"):
        Scheduler([JobClass("c", 1.0)], [Machine("M0", (1.0,), slots=2, cpus=0)], FCFS())


def test_the_simulator_runs_a_bundle_where_the_core_says():
    """The same bundle, simulated: ends at 2, 5 and 6, each replica sent at 0."""
    exp = Experiment(
        name="bundle", classes=(JobClass("T", 0.0, 2.0),), machines=(Machine("M0", (1.0,), slots=3, cpus=1),),
        policy=PolicySpec("fcfs"), workload=BagList(((0.0, ((0, 2.0), (0, 3.0), (0, 1.0))),)),
        simulation=SimulationSettings(horizon=1.0, warmup=0.0, replications=1),
    )
    run = Simulation(exp, drain_limit=100.0).run()
    ends = sorted((r.sent, r.ended) for j in run.jobs for r in j.history)
    assert ends == [(0.0, 2.0), (0.0, 5.0), (0.0, 6.0)]
    assert run.machines[0].busy_time == 6.0


# ---------------------------------------------------------------- the seam: new couplings are new rules


def test_a_gang_goes_at_its_slowest_member_s_pace_and_stalls_while_one_is_not_up():
    progress = Progress()
    gang = Gang("gang", [(0, 2, 1.0), (1, 1, 3.0)], 0.0)  # loads 2 and 3 units: the gang takes 3
    gang.ready = True
    assert progress.apply(0.0, gang) == 1 and progress.out == [Eta("gang", 3.0, 1.0)]
    progress.out = []
    gang.member_state(1, Availability.RECLAIMED)  # member 1 RECLAIMED at 1: a third done, the gang stalls
    progress.apply(1.0, gang)
    assert progress.out == [Eta("gang", math.inf, 0.0)]
    progress.out = []
    gang.member_state(1, Availability.UP)  # back at 2: its 2 units left: ends at 4
    progress.apply(2.0, gang)
    assert progress.out == [Eta("gang", pytest.approx(4.0), 1.0)]
    assert progress.apply(2.5, gang) == 0  # nothing changed: nothing reported


def test_a_link_carries_at_most_n_com_transfers_at_full_speed_the_rest_wait_in_order():
    progress = Progress()
    link = MasterLink(n_com=2, bw=1.0)
    for q, (name, size) in enumerate((("t1", 2.0), ("t2", 4.0), ("t3", 6.0))):
        link.add(0.0, name, q, size)
    progress.apply(0.0, link)  # t1 and t2 move (ends 2 and 4); t3 waits, its rate stays 0: nothing said of it
    assert progress.out == [Eta("t1", 2.0, 1.0), Eta("t2", 4.0, 1.0)]
    progress.out = []
    link.remove("t1")  # t1 is over at 2: t3 moves, its 6 from 2: ends at 8; t2 unchanged
    progress.apply(2.0, link)
    assert progress.out == [Eta("t3", 8.0, 1.0)]
