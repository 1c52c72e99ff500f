"""The simulation beside every run: `mgst mapper` with real pullers (job classes and bags), the gap's measured
causes on hand-made runs, `mgst export` of runs that never started or were not closed, bag outputs."""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
import json
import math
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import read_until
from test_testbed_summary import hand_made_run

from mgst.bot_metrics import BagReplication, summarize_bags
from mgst.model import Experiment, FailureModel, JobClass, Machine, PolicySpec
from mgst.results import OVERLOADED_NOTE, Estimate, Summary
from mgst.testbed.export import LIVE_WITHIN_S, not_closed
from mgst.testbed.gap import DELAY_SHARE, STALL_SHARE, find_gap
from mgst.testbed.journal import Journal
from mgst.testbed.store import FILENAME, RunStore
from mgst.testbed.summary import summarize_testbed

ROOT = Path(__file__).resolve().parents[1]
RUN_LIMIT = 90.0  # seconds a mapper run (registration, generation, drain, the simulation beside it) may take
PNG = b"\x89PNG\r\n\x1a\n"
# A bag workload small enough for a few seconds on loopback: three pullers, ~10 bags of ~10 tasks at load 0.5.
BAGS_TOML = """
[experiment]
name = "bags-small"

[workload]
kind = "bags"
bag_rate = 0.04
application_size = 1000.0
mix = [100]
class_names = ["T"]
granularity = [100.0]

[machines]
power = [40.0, 20.0, 20.0]

[policy]
name = "rr_nrf"

[simulation]
horizon = 800.0
warmup = 0.0
replications = 1

[testbed]
time_unit = 0.01
duration = 3.0
"""


def mgst(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


def run_mapper(exp_file: Path, out: Path, names: list[str], extra: tuple[str, ...] = (),
               snapshot: Path | None = None) -> tuple[str, str]:
    """`mgst mapper` and one `mgst puller` per machine on loopback (--insecure: no keys needed for this); its
    stdout and stderr. With ``snapshot``, a consistent copy of the journal is taken while the run goes."""
    mapper = subprocess.Popen(
        [sys.executable, "-m", "mgst", "mapper", str(exp_file), "--bind", "tcp://127.0.0.1:0", "--out", str(out),
         "--insecure", "--quiet", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    pullers: list[subprocess.Popen] = []
    try:
        said = read_until(mapper, "listening on", 60)
        endpoint = said.split("listening on ")[1].split()[0]
        pullers = [subprocess.Popen([sys.executable, "-m", "mgst", "puller", "--connect", endpoint, "--machine", name,
                                     "--insecure"], stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for name in names]
        if snapshot is not None:
            take_snapshot(out / FILENAME, snapshot, mapper)
        stdout, stderr = mapper.communicate(timeout=RUN_LIMIT)
        assert mapper.returncode == 0, stderr[-3000:]
        assert [p.wait(timeout=15) for p in pullers] == [0] * len(names)
        return stdout, said + stderr
    finally:
        for p in [mapper, *pullers]:
            if p.poll() is None:
                p.kill()
            p.wait()


def take_snapshot(journal: Path, folder: Path, mapper: subprocess.Popen) -> None:
    """Copy the live journal (SQLite's backup: a consistent state) once it holds 20 completed jobs."""
    deadline = time.monotonic() + RUN_LIMIT
    while time.monotonic() < deadline and mapper.poll() is None:
        if journal.exists():
            src = sqlite3.connect(f"file:{journal}?mode=ro", uri=True)
            try:
                done = src.execute("SELECT count(*) FROM events WHERE kind = 'complete'").fetchone()[0]
                if done >= 20:
                    folder.mkdir()
                    dst = sqlite3.connect(folder / FILENAME)
                    src.backup(dst)
                    dst.close()
                    return
            except sqlite3.OperationalError:  # the table is not there yet
                pass
            finally:
                src.close()
        time.sleep(0.05)
    pytest.fail("the journal never held 20 completed jobs while the run went on")


# ---------------------------------------------------------------- acceptance: `mgst mapper`, real pullers


def test_mgst_mapper_sets_a_job_class_run_beside_its_simulation(tmp_path, no_children_left):
    """hihi-mfd-fd: the comparison table on stdout, the `simulation` and `comparison` keys, comparison.png; and
    `mgst export` of a copy of its journal taken mid-run says the run is still going, never "the drain limit"."""
    exp_file = tmp_path / "hihi-mfd-fd.toml"
    exp_file.write_text((ROOT / "experiments" / "hihi-mfd-fd.toml").read_text())
    out, live = tmp_path / "run", tmp_path / "live"
    stdout, _ = run_mapper(exp_file, out, [f"M{j}" for j in range(1, 7)], ("--duration", "2", "--time-unit", "0.2"),
                           snapshot=live)
    assert "hihi-mfd-fd: lpas_dg, testbed (" in stdout
    assert "beside simulation (10 x 10 time units), jobs submitted after 1 counted" in stdout  # (a tenth of 10)
    rows = [line.split()[0] for line in stdout.splitlines()]
    assert {"1", "2", "3", "4", "Overall"} <= set(rows), stdout
    assert "comparison.png" in stdout.splitlines()[-1]
    d = json.loads((out / "summary.json").read_text())
    assert d["mode"] == "testbed" and d["simulation"]["mode"] == "simulation" and d["simulation"]["replications"] == 10
    assert d["simulation"]["seed"] == d["seed"] and d["simulation"]["horizon"] == d["horizon"]
    assert [row["class"] for row in d["comparison"]] == ["1", "2", "3", "4", "Overall"]
    assert set(d["gap"]) == {"differences", "causes"}
    assert (out / "comparison.png").read_bytes()[:8] == PNG

    p = mgst("export", str(live))
    assert p.returncode == 0, p.stderr
    assert "the run is still going" in p.stderr or "the run was not closed" in p.stderr, p.stderr
    assert "drain limit" not in p.stdout + p.stderr
    assert "still in the system" in p.stdout
    assert json.loads((live / "summary.json").read_text())["closed"] is False


def test_mgst_mapper_sets_a_bag_run_beside_its_simulation(tmp_path, no_children_left):
    """A BoT file: the bag comparison with RWT in % and its interval, the bag count, summary.csv with AVT,
    makespan and RWT, bags.csv and comparison.png."""
    exp_file = tmp_path / "bags-small.toml"
    exp_file.write_text(BAGS_TOML)
    out = tmp_path / "run"
    stdout, _ = run_mapper(exp_file, out, ["M1", "M2", "M3"])
    assert "bags-small: rr_nrf, bags, testbed (" in stdout and "bags counted on the testbed" in stdout, stdout
    lines = {line.split()[0]: line for line in stdout.splitlines() if line.strip()}
    assert {"AVT", "MAKESPAN", "WAITING", "RWT"} <= set(lines), stdout
    assert lines["RWT"].count("%") >= 2, lines["RWT"]  # the value and its interval, in per cent
    assert lines["bags:"].startswith("bags: ") and " counted" in lines["bags:"]
    d = json.loads((out / "summary.json").read_text())
    # the warm-up it counted from, which a bag run may take from its length rather than the file (its header said none)
    assert f"counted (submitted after the warm-up, {d['warmup']:g})" in lines["bags:"], lines["bags:"]
    assert d["simulation"]["bags"]["bags"] >= 3 and d["bags"]["bags"] >= 3
    assert [row["metric"] for row in d["bag_comparison"]] == ["avt", "makespan", "waiting", "rwt"]
    rwt = d["bags"]["rwt"]
    assert rwt["ci95"][0] is not None and rwt["ci95"][0] <= rwt["mean"] <= rwt["ci95"][1], rwt
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # the testbed's rows, then the simulation's beside them (a spreadsheet had half the comparison)
    assert [(r["Mode"], r["Metric"]) for r in rows] == [(mode, m) for mode in ("testbed", "simulation")
                                                        for m in ("AVT", "Makespan", "Waiting", "RWT")]
    for mode, side in (("testbed", d["bags"]), ("simulation", d["simulation"]["bags"])):
        metrics = {row["Metric"]: row for row in rows if row["Mode"] == mode}
        assert float(metrics["AVT"]["Mean"]) == pytest.approx(side["avt"]["mean"], abs=1e-6)
        assert float(metrics["RWT"]["Mean"]) == pytest.approx(side["rwt"]["mean"], abs=1e-6)
        assert int(metrics["AVT"]["Bags"]) == side["bags"]
    assert (out / "comparison.png").read_bytes()[:8] == PNG and (out / "bags.csv").stat().st_size > 0
    # each task's bag, in the run's jobs.csv and in the simulation's: as many tasks a bag as bags.csv says
    with open(out / "bags.csv", newline="") as f:
        tasks = {r["Bag"]: int(r["Tasks"]) for r in csv.DictReader(f)}
    for name in ("jobs.csv", "simulation_jobs.csv"):
        with open(out / name, newline="") as f:
            assert Counter(r["Bag"] for r in csv.DictReader(f)) == tasks, name


# ---------------------------------------------------------------- the gap, on hand-made runs


def est(mean: float, half: float, jobs: int = 100) -> Estimate:
    return Estimate(jobs, mean, mean - half, mean + half)


def summary(mode: str, overall: Estimate) -> Summary:
    return Summary(experiment="hand-made", mode=mode, policy="fcfs", class_names=("a",), classes=(overall,),
                   overall=overall, mean_wait=(0.0,), machine_names=("M1", "M2"), utilisation=(0.5, 0.5),
                   replications=1, horizon=100.0, warmup=0.0, seed=0, load=None, jobs_simulated=100, unfinished=0,
                   elapsed_s=100.0)


def gap_run(achieved: list[list[float]], delays: dict | None = None, suspicions: tuple[int, int] = (0, 0)):
    """A hand-made run (two machines of requested share 1.0, time unit 1 s) with the journal's delays."""
    run = hand_made_run({0: [1.0, 2.0], 1: [1.0, 2.0]}, achieved)
    run.journal.delays = lambda: delays or {}
    for r in run.journal.replicas.values():
        r.machine, r.outcome = 0, "done"
    run.core.machines = [SimpleNamespace(cpus=1, stats=SimpleNamespace(busy_time=100.0, suspicions=s, discarded=0,
                                                                       discarded_time=0.0)) for s in suspicions]
    run.journal.first_start = 0.0
    for m in run.journal.machines:  # (up from the start to the end)
        m.periods = [(0.0, None)]
    return run


def test_a_machine_at_half_its_requested_share_is_named_as_a_cause():
    run = gap_run([[0.5, 0.5, 0.5], [1.0, 1.0]])
    gap = find_gap(run, summary("testbed", est(2.0, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [(d.what, d.relative) for d in gap.differences] == [("class a", 1.0), ("overall", 1.0)]
    assert [c.kind for c in gap.causes] == ["cpu_share"]
    assert gap.causes[0].figures == {"machine": "M1", "requested": 1.0, "achieved": 0.5, "jobs": 3}
    assert "machine M1 achieved a CPU share of 0.50 for the 1.00 requested" in gap.causes[0].text
    text = "\n".join(gap.describe())
    assert "differ beyond their intervals on: class a (+100.0%), overall (+100.0%)" in text and "M1" in text
    assert json.dumps(gap.as_dict())  # summary.json's "gap"


def test_a_run_without_a_gap_names_nothing():
    # the same half share, but the two agree within their intervals: nothing to explain
    run = gap_run([[0.5, 0.5, 0.5], [1.0, 1.0]], suspicions=(2, 0))
    gap = find_gap(run, summary("testbed", est(1.1, 0.2)), summary("simulation", est(1.0, 0.05)))
    assert gap.differences == [] and gap.causes == [] and gap.describe() == []
    assert gap.as_dict() == {"differences": [], "causes": []}


def test_a_testbed_better_than_its_model_names_no_slowdown_as_its_cause():
    # the same half share and suspicions, but the testbed did better than simulated: a slowdown cannot explain it
    run = gap_run([[0.5, 0.5, 0.5], [1.0, 1.0]], suspicions=(2, 0))
    gap = find_gap(run, summary("testbed", est(0.5, 0.05)), summary("simulation", est(1.0, 0.05)))
    assert [(d.what, d.relative) for d in gap.differences] == [("class a", -0.5), ("overall", -0.5)]
    assert gap.causes == []
    text = "\n".join(gap.describe())
    assert "overall (-50.0%)" in text and "the testbed did better than the model" in text and "cause:" not in text


def test_a_machine_down_for_much_of_the_run_is_named_as_a_cause():
    """A puller killed and not started again (M2 up for 100 s of a 1,010 s run, in an experiment without failures):
    the summary said 'no measured cause ... all as the model assumes'."""
    run = gap_run([[1.0], [1.0]])
    run.journal.machines[1].periods = [(0.0, 100.0)]
    gap = find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["downtime"]
    assert gap.causes[0].figures == {"share_by_machine": {"M2": pytest.approx(910 / 1010, abs=1e-6)},
                                     "law_by_machine": {"M2": 0.0}}
    assert "machines down for M2 90% of the run, which the model, without failures, does not have" in \
        gap.causes[0].text
    run.journal.machines[1].periods = [(0.0, 950.0)]  # (down 6 % of the run: not named)
    assert find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05))).causes == []


def test_a_mean_without_an_interval_is_no_difference_and_a_class_without_jobs_is_n_a_not_nan():
    """A testbed class with one job counted has a mean but no interval: tested against the simulation's interval
    of a mean, a single sample's distance was called a difference beyond the intervals (a statistician's run:
    +91 % on one job the model's replication 0 gave within 5 %). Nothing can be said: no difference. A class with
    no job counted on the testbed printed nan and +nan% in the comparison table."""
    from mgst.analysis.compare import format_comparison  # noqa: PLC0415

    nan = math.nan
    one_job = Estimate(1, 0.119, nan, nan, "none")
    run = gap_run([[1.0, 1.0], [1.0, 1.0]])
    gap = find_gap(run, summary("testbed", one_job), summary("simulation", est(0.062, 0.035)))
    assert gap.differences == []
    # the other way round too, and intervals that overlap are still no difference, disjoint ones are
    gap = find_gap(run, summary("testbed", est(0.119, 0.01)), summary("simulation", Estimate(1, 0.062, nan, nan)))
    assert gap.differences == []
    gap = find_gap(run, summary("testbed", est(0.119, 0.01)), summary("simulation", est(0.062, 0.035)))
    assert [d.what for d in gap.differences] == ["class a", "overall"]
    gap = find_gap(run, summary("testbed", est(0.119, 0.01)), summary("simulation", est(0.062, 0.06)))
    assert gap.differences == []
    nothing = Estimate(0, nan, nan, nan, "none")
    sim = summary("simulation", est(0.072, 0.043))
    text = format_comparison(dataclasses.replace(summary("testbed", est(0.1, 0.01)), classes=(nothing,)), sim)
    assert "nan" not in text, text
    row = text.splitlines()[2].split()
    assert row[:2] == ["a", "n/a"] and row[-1] == "0.115)", row  # no difference printed beside it
    assert text.splitlines()[-1] == "n/a: no job of the class counted on that side"


def test_a_machine_down_beyond_its_failure_law_is_named_and_its_law_s_own_downs_are_not():
    """With failures (up 50, down 2 on average: 3.8 % down), a puller killed and M6 down 70 % of the run was said
    with every machine down a tenth of the run, as 'the experiment's failures included, which the model has too'."""
    run = gap_run([[1.0], [1.0]])
    run.experiment = dataclasses.replace(run.experiment, failures=FailureModel(50.0, 2.0))
    for r in run.journal.replicas.values():  # (with failures, the shares are read per result)
        r.achieved_share = None
    run.journal.machines[0].periods = [(0.0, 400.0), (450.0, 890.0), (900.0, None)]  # down 60 s: 5.9 %, its law's
    run.journal.machines[1].periods = [(0.0, 300.0)]  # killed at 300: 70 % down
    gap = find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["downtime"]
    assert "than their failure law has them: M2 70% (its law: 4%)" in gap.causes[0].text, gap.causes[0].text
    assert list(gap.causes[0].figures["share_by_machine"]) == ["M2"]


def test_every_machine_down_at_once_is_named_though_each_alone_stays_under_its_share():
    """A partition of the head node's network (mgst's relay frozen 5 s): every machine down 4.2 s of a 45 s run at
    once, 9 % each, under DOWN_SHARE alone: the mean response +499 % and only the delays named. The run here: 1,010
    s, both machines down together from 400 to 460 s (5.9 %), M1 alone also 600-620 s; a mapper's outage (both down
    while it was) is not theirs, and an emulated loss is named in the downtime's hint."""
    run = gap_run([[1.0], [1.0]])
    run.journal.machines[0].periods = [(0.0, 400.0), (460.0, 600.0), (620.0, None)]
    run.journal.machines[1].periods = [(0.0, 400.0), (460.0, 800.0), (820.0, None)]
    gap = find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["all_down"]
    assert gap.causes[0].figures == {"seconds": 60.0, "share": pytest.approx(60.0 / 1010.0, abs=1e-6),
                                     "law_share": 0.0}
    assert gap.causes[0].text.startswith("every machine was down at once for 60 s (5.9% of the run): the head node's")
    # the same stretch in a mapper's outage (its pullers' periods cut by it): not the machines'
    run.journal.outages = [(395.0, 465.0)]
    assert [c.kind for c in find_gap(run, summary("testbed", est(3.0, 0.1)),
                                     summary("simulation", est(1.0, 0.05))).causes] == []
    # one machine down long, behind an emulated loss: the hint names the loss, not a killed puller
    run.journal.outages = []
    run.journal.machines[0].periods = [(0.0, 300.0), (700.0, None)]
    run.journal.machines[1].periods = [(0.0, None)]
    run.network = {"loss_percent": 20.0}
    causes = find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05))).causes
    assert [c.kind for c in causes] == ["downtime"]
    assert "(the emulated network's loss, 20 %, drops heartbeats" in causes[0].text and "killed" not in causes[0].text


def test_a_run_with_many_jobs_cut_off_is_not_said_to_beat_its_model():
    """Most jobs cut off (no machine served them): the means are of the few done, and the summary said 'the testbed
    did better than the model'."""
    run = gap_run([[1.0], [1.0]])
    run.cut_off = [0, 1]  # of the 4 jobs generated
    text = "\n".join(find_gap(run, summary("testbed", est(0.5, 0.05)), summary("simulation", est(1.0, 0.05))
                              ).describe())
    assert "2 of the 4 jobs were cut off" in text and "did better" not in text, text


def test_no_interval_on_either_side_is_no_verdict():
    nan = Estimate(1, 2.0, math.nan, math.nan)
    assert find_gap(gap_run([[0.5], [1.0]]), summary("testbed", nan), summary("simulation", nan)).differences == []


def test_delays_and_suspicions_are_named_when_they_are_there():
    # 40 ms of the mapper's own delays per job against a mean response of 1.5 s: 2.7 %, above DELAY_SHARE; the
    # request's 10 ms not among them (a busy puller's request is its previous result's message: the report's delay)
    delays = {"request_delay_s": {"mean": 0.01}, "scheduling_delay_s": {"mean": 0.015},
              "communication_delay_s": {"mean": 0.015}, "report_delay_s": {"mean": 0.01}}
    assert 0.04 / 1.5 > DELAY_SHARE
    run = gap_run([[1.0], [1.0]], delays, suspicions=(0, 3))
    gap = find_gap(run, summary("testbed", est(1.5, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["delays", "suspicions"]
    assert "add 40 ms to each job" in gap.causes[0].text and "communication (t4-t3) 15 ms" in gap.causes[0].text
    assert "(request (t2-t1) 10 ms not added: a busy puller asks with its previous result" in gap.causes[0].text
    assert gap.causes[1].figures == {"by_machine": {"M2": 3}}
    # the same delays against responses 100 times longer are not a cause
    gap = find_gap(run, summary("testbed", est(150.0, 10.0)), summary("simulation", est(100.0, 5.0)))
    assert [c.kind for c in gap.causes] == ["suspicions"]
    # ...unless the jobs compute little: 40 ms held on a machine each job that computes 100 ms is 40 % more load,
    # which near saturation makes the responses long (a +919 % gap read as "no measured cause")
    for r in run.journal.replicas.values():
        r.t4, r.t5 = 1.0, 1.1
    gap = find_gap(run, summary("testbed", est(150.0, 10.0)), summary("simulation", est(100.0, 5.0)))
    assert [c.kind for c in gap.causes][:1] == ["delays"] and "suspicions" in [c.kind for c in gap.causes]
    assert "40.0% of the mean time a job computes" in gap.causes[0].text, gap.causes[0].text
    assert gap.causes[0].figures["share_of_compute"] == pytest.approx(0.4)


def test_time_outs_and_refusals_are_named():
    run = gap_run([[1.0], [1.0]])
    run.journal.jobs[0].timed_out = True
    run.journal.replicas = {r: SimpleNamespace(replica=r, job=0, machine=m, outcome=outcome, t2=None, t3=t3, t4=None,
                                               t5=None, t6=t6)
                            for r, m, outcome, t3, t6 in [(0, 0, "timeout", 1.25, 2.0), (1, 1, "refused", 1.75, None),
                                                          (2, 1, "refused", 2.0, None)]}
    run.journal.machines[1].expelled = (5.0, "its allow-list refused this run's commands 3 times")
    gap = find_gap(run, summary("testbed", est(1.5, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["timeouts", "refusals"]
    assert gap.causes[0].figures == {"jobs": 1, "replicas_by_machine": {"M1": 1}}
    assert gap.causes[1].figures == {"by_machine": {"M2": 2}, "expelled": ["M2"]}


# ---------------------------------------------------------------- outputs


def test_outage_times_in_the_summary_are_iso_times_with_their_offset():
    run = hand_made_run({0: [1.0, 2.0], 1: [1.0]}, [[], []])
    run.utc_offset_s = 19800.0  # (the head node's at the run's start, +05:30, as its journal recorded it)
    crashed, resumed = 1_790_000_000.25, 1_790_000_012.75
    run.journal.outages = [(crashed, resumed)]
    _, extras = summarize_testbed(run)
    (outage,) = extras["outages"]
    start, end = dt.datetime.fromisoformat(outage["from"]), dt.datetime.fromisoformat(outage["to"])
    assert start.tzinfo is not None and end.tzinfo is not None
    assert (start.timestamp(), end.timestamp(), outage["seconds"]) == (crashed, resumed, 12.5)
    # jobs.csv's local time (1_790_000_000.25 is 2026-09-21 14:13:20.25 UTC: 19:43:20.25 at +05:30), offset added
    assert extras["local_time_utc_offset"] == "+05:30"
    assert outage["from"] == "2026-09-21 19:43:20.250000+05:30"


def test_one_replication_of_bags_gives_rwt_an_interval():
    # four bags' (wasted, replica) times: RWT = 10 / 100, and the bags' ratios vary, so the interval has width
    times = [(1.0, 20.0), (4.0, 30.0), (0.0, 10.0), (5.0, 40.0)]
    rep = BagReplication(0, [5.0] * 4, [1.0] * 4, [4.0] * 4, 10.0, 100.0, 8, 9, 4, 0, 1.0, 0.0, bag_times=times)
    rwt = summarize_bags([rep]).rwt
    assert rwt is not None and rwt.mean == pytest.approx(0.1)
    assert rwt.low < 0.1 < rwt.high
    # by hand: linearised values r + (w - r t) / mean(t) with mean(t) = 25, one bag per batch, t(3) = 3.182
    values = [0.1 + (w - 0.1 * t) / 25.0 for w, t in times]
    mean = sum(values) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    assert rwt.high - rwt.mean == pytest.approx(3.182 * sd / 2, rel=1e-3)


# ---------------------------------------------------------------- `mgst export` of runs that never started


def test_export_of_a_run_that_never_started_says_so(tmp_path):
    """A journal whose pullers never all registered (what a mapper stopped while waiting leaves): a clear
    error and a non-zero exit, and no table of NaNs."""
    exp = Experiment(name="never", classes=(JobClass("a", 1.0),), machines=(Machine("M1", (2.0,)),),
                     policy=PolicySpec("fcfs"))
    from mgst.testbed.experiment_codec import to_plain  # noqa: PLC0415

    store = RunStore(tmp_path / FILENAME, create=True)
    store.set_meta(experiment=to_plain(exp), seed=0, duration=10.0, time_unit=1.0, executor="emulate",
                   failures=False, imports=[], security="curve", created=time.time())
    Journal(exp, store).tick(time.time())
    store.commit()
    store.close()
    p = mgst("export", str(tmp_path))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert p.stderr.strip() == (f"mgst: error: {tmp_path / FILENAME}: the run never started (its pullers did not all "
                                "register, so no job was generated): there is nothing to export")
    assert p.stdout == "" and not (tmp_path / "summary.json").exists()


def test_a_journal_left_long_ago_is_a_run_that_was_not_closed():
    run = SimpleNamespace(end=1000.0)
    assert not_closed(run, now=1000.0 + LIVE_WITHIN_S / 2).startswith("the run is still going")
    said = not_closed(run, now=1000.0 + 10 * LIVE_WITHIN_S)
    assert said.startswith("the run was not closed: its mapper stopped writing 100 s ago") and "--resume" in said


def test_a_difference_from_a_simulated_zero_is_shown_without_nan():
    """RWT is 0 in a simulation without waste; a testbed run with some differs beyond the intervals, and its
    relative difference has no value: the line shows both figures, not "+nan%"."""
    from mgst.testbed.gap import Difference, Gap  # noqa: PLC0415

    text = "\n".join(Gap([Difference("RWT", 0.0125, 0.0, math.nan)], []).describe())
    assert "nan" not in text.lower() and "RWT (0.0125 against 0)" in text, text


def test_a_late_result_that_counts_makes_its_lost_replica_done_in_the_journal():
    """A replica given up as lost whose result then arrives and completes the job (the core takes a late result)
    is the job's done replica: the journal said "lost" for it and no replica of the job "done" (a full suite run
    caught it: 231 done replicas for 232 done jobs)."""
    exp = Experiment(name="late", classes=(JobClass("1", 1.0),), machines=(Machine("M1", (1.0,), 1.0),),
                     policy=PolicySpec("fcfs"))
    journal = Journal(exp)
    journal.began(1000.0)
    journal.job_arrived(SimpleNamespace(id=7, job_class=0, submitted=1.0, size=1.0, bag=None), 1001.0)
    journal.sent(3, 7, 0, None, None, 1001.1)
    journal.started(3, 1001.2, 1001.2)
    journal.end("lost", 3)
    assert journal.replicas[3].outcome == "lost"
    journal.reported_done(3, 1001.2, 1001.2, 1002.0, 1003.0, 1.0)
    journal.completed(7, 3, 0)
    journal.end("done", 3)  # (the mapper's usual end of a done replica: nothing more to change)
    assert journal.replicas[3].outcome == "done" and journal.jobs[7].done_by == 3


def test_the_mapper_s_stalls_are_named_with_the_longest_when_they_last_long_enough():
    """Stalls of the mapper's loop (from its journal) are a cause when they last STALL_SHARE of the run or more:
    how many, their sum, the longest and when."""
    run = gap_run([[1.0], [1.0]])  # a run of 1,010 s
    assert STALL_SHARE * (run.end - run.t0) == pytest.approx(20.2)
    run.journal.stalls = [(30.0, 2.5), (107.1, 19.12)]  # 21.62 s
    gap = find_gap(run, summary("testbed", est(1.5, 0.1)), summary("simulation", est(1.0, 0.05)))
    assert [c.kind for c in gap.causes] == ["stalls"]
    assert gap.causes[0].figures == {"count": 2, "total_s": 21.62, "longest_s": 19.12, "longest_at_s": 107.1,
                                     "share_of_run": round(21.62 / 1010, 6)}
    assert "the mapper's loop stalled 2 times, 21.6 s in all (the longest 19.1 s, 107 s into the run)" in (
        gap.causes[0].text)
    for short in ([(30.0, 2.5), (107.1, 17.0)], []):  # 19.5 s, under 2 % of the run; none
        run.journal.stalls = short
        assert find_gap(run, summary("testbed", est(1.5, 0.1)), summary("simulation", est(1.0, 0.05))).causes == []


@pytest.mark.parametrize("cut_off, drain", [([], None), ([7, 9], 2.5)], ids=["drained", "cut off"])
def test_the_simulation_beside_a_run_cut_off_is_cut_at_the_same_model_time(monkeypatch, cut_off, drain):
    """A run whose drain was cut with jobs unfinished (an interrupt, the drain time-out) at model time 12.5, its
    arrivals to 10: the simulation beside it drains to 12.5 too (2.5 past its horizon), so that both count the jobs
    done by then; one that drained every job leaves the simulation its own drain."""
    import mgst.testbed.beside as beside

    seen = {}

    def simulated(experiment, **kwargs):
        seen.update(kwargs)
        return "summary", []

    monkeypatch.setattr(beside, "run_simulation", simulated)
    run = hand_made_run({0: [1.0]}, [[], []])
    run.cut_off = cut_off
    run.core.now = 12.5
    testbed = SimpleNamespace(horizon=10.0)
    assert beside.simulate_beside(run, testbed, replications=2) == ("summary", [], [])
    assert (seen["horizon"], seen["drain_limit"], seen["rows_of"]) == (10.0, drain, 0)


def test_jobs_that_computed_longer_than_the_model_s_time_are_a_cause():
    """Each job computed 50 ms more than the model's time for it at its machine's rate and share (t5 - t4), against
    a mean response of 1 s: 5 %, named (the executor's own cost); 5 ms, 0.5 %, is not; a machine named for a CPU
    share short of the requested is left out (its longer computing is that cause)."""
    from mgst.config import load_experiment
    from mgst.model import Job
    from mgst.testbed.gap import OVERRUN_SHARE, _overrun

    exp = load_experiment(Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml")
    m0 = exp.machines[0]
    computing = 1.0 / (m0.rates[0] * m0.availability)  # wall s at time unit 1

    def run_with(extra: float, experiment: Experiment = exp) -> SimpleNamespace:
        journal = Journal(experiment)
        journal.began(0.0)
        for k in range(10):
            t = 10.0 * k
            journal.job_arrived(Job(k, 0, t, 1.0), t)
            journal.sent(k, k, 0, None, None, t)
            journal.reported_done(k, t, t, t + computing + extra, t + computing + extra, m0.availability)
            journal.completed(k, k, 0)
        journal.correct()
        return SimpleNamespace(journal=journal, time_unit=1.0)

    cause = _overrun(run_with(0.05), 1.0, set())
    assert cause is not None and cause.kind == "overrun" and cause.figures["jobs"] == 10
    assert cause.figures["mean_s"] == pytest.approx(0.05, abs=1e-6) and m0.name in cause.text
    assert 0.005 < OVERRUN_SHARE * 1.0 < 0.05
    assert _overrun(run_with(0.005), 1.0, set()) is None
    assert _overrun(run_with(0.05), 1.0, {m0.name}) is None
    # On a host with fewer CPUs than slots a bundle's job waits for one between t4 and t5 (the model's own wait):
    # not measured as overrun.
    bundles = dataclasses.replace(exp, machines=(dataclasses.replace(m0, slots=2, cpus=1), *exp.machines[1:]))
    assert _overrun(run_with(0.05, bundles), 1.0, set()) is None


def test_a_resumed_run_says_so_where_its_figures_are_printed():
    """A killed and resumed run's table, jobs line and summary.csv read as a run that never stopped; its outage and
    the jobs caught in it (not counted) were in summary.json alone."""
    from mgst.testbed.beside import Beside, format_beside  # noqa: PLC0415

    run = gap_run([[1.0], [1.0]])
    tb = summary("testbed", est(1.0, 0.1))
    d = {"delays": {"communication_delay_s": {"median": None}}, "jobs_generated": 10, "jobs_done": 10, "cut_off": [],
         "requeues": 0, "timeouts": 0, "jobs_across_outage": 3,
         "outages": [{"from": "a", "to": "b", "seconds": 12.25}, {"from": "c", "to": "d", "seconds": 3.0}]}
    text = format_beside(Beside(run, tb, None, None, d, []))
    assert "resumed after 2 outages of its mapper (15.2 s in all, model time standing still): 3 jobs caught in one " \
           "not counted (jobs.csv: Counted No; its times include the outage)" in text, text
    d["outages"], d["jobs_across_outage"] = [], 0
    assert "resumed" not in format_beside(Beside(run, tb, None, None, d, []))


def test_a_testbed_faster_than_its_model_names_jobs_that_computed_less_than_their_size():
    """A command executor running /bin/true for every job: jobs computed 2 ms against a model's 0.99, the testbed
    98 % faster, and the gap said 'the model is pessimistic', though the journal measured it. Here each job computes
    0.01 s where the model has 0.5 s (size 1 at rate 2)."""
    run = gap_run([[1.0], [1.0]])
    for r in run.journal.replicas.values():
        r.t4, r.t5 = r.t3, r.t3 + 0.01
    gap = find_gap(run, summary("testbed", est(0.5, 0.05)), summary("simulation", est(1.0, 0.05)))
    assert [d.slower for d in gap.differences] == [False, False]
    assert [c.kind for c in gap.causes] == ["underrun"]
    assert gap.causes[0].figures["mean_s"] == pytest.approx(-0.49)
    text = "\n".join(gap.describe())
    assert "cause: jobs computed 490 ms shorter than the model's time for them on average" in text
    assert "the model is pessimistic" not in text
    for r in run.journal.replicas.values():  # as the model has them: nothing to name
        r.t5 = r.t3 + 0.5
    gap = find_gap(run, summary("testbed", est(0.5, 0.05)), summary("simulation", est(1.0, 0.05)))
    assert gap.causes == [] and "the model is pessimistic" in "\n".join(gap.describe())


def test_the_jobs_line_tells_resubmissions_from_jobs_that_timed_out():
    """'638 resubmitted (638 timed out), 541 timed out' read as a contradiction: the first counts resubmissions, the
    second jobs (a job resubmitted twice on time-outs is one T/O job)."""
    from mgst.testbed.beside import Beside, format_beside  # noqa: PLC0415

    run = gap_run([[1.0], [1.0]])
    d = {"delays": {"communication_delay_s": {"median": None}}, "jobs_generated": 10, "jobs_done": 10, "cut_off": [],
         "requeues": 5, "requeues_by_cause": {"timeout": 5}, "timeouts": 3}
    text = format_beside(Beside(run, summary("testbed", est(1.0, 0.1)), None, None, d, []))
    assert "5 resubmitted (5 on a replica's time-out), 3 jobs timed out at least once (T/O)" in text, text


def test_the_comparison_sets_replication_0_and_the_replications_spread_beside_the_testbed():
    """The Diff. is against the mean of the simulation's replications: for an unstable setting it is mostly their
    spread (WQR-FT on hihi-mpd-fe: -33 % where replication 0, the testbed's very jobs, gave +13 %, its replications'
    means from 3.96 to 13.1). The table says replication 0 and the range; summary.json's comparison has them."""
    from mgst.analysis.compare import comparison, format_comparison  # noqa: PLC0415

    nan = math.nan
    testbed = summary("testbed", est(5.772, 2.6))
    sim = dataclasses.replace(summary("simulation", est(8.658, 2.1)), replications=4,
                              replication_means=((5.106, 10.656, nan, 3.96), (5.106, 10.656, 8.709, 3.96)))
    text = format_comparison(testbed, sim)
    assert text.splitlines()[-1] == ("simulation, overall: replication 0, on the testbed's very jobs, 5.106 (testbed "
                                     "+13.0%); the 4 replications' means range from 3.960 to 10.656"), text
    rows = comparison(testbed, sim)
    assert [r["simulation_replication_0"] for r in rows] == [5.106, 5.106]
    assert [r["simulation_replications_range"] for r in rows] == [[3.96, 10.656], [3.96, 10.656]]
    # one replication (a bag's, a trace's: compared with replication 0 alone) says nothing more
    one = dataclasses.replace(sim, replications=1, replication_means=((8.658,), (8.658,)))
    assert "replication 0" not in format_comparison(testbed, one)
    assert all("simulation_replication_0" not in r for r in comparison(testbed, one))


def test_a_side_that_fell_behind_is_said_by_its_name_and_the_setting_s_overload_once():
    from mgst.analysis.compare import format_comparison  # noqa: PLC0415

    lp = "overloaded: the allocation LP gives lambda* = 0.91"
    testbed, sim = summary("testbed", est(5.0, 1.0)), summary("simulation", est(4.0, 1.0))
    text = format_comparison(dataclasses.replace(testbed, overloaded=lp), dataclasses.replace(sim, overloaded=lp))
    assert [line for line in text.splitlines() if "WARNING" in line] == [f"WARNING: {lp}; {OVERLOADED_NOTE}"]
    grew = "response times grow through the run under this policy (...)"
    text = format_comparison(dataclasses.replace(testbed, overloaded=grew), sim)
    assert [line for line in text.splitlines() if "WARNING" in line] == [
        f"WARNING, on the testbed: {grew}; {OVERLOADED_NOTE}"]
    text = format_comparison(testbed, dataclasses.replace(sim, overloaded=grew))
    assert [line for line in text.splitlines() if "WARNING" in line] == [
        f"WARNING, in simulation: {grew}; {OVERLOADED_NOTE}"]


def test_a_gap_between_sides_without_a_steady_state_says_it_depends_on_the_run_s_length():
    run = gap_run([[1.0, 1.0], [1.0, 1.0]])
    grew = "response times grow through the run under this policy (...)"
    steady = find_gap(run, summary("testbed", est(3.0, 0.1)), summary("simulation", est(1.0, 0.05)))
    unsteady = find_gap(run, summary("testbed", est(3.0, 0.1)),
                        dataclasses.replace(summary("simulation", est(1.0, 0.05)), overloaded=grew))
    assert steady.differences == unsteady.differences and steady.differences
    assert not any("steady state" in line for line in steady.describe()) and "no_steady_state" not in steady.as_dict()
    assert unsteady.describe()[1].startswith("  with no steady state (the WARNING above), the means grow")
    assert unsteady.as_dict()["no_steady_state"] is True
