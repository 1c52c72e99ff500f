"""A Kondo application on the real testbed: pullers of heterogeneous clock rates replay a host-availability trace
(DOWN kills the running task, which restarts from scratch; a CPU share of 0 suspends it), one bag of T = N tasks
of 5 minutes, and the run ends when the bag is done, its makespan within 15 % of the simulation's beside it."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from mgst.config import load_experiment
from mgst.core.state import JobStatus
from mgst.testbed.finite_workload import finite_window, late_arrivals_warning
from mgst.testbed.local_run import run_local
from mgst.testbed.requested_share import asked_shares, share_shortfalls

# Clock rates (GHz) of the 8 hosts (8 pullers: each takes a few seconds to start on a loaded machine); a host's
# power is clock / 1.5, so a task of 300 (5 minutes on a dedicated 1.5 GHz host) takes 300 * 1.5 / clock model
# seconds on it: 150 on h01, 187.5 on h02, ..., 750 on h08, the slowest.
CLOCKS = (3.0, 2.4, 2.0, 1.5, 1.5, 1.2, 1.0, 0.6)
SLOWEST = "h08"
TASK = 300.0  # model seconds on a dedicated 1.5 GHz host
HISTORY = 100.0  # the application is submitted here (model seconds: the trace has played this much)
TIME_UNIT = 0.005  # wall seconds per model second: a 5-minute task takes 1.5 s on a 1.5 GHz puller
# The trace (trace seconds; model time 0 is trace time OFFSET, so the bag arrives at trace time 3700):
# h01 is DOWN from 3800 to 4100, 100 s into its task of 150: the task is killed with no checkpoint;
# h03 is RECLAIMED at share 0 from 3750 to 3900: its task of 225 is suspended 150 s, done at 375 after arrival;
# h05 computes at share 0.5 throughout: its task of 300 takes 600. The others are up at their a_j, 1, throughout.
OFFSET = 3600.0
TRACE = """machine,start,end,state,cpu_share
h01,0,3800,up,1.0
h01,3800,4100,down,
h03,3750,3900,reclaimed,0
h05,3000,9000,up,0.5
""" + "".join(f"h{k:02d},0,9000,up,\n" for k in (2, 4, 6, 7, 8))
MAKESPAN_TOLERANCE = 0.15  # the bound: the testbed's makespan within 15 % of the simulation's
# Wall jitter a task's computing may show on a shared, loaded machine: 0.3 s, in model seconds.
JITTER = 0.3 / TIME_UNIT


def kondo_file(folder: Path, policy: str = "fcfs") -> Path:
    """The experiment file and its trace, as a user writes them (docs/testbed.md)."""
    (folder / "availability.csv").write_text(TRACE)
    names = [f"h{k + 1:02d}" for k in range(len(CLOCKS))]
    tasks = ", ".join(f"[0, {TASK}]" for _ in CLOCKS)
    path = folder / "kondo.toml"
    path.write_text(f"""
[experiment]
name = "kondo-test"
[workload]
kind = "bag_list"
granularity = [{TASK}]
bags = [{{at = {HISTORY}, tasks = [{tasks}]}}]
[machines]
power = [{", ".join(f"{c / 1.5!r}" for c in CLOCKS)}]
names = [{", ".join(f'"{n}"' for n in names)}]
attributes = {{clock_ghz = [{", ".join(map(repr, CLOCKS))}]}}
[availability]
kind = "trace"
file = "availability.csv"
offset = {OFFSET}
[policy]
name = "{policy}"
[simulation]
horizon = 10000.0
warmup = 0.0
replications = 1
[testbed]
time_unit = {TIME_UNIT}
duration = 5.0
""")
    return path


def run_kondo(folder: Path, policy: str) -> tuple:
    """`mgst run` of the application (run_local, insecure on loopback): the run, and its summary.json."""
    result = run_local(load_experiment(kondo_file(folder, policy)), folder / "run", insecure=True)
    return result.run, json.loads((folder / "run" / "summary.json").read_text())


def done_once(run) -> None:
    """Every task is done exactly once (the journal's results, per task), and the run ended with the bag."""
    done = Counter(r.job for r in run.journal.replicas.values() if r.outcome == "done")
    assert sorted(done) == sorted(run.journal.jobs) and len(done) == len(CLOCKS)
    assert set(done.values()) == {1}
    assert all(rec.status is JobStatus.DONE for rec in run.core.jobs.values()) and run.cut_off == []
    (bag,) = run.core.all_bags.values()
    assert bag.submitted == HISTORY and bag.completed == max(t.completed for t in bag.tasks)
    end = (run.end - run.t0) / TIME_UNIT
    assert bag.completed <= end < bag.completed + 1.0 / TIME_UNIT, "the run ends (within 1 s) with its last task"


def makespan_beside(run, summary: dict) -> dict:
    """summary.json's makespan of the bag on the testbed, within 15 % of the simulation's beside it."""
    (bag,) = run.core.all_bags.values()
    (row,) = summary["bag_makespans"]
    assert row["tasks"] == len(CLOCKS) and row["submitted"] == HISTORY
    assert row["testbed"] == pytest.approx(bag.completed - HISTORY, abs=1e-3)
    assert abs(row["testbed"] - row["simulation"]) <= MAKESPAN_TOLERANCE * row["simulation"]
    return row


def test_fcfs_on_real_pullers_replaying_a_trace(tmp_path, no_children_left):
    run, summary = run_kondo(tmp_path, "fcfs")
    journal, core = run.journal, run.core
    name = [m.name for m in run.experiment.machines]
    done_once(run)
    by_machine = {name[r.machine]: r for r in journal.replicas.values() if r.outcome == "done"}
    lost = [r for r in journal.replicas.values() if r.outcome == "lost"]

    def computing(r) -> float:  # model seconds from the puller's start to its end of computing
        return (r.t5 - r.t4) / TIME_UNIT

    # h01's DOWN killed its task: lost there, done elsewhere from scratch (no checkpoint: a whole task's time)
    assert [name[r.machine] for r in lost] == ["h01"]
    (again,) = [r for r in journal.replicas.values() if r.job == lost[0].job and r.outcome == "done"]
    clock = CLOCKS[again.machine]
    assert computing(again) == pytest.approx(TASK * 1.5 / clock, abs=JITTER)
    assert all(r.progress == 0.0 for rec in core.jobs.values() for r in rec.history)
    # h03's share 0 suspended its task for 150 s, with no work lost: 225 + 150; h05's share 0.5 doubled its 300
    assert computing(by_machine["h03"]) == pytest.approx(225.0 + 150.0, abs=JITTER)
    assert computing(by_machine["h05"]) == pytest.approx(600.0, abs=JITTER)
    assert computing(by_machine[SLOWEST]) == pytest.approx(750.0, abs=JITTER)

    # FCFS gives every host a task at once (the killed one goes to h02, free at 187.5, and ends at 375); the
    # slowest, h08, ends last, at 750 after arrival in simulation
    row = makespan_beside(run, summary)
    assert row["simulation"] == pytest.approx(750.0)
    assert summary["warnings"] == []
    # machines.csv sets what each machine achieved beside what its jobs were asked for, the trace's share over
    # them (h05's 0.5), not beside the file's a_j (1.0), which read as a shortfall the warnings rightly do not make
    with open(tmp_path / "run" / "machines.csv", newline="") as f:
        rows = {r["Machine"]: r for r in csv.DictReader(f)}
    assert rows["h05"]["CPU Share Requested"] == "1.0"
    assert float(rows["h05"]["CPU Share Asked"]) == pytest.approx(0.5, abs=1e-3)
    assert float(rows["h03"]["CPU Share Asked"]) == pytest.approx(0.6, abs=0.01)  # 225 s of share 1 in 375
    assert all(abs(float(r["CPU Share Asked"]) - float(r["CPU Share Achieved"])) < 0.05
               for r in rows.values() if r["CPU Share Achieved"]), rows
    assert {d["machine"]: d["asked_share"] for d in summary["machines_detail"]}["h05"] == pytest.approx(0.5, abs=1e-3)


def test_excl_pred_to_replicates_on_real_pullers_and_each_task_is_done_once(tmp_path, no_children_left):
    run, summary = run_kondo(tmp_path, "excl_pred_to")
    done_once(run)
    outcomes = Counter(r.outcome for r in run.journal.replicas.values())
    # it replicated the tasks not done by its predicted makespan, and cancelled each loser; a DOWN killed one
    assert outcomes["done"] == len(CLOCKS) and outcomes["cancelled"] >= 1 and outcomes["lost"] >= 1
    assert summary["policy_counts"]["predictions"] >= 1 and summary["policy_counts"]["replicas_started"] >= 1
    makespan_beside(run, summary)


def test_a_share_shortfall_is_measured_against_the_trace_share_over_the_job(tmp_path):
    """share_shortfalls asks of each job the mean share of its machine's trace over its computing (t4 to t5)."""
    exp = load_experiment(kondo_file(tmp_path))
    tu, t0 = TIME_UNIT, 1000.0

    def run_with(achieved_h03: float, achieved_h05: float) -> SimpleNamespace:
        # h03 computes over model [100, 475]: share 1 for 50 s, 0 for 150 s (reclaimed), 1 for 175 s: a mean
        # of 225 / 375 = 0.6; h05 over [100, 700], at 0.5 throughout; h02 over [100, 287.5], at its a_j, 1.
        jobs = [(2, 475.0, achieved_h03), (4, 700.0, achieved_h05), (1, 287.5, 1.0)]
        replicas = {k: SimpleNamespace(machine=j, t4=t0 + 100.0 * tu, t5=t0 + end * tu, achieved_share=a)
                    for k, (j, end, a) in enumerate(jobs)}
        machines = [SimpleNamespace(name=m.name, share=m.availability) for m in exp.machines]
        return SimpleNamespace(experiment=exp, seed=1, time_unit=tu, t0=t0, end=t0 + 800.0 * tu,
                               journal=SimpleNamespace(replicas=replicas, machines=machines))

    assert share_shortfalls(run_with(0.6, 0.5)) == []  # as asked (against a_j = 1, both fell short)
    asked = {s.name: s.requested for s in asked_shares(run_with(0.6, 0.5)) if s is not None}
    assert asked == pytest.approx({"h02": 1.0, "h03": 0.6, "h05": 0.5})  # (the machines with no job: none)
    short = share_shortfalls(run_with(0.5, 0.4))
    assert [(s.name, s.jobs) for s in short] == [("h03", 1), ("h05", 1)]
    assert [s.requested for s in short] == pytest.approx([0.6, 0.5])
    assert [s.achieved for s in short] == pytest.approx([0.5, 0.4])


def test_a_bag_list_is_simulated_to_its_end_and_an_endless_workload_as_before(tmp_path):
    exp = load_experiment(kondo_file(tmp_path))
    run = SimpleNamespace(experiment=exp, seed=1, time_unit=TIME_UNIT, generation_end=10.0, end=15.0)
    # the testbed's horizon may be the bag's own arrival time (the bag fed at once): the simulation's is after it
    window = finite_window(run, HISTORY)
    assert window is not None and window.horizon > HISTORY
    # it drains as long as the mapper may: 50 x the slowest task (300 / 0.4 = 750 model s), in model time
    assert window.drain_limit == pytest.approx(50 * 750.0)
    run.end = run.generation_end + 400.0  # (or as long as the run drained, if longer: 400 wall s)
    assert finite_window(run, HISTORY).drain_limit == pytest.approx(400.0 / TIME_UNIT)
    # a bag arriving after the run's generation (duration / time unit) is warned of; an endless workload is not
    assert late_arrivals_warning(exp, 0.25, TIME_UNIT, 1).startswith("1 of the workload's 1 arrivals come at or after "
                                                                     "model time 50 ")
    assert late_arrivals_warning(exp, 0.5 + 1e-6, TIME_UNIT, 1) is None
    poisson = load_experiment(Path(__file__).parents[1] / "experiments" / "availability" / "trace-csv.toml")
    assert finite_window(SimpleNamespace(experiment=poisson, seed=1), 3000.0) is None
    assert late_arrivals_warning(poisson, 1.0, 0.01, 1) is None
