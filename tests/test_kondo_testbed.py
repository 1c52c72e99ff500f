"""A Kondo application on the real testbed: pullers of heterogeneous clock rates replay a host-availability trace
(DOWN kills the running task, which restarts from scratch; a CPU share of 0 suspends it), one bag of T = N tasks
of 5 minutes, and the run ends when the bag is done, its makespan within 15 % of the simulation's beside it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from mgst.config import load_experiment
from mgst.core.state import JobStatus
from mgst.testbed.local_run import run_local

# Clock rates (GHz) of the 12 hosts; a host's power is clock / 1.5, so a task of 300 (5 minutes on a dedicated
# 1.5 GHz host) takes 300 * 1.5 / clock model seconds on it: 150 on h01, ..., 750 on h12.
CLOCKS = (3.0, 2.4, 2.0, 1.8, 1.5, 1.5, 1.2, 1.2, 1.0, 0.9, 0.75, 0.6)
TASK = 300.0  # model seconds on a dedicated 1.5 GHz host
HISTORY = 100.0  # the application is submitted here (model seconds: the trace has played this much)
TIME_UNIT = 0.01  # wall seconds per model second: a 5-minute task takes 3 s on a 1.5 GHz puller
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
""" + "".join(f"h{k:02d},0,9000,up,\n" for k in (2, 4, 6, 7, 8, 9, 10, 11, 12))
MAKESPAN_TOLERANCE = 0.15  # the bound: the testbed's makespan within 15 % of the simulation's
# Wall jitter a task's computing may show on a shared, loaded machine (model seconds: 0.3 s of wall time).
JITTER = 30.0


def kondo_file(folder: Path) -> Path:
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
name = "fcfs"
[simulation]
horizon = 10000.0
warmup = 0.0
replications = 1
[testbed]
time_unit = {TIME_UNIT}
duration = 5.0
""")
    return path


def test_a_kondo_bag_on_real_pullers_replaying_a_trace(tmp_path, no_children_left):
    exp = load_experiment(kondo_file(tmp_path))
    result = run_local(exp, tmp_path / "run", insecure=True)
    run = result.run
    journal, core = run.journal, run.core
    name = [m.name for m in exp.machines]

    # every task is done exactly once (the journal's results, per task), and the run ended with the bag
    done = Counter(r.job for r in journal.replicas.values() if r.outcome == "done")
    assert sorted(done) == sorted(journal.jobs) and len(done) == len(CLOCKS)
    assert set(done.values()) == {1}
    assert all(rec.status is JobStatus.DONE for rec in core.jobs.values()) and run.cut_off == []
    (bag,) = core.all_bags.values()
    assert bag.submitted == HISTORY and bag.completed == max(t.completed for t in bag.tasks)
    end = (run.end - run.t0) / TIME_UNIT
    assert bag.completed <= end < bag.completed + 300, "the run ends when its last task is done"

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
    assert computing(by_machine["h12"]) == pytest.approx(750.0, abs=JITTER)

    # the makespan (last completion - submission) beside the simulation of the same trace window
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    (row,) = summary["bag_makespans"]
    assert row["tasks"] == len(CLOCKS) and row["submitted"] == HISTORY
    assert row["testbed"] == pytest.approx(bag.completed - HISTORY, abs=1e-3)
    # FCFS gives every host a task at once; the slowest, h12, ends last, at 750 after arrival in simulation
    assert row["simulation"] == pytest.approx(750.0)
    assert abs(row["testbed"] - row["simulation"]) <= MAKESPAN_TOLERANCE * row["simulation"]
    assert summary["warnings"] == []
