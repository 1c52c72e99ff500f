"""Losers that run on (a policy's ``cancel_losers = False``, GridBot's reading): the job completes once, the
losers finish or fail as they would, their results are recorded as discarded, and their machine time is waste, in
the core, the simulator and the results. Every expected value is worked out by hand in the comments."""

from __future__ import annotations

import json

import pytest
from helpers import plain

from mgst.core import Assign, JobCompleted, Scheduler
from mgst.core.decisions import Cancel, ReplicaDiscarded
from mgst.core.state import JobStatus, Outcome
from mgst.model import BagList, Experiment, Job, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.policies.base import Policy
from mgst.results import JOB_COLUMNS, JOB_EXTRA_COLUMNS, format_table
from mgst.sim.replications import run_simulation


class Both(Policy):
    """Assigns what the test hands it (after the next event); two replicas a job; losers run on."""

    name = "test-run-on"
    hooks = frozenset({"on_event"})
    max_replicas = 2
    cancel_losers = False

    def __init__(self) -> None:
        super().__init__()
        self.todo: list = []

    def on_event(self, view, event) -> list:
        todo, self.todo = self.todo, []
        return todo


def started_core(policy: Policy) -> Scheduler:
    # A does 2 units of work per time unit, B 1: a 4-unit job takes 2 on A, 4 on B.
    core = Scheduler([JobClass("c", 1.0)], [Machine("A", (2.0,)), Machine("B", (1.0,))], policy, check=True)
    core.start(0.0)
    core.machine_ready(0.0, 0)
    core.machine_ready(0.0, 1)
    return core


def test_the_loser_runs_on_its_result_is_discarded_and_the_job_completes_once():
    policy = Both()
    core = started_core(policy)
    j = Job(1, 0, 0.0, 4.0)
    policy.todo = [Assign(j, 0), Assign(j, 1)]
    assert plain(core.job_arrived(0.0, j)) == [Assign(j, 0, 1), Assign(j, 1, 2)]
    # A delivers at 2: the job is done, and nothing is cancelled: B's replica runs on.
    assert core.replica_done(2.0, 1) == [JobCompleted(j, 1, 0)]
    loser = core.replica(2)
    assert loser is not None and loser.live and loser.discarded
    rec = core.jobs[1]
    assert (rec.status, rec.completed, rec.done_by) == (JobStatus.DONE, 2.0, 1)
    core.check_invariants()
    # B delivers at 4: recorded, not used; the job stays done at 2, completed once.
    assert core.replica_done(4.0, 2) == [ReplicaDiscarded(2, 1, 1)]
    assert (loser.outcome, loser.ended, loser.live) == (Outcome.DISCARDED, 4.0, False)
    assert (rec.status, rec.completed, rec.done_by) == (JobStatus.DONE, 2.0, 1)
    assert sum(r.outcome is Outcome.DONE for r in rec.history) == 1
    b = core.machines[1].stats
    assert (b.completed, b.discarded, b.discarded_time, b.busy_time) == (0, 1, 4.0, 4.0)
    assert core.machines[0].stats.discarded == 0
    core.check_invariants()


def test_a_loser_that_fails_is_waste_too_and_requeues_nothing():
    policy = Both()
    core = started_core(policy)
    j = Job(1, 0, 0.0, 4.0)
    policy.todo = [Assign(j, 0), Assign(j, 1)]
    core.job_arrived(0.0, j)
    core.replica_done(2.0, 1)
    out = core.machine_down(3.0, 1)  # B goes down at 3 with the loser: lost, its job stays done
    assert not [o for o in out if type(o).__name__ == "JobRequeued"]
    assert core.jobs[1].status is JobStatus.DONE and core.queued_count == 0
    b = core.machines[1].stats
    assert (b.lost, b.discarded, b.discarded_time) == (1, 1, 3.0)
    core.check_invariants()


def test_the_default_cancels_the_losers():
    class Cancelling(Both):
        name = "test-cancel"
        cancel_losers = True

    policy = Cancelling()
    core = started_core(policy)
    j = Job(1, 0, 0.0, 4.0)
    policy.todo = [Assign(j, 0), Assign(j, 1)]
    core.job_arrived(0.0, j)
    assert core.replica_done(2.0, 1) == [Cancel(2, 1, 1), JobCompleted(j, 1, 0)]
    assert core.machines[1].stats.discarded == 0


@pytest.mark.parametrize("run_on", [True, False])
def test_the_simulator_and_the_results_count_the_waste(run_on):
    """WQR-FT with two replicas of one 4-unit task on A (rate 2) and B (rate 1): A's ends at 2 and completes the
    task. Running on, B's ends at 4, discarded: waste 1 replica, 4 time units, of 2 + 4 busy. Cancelled, none."""
    exp = Experiment(
        name="run-on", classes=(JobClass("T", 0.0, 4.0),), machines=(Machine("A", (2.0,)), Machine("B", (1.0,))),
        policy=PolicySpec("wqr_ft", (("run_on_losers", run_on),)),
        workload=BagList(((0.0, ((0, 4.0),)),)),
        simulation=SimulationSettings(horizon=1.0, warmup=0.0, replications=1),
    )
    summary, (result,) = run_simulation(exp, keep_rows=True, drain_limit=100.0)
    (row,) = result.rows
    row = dict(zip(JOB_COLUMNS + JOB_EXTRA_COLUMNS, row))
    assert (row["Date Done"], row["Status"]) == ("2.000000", "Done")
    if not run_on:
        assert summary.waste is None and "waste" not in summary.as_dict()
        assert (row["Discarded"], row["Wasted Time"]) == (0, "0.000000")
        return
    assert (row["Discarded"], row["Wasted Time"]) == (1, "4.000000")
    assert result.discarded == [0, 1] and result.discarded_time == [0.0, 4.0]
    waste = json.loads(json.dumps(summary.as_dict()))["waste"]
    assert waste == {"replicas": 1, "machine_time": 4.0, "share_of_busy_time": round(4.0 / 6.0, 6)}
    assert "waste: 1 replica kept after their job was done (losers run on), 4 time units of machine time charged " \
        "until each ended" in format_table(summary)
