"""Bags of Tasks on loopback: real pullers with several slots, staging, checkpoints, Weibull failures."""

from __future__ import annotations

import csv
from pathlib import Path

from test_testbed import Run

from mgst.core.state import JobStatus, Outcome
from mgst.model import (
    BagStream,
    Experiment,
    JobClass,
    Machine,
    PolicySpec,
    SimulationSettings,
    StagingModel,
    TestbedSettings,
    WeibullGroup,
    WeibullNormalFailures,
)
from mgst.testbed.local_run import start_pullers
from mgst.testbed.summary import summarize_testbed, write_testbed_outputs

POWERS = (4.0, 2.0, 2.0, 1.0)
SLOTS = (3, 1, 1, 1)


def bag_experiment() -> Experiment:
    """Four machines (the first with 3 slots), bags of ~10 tasks of 100 units of work, failures every
    ~1.5 s of wall time per machine, checkpoints every 0.1 s, staging before a resumed replica."""
    return Experiment(
        name="bags",
        classes=(JobClass("T", 0.0, 100.0),),
        machines=tuple(Machine(f"M{j + 1}", (p,), 1.0, s, (("power", p), ("group", 1)))
                       for j, (p, s) in enumerate(zip(POWERS, SLOTS))),
        policy=PolicySpec("rr_nrf"),
        failures=WeibullNormalFailures((WeibullGroup(mttf=150.0, shape=1.0, repair_mean=30.0, repair_sd=5.0),)),
        workload=BagStream(bag_rate=0.01, application_size=1000.0, mix=(1.0,)),
        staging=StagingModel(resume=(5.0, 10.0)),
        simulation=SimulationSettings(horizon=800.0, warmup=0.0, replications=1, checkpoint_interval=10.0),
        testbed=TestbedSettings(time_unit=0.01, duration=8.0, timeout_factor=20.0),
    )


class BagRun(Run):
    """Run, with each puller started with its machine's slots."""

    def __init__(self, exp: Experiment, tmp: Path):
        super().__init__(exp, tmp, pullers=False)
        self.procs = start_pullers(self.mapper.endpoint, [m.name for m in exp.machines], tmp / "pullers.log",
                                   slots=[m.slots for m in exp.machines])


def test_bags_run_on_real_pullers_and_every_task_is_done_once(tmp_path, no_children_left):
    exp = bag_experiment()
    with BagRun(exp, tmp_path) as r:
        run = r.wait()
    core = run.core
    summary, extras = summarize_testbed(run)
    write_testbed_outputs(run, summary, extras, tmp_path)

    # every task done exactly once, every bag complete, at the instant of its last task
    with open(tmp_path / "jobs.csv", newline="") as f:
        ids = [int(row["ID"]) for row in csv.DictReader(f)]
    assert len(ids) == len(set(ids)) == len(core.jobs) >= 20
    assert run.cut_off == []
    assert all(rec.status is JobStatus.DONE for rec in core.jobs.values())
    assert sum(m.stats.completed for m in core.machines) == len(core.jobs)
    assert len(core.all_bags) >= 3 and not core.bags
    for bag in core.all_bags.values():
        assert bag.completed == max(t.completed for t in bag.tasks)
    with open(tmp_path / "bags.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(core.all_bags) and all(row["Completed"] for row in rows)
    assert summary.bags is not None and summary.bags.avt is not None

    replicas = [r for rec in core.jobs.values() for r in rec.history]
    # failures were injected and their replicas resubmitted; replicas were cancelled (a sibling won)
    assert sum(m.stats.failures for m in core.machines) >= 2
    assert any(r.outcome is Outcome.LOST for r in replicas)
    assert any(r.outcome is Outcome.CANCELLED for r in replicas)
    # pullers reported checkpoints, and restarts resumed from them after staging the transfer
    assert any(rec.best_progress > 0 for rec in core.jobs.values())
    resumed = [r for r in replicas if r.progress > 0]
    assert resumed and all(r.phase == "computing" for r in resumed if r.outcome is Outcome.DONE)
    # the 3-slot puller ran several replicas at once, never more than 3
    spans = sorted((r.sent, r.ended) for r in replicas if r.machine == 0)
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert 2 <= most <= 3
