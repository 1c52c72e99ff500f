"""GridBot on the real testbed: pullers in three grids (puller groups, each with its own availability played by the
pullers' adjuster), holding bundles (--slots above their CPUs), one bag with tail replication whose losers run on;
every task is done exactly once, the discarded results are counted in jobs.csv, and the run is set beside the
simulation of the same bag and failures. Also: a job of a bundle that waited on its host for a CPU is not a CPU
share the host fell short of."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from mgst.availability.registry import make_process
from mgst.config import load_experiment
from mgst.core.state import JobStatus
from mgst.papers.gridbot.policy import GridBot
from mgst.testbed.beside import format_beside
from mgst.testbed.local_run import run_local
from mgst.testbed.requested_share import bundle_waits, share_shortfalls

pytest.importorskip("classad2", reason="GridBot's expressions need the htcondor wheel's classad2 (the test extra)")

TIME_UNIT = 0.005  # wall seconds per model time unit: a task of 200 takes 1 s on a speed-1 host
TASKS = [200.0, 220.0, 240.0, 260.0, 280.0, 300.0] * 3
# Three grids of two pullers each: (grid, power, cpus, slots, Weibull up-time mean): the community grid's hosts
# fail during the run, the cluster's never.
GRIDS = (("osg", 1.0, 1, 2, 20000.0), ("community", 0.5, 1, 2, 400.0), ("cluster", 1.5, 2, 3, 1.0e9))


def gridbot_file(folder: Path) -> Path:
    """A small GridBot experiment, written as a user writes one (experiments/gridbot/testbed.toml is its full
    size)."""
    rows = [(f"{grid}-{k}", power, cpus, slots, group + 1)
            for group, (grid, power, cpus, slots, _) in enumerate(GRIDS) for k in (1, 2)]

    def column(i: int) -> str:
        return ", ".join(repr(row[i]) if not isinstance(row[i], str) else f'"{row[i]}"' for row in rows)

    groups = ", ".join(f"{{mttf = {mttf!r}, shape = 0.7, repair_mean = 150.0, repair_sd = 30.0}}"
                       for *_, mttf in GRIDS)
    path = folder / "gridbot.toml"
    path.write_text(f"""
[experiment]
name = "gridbot-testbed-test"
[workload]
kind = "bag_list"
class_names = ["job"]
granularity = [250.0]
[[workload.bags]]
at = 0.0
tasks = [{", ".join(f'["job", {size!r}]' for size in TASKS)}]
[machines]
names = [{column(0)}]
power = [{column(1)}]
cpus = [{column(2)}]
slots = [{column(3)}]
group = [{column(4)}]
attributes = {{grid = [{", ".join(f'"{row[0].rsplit("-", 1)[0]}"' for row in rows)}]}}
[availability]
kind = "weibull"
groups = [{groups}]
[policy]
name = "gridbot"
Concurrency = "2 * Host.NumCpus"
JobRequirements = 'Tail ? Host.Grid != "community" : true'
ReplicationRequirements = "Job.Replicas < 2"
max_replicas = 2
tail_threshold = 6
cycle = 20.0
[simulation]
horizon = 2000.0
warmup = 0.0
replications = 1
seed = 1
[testbed]
time_unit = {TIME_UNIT}
duration = 2.0
""")
    return path


def test_gridbot_on_real_pullers_in_three_grids_does_each_task_once_and_counts_the_discarded(tmp_path,
                                                                                            no_children_left):
    """Bounded: the pullers must register within the mapper's 60 s and the run drains for at most its drain
    time-out (30 s here); run_local stops and reaps every puller whatever happens."""
    exp = load_experiment(gridbot_file(tmp_path))
    out = tmp_path / "run"
    beside = run_local(exp, out, insecure=True)
    run = beside.run
    journal, core = run.journal, run.core
    assert isinstance(core.policy, GridBot)  # the mapper runs the policy object the simulator runs

    # every task done exactly once: one result used per task (the journal's), every record done, none cut off
    done = Counter(r.job for r in journal.replicas.values() if r.outcome == "done")
    assert sorted(done) == sorted(journal.jobs) and len(done) == len(TASKS) and set(done.values()) == {1}
    assert all(rec.status is JobStatus.DONE for rec in core.jobs.values()) and run.cut_off == []
    # every replica ended as the core ended it: none left "running" (then "cut off") in the journal, as a replica lost
    # to its host's failure was when its job ran elsewhere too, or had been done (a loser running on)
    ends = Counter(r.outcome for r in journal.replicas.values())
    assert set(ends) <= {"done", "lost", "discarded", "cancelled"}, ends
    records = {r.id: r for rec in core.jobs.values() for r in rec.history}
    assert all(records[rid].outcome is not None for rid in journal.replicas)
    with open(out / "jobs.csv", newline="") as f:
        rows = {int(row["ID"]): row for row in csv.DictReader(f)}
    assert sorted(rows) == sorted(journal.jobs) and {row["Status"] for row in rows.values()} == {"Done"}

    # the discarded: per job, its losers that ran on after it was done (the core's records), in jobs.csv; the
    # results they delivered are the journal's "discarded" ones; summary.json's waste counts them all
    losers = {jid: [r for r in rec.history if r.discarded] for jid, rec in core.jobs.items()}
    assert {jid: int(row["Discarded"]) for jid, row in rows.items()} == {jid: len(rs) for jid, rs in losers.items()}
    for jid, row in rows.items():
        assert float(row["Wasted Time"]) == pytest.approx(sum(r.charged_time for r in losers[jid]), abs=1e-5)
    delivered = Counter(r.job for r in journal.replicas.values() if r.outcome == "discarded")
    assert all(delivered[jid] <= len(losers[jid]) for jid in delivered)
    discarded = sum(len(rs) for rs in losers.values())
    assert discarded >= 1, "the tail's replicas leave losers that run on"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["waste"]["replicas"] == discarded
    # report.html: its bag row counts the bags (it read "undefined of undefined"), and its clock is the run's length
    # (a bag list's generation ends with its last arrival: it read "over 51 s of 0 s")
    page = (out / "report.html").read_text(encoding="utf-8")
    start = page.index("window.MGST_REPORT = ") + len("window.MGST_REPORT = ")
    report = json.loads(page[start:].split(";</script>")[0])
    assert (report["results"]["bags"]["done"], report["results"]["bags"]["arrived"]) == (1, 1)
    assert report["phase"] == "over" and report["duration_s"] >= report["elapsed_s"] > 1.0
    printed = format_beside(beside)
    assert "waste (losers kept after their job was done, charged until each ended: its result, discarded, a failure " \
        f"or its time-out): testbed {discarded} " \
           f"replica" in printed and "; simulation " in printed, printed

    # the tail replicated; the expressions never fell back, on the testbed and in the simulation beside it
    counts, simulated = summary["policy_counts"], summary["simulation"]["policy_counts"]
    assert counts["replicas_sent"] >= 1 and counts["tail_starts"] >= 1
    assert counts["fallbacks"] == 0 and simulated["fallbacks"] == 0

    # each grid played its own availability: the community hosts went down (each law's first DOWN comes before
    # the run's end), the cluster's never did
    periods = {m.name: sum(1 for p in m.periods if p[1] is not None) for m in journal.machines}
    end = (run.end - run.t0) / TIME_UNIT
    for j, m in enumerate(exp.machines):
        process = make_process(exp, run.seed, 0, j)
        assert process is not None
        first_up = process.next().duration
        if m.name.startswith("community") and first_up < end - 1.0 / TIME_UNIT:
            assert periods[m.name] >= 1, (m.name, first_up, end)
        if m.name.startswith("cluster"):
            assert periods[m.name] == 0
    assert any(periods[f"community-{k}"] for k in (1, 2)), (periods, end)

    # bundles: jobs waited on their hosts for a CPU, and that wait is no CPU share a host fell short of
    assert bundle_waits(run)
    assert summary["warnings"] == [] and "cpu_share" not in [c["kind"] for c in summary["gap"]["causes"]]

    # beside the simulation of the same bag and failures: its makespan on both sides
    (row,) = summary["bag_makespans"]
    assert row["tasks"] == len(TASKS) and row["testbed"] > 0 and row["simulation"] > 0


def test_a_job_waiting_on_its_host_for_a_cpu_is_no_share_shortfall(tmp_path):
    """share_shortfalls: a job of a bundle that waited half its time on its host for a CPU achieved half its
    machine's share over t4 to t5, which is what it was asked for; a job that achieved less still falls short."""
    exp = load_experiment(gridbot_file(tmp_path))
    cluster = next(j for j, m in enumerate(exp.machines) if m.name == "cluster-1")
    tu, t0 = TIME_UNIT, 1000.0

    def run_with(achieved: float) -> SimpleNamespace:
        # a replica computing over model [100, 500], waiting for a CPU for its first 200 of them
        replicas = {7: SimpleNamespace(machine=cluster, t4=t0 + 100.0 * tu, t5=t0 + 500.0 * tu,
                                       achieved_share=achieved)}
        history = [SimpleNamespace(id=7, machine=cluster, waited=200.0)]
        machines = [SimpleNamespace(name=m.name, share=m.availability) for m in exp.machines]
        return SimpleNamespace(experiment=exp, seed=1, time_unit=tu, t0=t0, end=t0 + 800.0 * tu,
                               journal=SimpleNamespace(replicas=replicas, machines=machines),
                               core=SimpleNamespace(jobs={0: SimpleNamespace(history=history)}))

    assert bundle_waits(run_with(0.5)) == {7: 200.0}
    assert share_shortfalls(run_with(0.5)) == []  # as asked: nothing while it waited, 1 for the other half
    (short,) = share_shortfalls(run_with(0.3))
    assert (short.name, short.jobs) == ("cluster-1", 1)
    assert (short.requested, short.achieved) == pytest.approx((0.5, 0.3))
