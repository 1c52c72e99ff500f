"""The simulator plays availability processes: RECLAIMED keeps the work, DOWN loses it (hand-computed schedules)."""

from __future__ import annotations

import math

import pytest

from mgst.availability import State, make_process
from mgst.availability.markov3 import Markov3Availability, Markov3Group
from mgst.availability.trace import TraceAvailability
from mgst.core.state import JobStatus, Outcome
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.sim.loop import Simulation


def experiment(tmp_path, trace: str, bags, checkpoint_interval=None, horizon=20.0) -> Experiment:
    """One machine of rate 2 (work per time unit) replaying ``trace`` (CSV lines for M1); ``bags``: (at, [sizes])."""
    path = tmp_path / "trace.csv"
    path.write_text(trace)
    return Experiment(
        name="a", classes=(JobClass("T", 0.0, 10.0),), machines=(Machine("M1", (2.0,)),),
        policy=PolicySpec("fcfs_share"), failures=TraceAvailability(str(path), "csv"),
        workload=BagList(tuple((at, tuple((0, s) for s in sizes)) for at, sizes in bags)),
        simulation=SimulationSettings(horizon=horizon, warmup=0.0, replications=1,
                                      checkpoint_interval=checkpoint_interval),
    )


def replicas(run) -> list[tuple]:
    """(job, sent, ended, outcome) of every replica, in the order they were sent."""
    out = [(r.job.job.id, r.sent, r.ended, r.outcome) for j in run.jobs for r in j.history]
    return sorted(out, key=lambda x: (x[1], x[0]))


def test_reclaimed_at_share_zero_resumes_with_exactly_its_remaining_work(tmp_path):
    # 10 units of work at rate 2 from t = 0: 4 done at t = 2; suspended until 5; the 6 left take 3: done at 8.
    run = Simulation(experiment(tmp_path, "M1,2,5,reclaimed,0\n", [(0.0, [10.0])])).run()
    assert replicas(run) == [(0, 0.0, 8.0, Outcome.DONE)]
    (job,) = run.jobs
    assert job.completed == 8.0 and job.status is JobStatus.DONE


def test_reclaimed_at_a_share_slows_what_is_left(tmp_path):
    # 6 left at t = 2; at share 0.5 (rate 1) 3 are done by 5; the 3 left at rate 2 take 1.5: done at 6.5.
    run = Simulation(experiment(tmp_path, "M1,2,5,reclaimed,0.5\n", [(0.0, [10.0])])).run()
    assert replicas(run) == [(0, 0.0, 6.5, Outcome.DONE)]


def test_down_loses_the_replica_and_its_work(tmp_path):
    # At t = 2 the machine fails: its replica is lost with the 4 units it did; back at 5, the job starts again
    # from nothing: 10 / 2 = 5, done at 10.
    run = Simulation(experiment(tmp_path, "M1,2,5,down,\n", [(0.0, [10.0])])).run()
    assert replicas(run) == [(0, 0.0, 2.0, Outcome.LOST), (0, 5.0, 10.0, Outcome.DONE)]
    (m,) = run.machines
    assert (m.failures, m.lost, m.completed) == (1, 1, 1)
    assert m.up_time == pytest.approx(2.0 + 5.0)  # [0, 2) and [5, 10)


def test_down_keeps_only_what_was_checkpointed(tmp_path):
    # Checkpoints every 1.5: at 1.5 the replica has 30 % done. Down at 2 (the 0.1 after it is lost); the new
    # replica resumes from 30 %: 7 units at rate 2 from 5, done at 8.5.
    run = Simulation(experiment(tmp_path, "M1,2,5,down,\n", [(0.0, [10.0])], checkpoint_interval=1.5)).run()
    assert replicas(run) == [(0, 0.0, 2.0, Outcome.LOST), (0, 5.0, 8.5, Outcome.DONE)]
    assert run.jobs[0].history[1].progress == pytest.approx(0.3)


def test_a_machine_without_cpu_asks_for_nothing_until_it_has_some(tmp_path):
    # Reclaimed from the start: up, but asking for nothing. The task (bag at 1) waits; at 3 the machine
    # has CPU again and asks: 10 / 2 = 5, done at 8.
    run = Simulation(experiment(tmp_path, "M1,0,3,reclaimed,0\n", [(1.0, [10.0])])).run()
    assert replicas(run) == [(0, 3.0, 8.0, Outcome.DONE)]
    assert run.machines[0].failures == 0


def test_a_machine_reclaimed_while_asking_withdraws_its_request_and_asks_again_with_a_share(tmp_path):
    # The machine asks at t = 0 and is reclaimed at 0.5: it no longer asks (a puller at share 0 asks for nothing).
    # The task (bag at 1) waits in its queue; at 3 the share is back and the machine asks: 10 / 2 = 5, done at 8.
    run = Simulation(experiment(tmp_path, "M1,0.5,3,reclaimed,0\n", [(1.0, [10.0])])).run()
    assert replicas(run) == [(0, 3.0, 8.0, Outcome.DONE)]


def test_a_reclaimed_host_is_not_given_work_a_free_host_can_run(tmp_path):
    """Kondo et al.'s held-out case, scaled: fast host A (rate 2) asks at 0 and is reclaimed at share 0 over
    [0.5, 10); slow host B (rate 1) is always up. A task of 10 units arrives at 1. A keeps no place in the ready
    queue while reclaimed, so B runs it: 10 / 1, done at 11. (Given to A it sat suspended until 10, then 10 / 2:
    done at 15.) Back at 10, A asks and FCFS-Share gives it a second replica (due at 15), cancelled at 11."""
    path = tmp_path / "trace.csv"
    path.write_text("A,0.5,10,reclaimed,0\nB,0,100,up,1\n")
    exp = Experiment(
        name="a", classes=(JobClass("T", 0.0, 10.0),), machines=(Machine("A", (2.0,)), Machine("B", (1.0,))),
        policy=PolicySpec("fcfs_share"), failures=TraceAvailability(str(path), "csv"),
        workload=BagList(((1.0, ((0, 10.0),)),)),
        simulation=SimulationSettings(horizon=20.0, warmup=0.0, replications=1),
    )
    run = Simulation(exp).run()
    (job,) = run.jobs
    assert [(r.machine, r.sent, r.ended, r.outcome) for r in job.history] == [
        (1, 1.0, 11.0, Outcome.DONE), (0, 10.0, 11.0, Outcome.CANCELLED)]
    assert job.completed == 11.0


def test_a_host_reclaimed_at_a_share_asks_for_no_work_until_it_is_up_again(tmp_path):
    # RECLAIMED at share 0.5 over [0.5, 3): its owner has it; it keeps what it runs but asks for nothing. The task
    # (bag at 1) waits; at 3 the machine is UP and asks: 10 / 2 = 5, done at 8.
    run = Simulation(experiment(tmp_path, "M1,0.5,3,reclaimed,0.5\n", [(1.0, [10.0])])).run()
    assert replicas(run) == [(0, 3.0, 8.0, Outcome.DONE)]


def test_trace_replay_follows_a_hand_written_trace_to_the_event(tmp_path):
    trace = ("M1,0,2,up,1\n"  # task A (10 units) at rate 2: 4 done by 2
             "M1,2,4,reclaimed,0\n"  # suspended: still 6 left
             "M1,4,6,up,0.5\n"  # rate 1: 2 done, 4 left
             "M1,6,7,reclaimed,0.25\n"  # rate 0.5: 0.5 done, 3.5 left
             "M1,7,8,down,\n")  # lost; back at 8 at a_j = 1: A again from nothing, 10 / 2: done at 13
    run = Simulation(experiment(tmp_path, trace, [(0.0, [10.0]), (9.0, [2.0])])).run()  # B (bag at 9): 13 to 14
    assert replicas(run) == [(0, 0.0, 7.0, Outcome.LOST), (0, 8.0, 13.0, Outcome.DONE), (1, 13.0, 14.0, Outcome.DONE)]
    (m,) = run.machines
    assert (m.failures, m.lost, m.completed) == (1, 1, 2)
    assert m.up_time == pytest.approx(7.0 + 6.0)  # [0, 7) and [8, 14)
    assert run.end_time == 14.0


def test_the_simulator_follows_a_markov3_process_period_by_period():
    """Over a long run, the simulator's machines fail exactly when their processes (drawn again here) say, and
    are up (UP or RECLAIMED) exactly as long."""
    chain = Markov3Group(((0.9, 0.08, 0.02), (0.3, 0.7, 0.0), (0.2, 0.0, 0.8)), 1.0, 0.5)
    exp = Experiment(
        name="m", classes=(JobClass("1", 0.2),), machines=(Machine("M1", (1.0,)), Machine("M2", (2.0,), 0.5)),
        policy=PolicySpec("fcfs"), failures=Markov3Availability((chain,)),
        simulation=SimulationSettings(horizon=5000.0, warmup=0.0, replications=1, seed=4),
    )
    run = Simulation(exp).run()
    assert all(j.status is JobStatus.DONE for j in run.jobs)
    for j, m in enumerate(run.machines):
        proc, at, downs, up = make_process(exp, 4, 0, j), 0.0, 0, 0.0
        while at < run.end_time:
            p = proc.next()
            span = min(p.duration, run.end_time - at)
            if p.state is State.DOWN:
                downs += 1
            else:
                up += span
            at += p.duration
        assert m.failures == downs > 20
        assert m.up_time == pytest.approx(up, rel=1e-9)
        assert not math.isclose(up, run.end_time)  # (down some of the time)
