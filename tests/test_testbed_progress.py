"""The core's progress on the testbed: a real mapper and a real puller process on loopback, a machine holding a
bundle of three replicas with one cpu (the mapper sends the waiting ones at pace 0 and moves each on when the core
says), and their ends where the simulation puts them."""

from __future__ import annotations

import pytest
from test_testbed import Run

from mgst.core.state import JobStatus
from mgst.model import BagList, Experiment, JobClass, Machine, PolicySpec, SimulationSettings, TestbedSettings
from mgst.sim.loop import Simulation
from mgst.testbed.local_run import start_pullers, stop_pullers

TIME_UNIT = 0.1  # wall seconds per model time unit
# Ends within this much model time of the model's: 5 % of a 2-unit job's wall time each, plus what a loaded
# machine adds to the mapper's round trip for each Pace (the second and third job wait for one).
SLACK = 0.05 * 2.0 + 0.3


def test_a_one_cpu_puller_with_three_slots_runs_a_bundle_one_after_another(tmp_path, no_children_left):
    exp = Experiment(
        name="bundle", classes=(JobClass("T", 0.0, 2.0),),
        machines=(Machine("M1", (1.0,), slots=3, cpus=1),),
        policy=PolicySpec("fcfs"), workload=BagList(((0.5, ((0, 2.0), (0, 2.0), (0, 2.0))),)),
        simulation=SimulationSettings(horizon=1.0, warmup=0.0, replications=1),
        testbed=TestbedSettings(time_unit=TIME_UNIT, duration=1.0, timeout_factor=10.0),
    )
    # By the model: the three sent at 0.5, one computing at a time: ends at 2.5, 4.5 and 6.5.
    simulated = Simulation(exp, drain_limit=100.0).run()
    assert sorted(j.completed for j in simulated.jobs) == [2.5, 4.5, 6.5]

    run = Run(exp, tmp_path, pullers=False)
    procs = start_pullers(run.mapper.endpoint, ["M1"], tmp_path / "pullers.log", slots=[3])
    try:
        with run as r:
            result = r.wait()
    finally:
        stop_pullers(procs)
    jobs = sorted(result.core.jobs.values(), key=lambda j: j.completed or 0.0)
    assert [j.status for j in jobs] == [JobStatus.DONE] * 3
    assert all(len(j.history) == 1 for j in jobs), "each job ran once, on the one machine"
    ends = [j.completed for j in jobs]
    for got, want in zip(ends, [2.5, 4.5, 6.5]):
        assert got == pytest.approx(want, abs=SLACK), ends
    # One after another: each ended a whole job's time (2 units, less the slack) after the one before it.
    assert all(b - a > 2.0 - SLACK for a, b in zip(ends, ends[1:])), ends


def test_a_loser_that_runs_on_is_discarded_on_the_testbed_and_counted_as_waste(tmp_path, no_children_left):
    """WQR-FT with run_on_losers, a 2-unit task on a fast puller (rate 4) and a slow one (rate 1), both sent at
    0.5: the fast one's result (at 1.0) completes the task; the slow one runs on, delivers at 2.5 and is recorded
    as discarded: its 2 time units are waste, in summary.json and jobs.csv."""
    import csv
    import json

    from mgst.testbed.summary import summarize_testbed, write_testbed_outputs

    exp = Experiment(
        name="run-on", classes=(JobClass("T", 0.0, 2.0),), machines=(Machine("F", (4.0,)), Machine("S", (1.0,))),
        policy=PolicySpec("wqr_ft", (("run_on_losers", True),)), workload=BagList(((0.5, ((0, 2.0),)),)),
        simulation=SimulationSettings(horizon=1.0, warmup=0.0, replications=1),
        testbed=TestbedSettings(time_unit=TIME_UNIT, duration=1.0, timeout_factor=10.0),
    )
    with Run(exp, tmp_path) as r:
        result = r.wait()
    (job,) = result.core.jobs.values()
    assert job.status is JobStatus.DONE and job.done_on == 0
    assert job.completed == pytest.approx(1.0, abs=SLACK)
    (loser,) = [x for x in job.history if x.machine == 1]
    assert loser.discarded and loser.outcome.value == "discarded"
    assert result.journal.replicas[loser.id].outcome == "discarded"
    summary, extras = summarize_testbed(result)
    written = write_testbed_outputs(result, summary, extras, tmp_path / "out")
    assert written["waste"]["replicas"] == 1
    assert written["waste"]["machine_time"] == pytest.approx(2.0, abs=SLACK)
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["waste"]["replicas"] == 1
    (row,) = list(csv.DictReader(open(tmp_path / "out" / "jobs.csv", newline="")))
    assert row["Discarded"] == "1" and float(row["Wasted Time"]) == pytest.approx(2.0, abs=SLACK)
