"""The Kondo experiment (mgst.papers.kondo): one run's Experiment and file, its metrics, and its sweep scenario."""

from __future__ import annotations

import csv
import math
import re

import pytest

from mgst.availability.trace import TraceAvailability
from mgst.config import load_experiment
from mgst.model import BagList, PolicySpec
from mgst.papers.kondo.experiment import experiment_toml, kondo_experiment
from mgst.papers.kondo.metrics import simulate_run
from mgst.sweep import parse_sweep, run_sweep


def write_platform(directory, clock: dict[str, float], lines: list[str]):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.csv").write_text("host,clock_ghz\n" + "".join(f"{h},{c}\n" for h, c in clock.items()))
    (directory / "availability.csv").write_text("machine,start,end,state,cpu_share\n" + "\n".join(lines) + "\n")
    return directory


DAY = 86_400


def small_platform(directory, hosts: int = 6):
    """``hosts`` hosts over five days (Monday to Friday): each loses an hour a day and runs at half share for
    another (host h at its own hours), clock rates 0.75 to 3 GHz."""
    clock = {f"H{h}": (0.75, 1.5, 3.0)[h % 3] for h in range(hosts)}
    lines = []
    for h in range(hosts):
        for d in range(5):
            down = d * DAY + 3600 * (8 + (h + d) % 9)
            half = d * DAY + 3600 * (10 + (2 * h + d) % 7)
            lines.append(f"H{h},{down},{down + 3600},down,")
            if abs(half - down) >= 3600:
                lines.append(f"H{h},{half},{half + 3600},up,0.5")
    return write_platform(directory, clock, sorted(lines, key=lambda x: (x.split(",")[0], float(x.split(",")[1]))))


def test_one_run_as_an_experiment(tmp_path):
    d = small_platform(tmp_path / "p")
    exp = kondo_experiment(d, "EXCL-S.5", 8, 15, 2 * DAY + 10 * 3600, history=3600.0, seed=4)
    assert [m.name for m in exp.machines] == [f"H{h}" for h in range(6)]
    assert exp.machines[2].rates == (2.0,) and exp.machines[2].attribute("clock_ghz") == 3.0  # 3 GHz / 1.5
    assert exp.policy == PolicySpec("excl_s", {"sd": 0.5})
    assert exp.failures == TraceAvailability(file=str((d / "availability.csv").resolve()), format="csv",
                                             offset=2 * DAY + 9 * 3600, machines="name")
    assert exp.workload == BagList(((3600.0, ((0, 900.0),) * 8),))  # 15 min = 900 s at 1.5 GHz, at the history's end
    assert exp.simulation.seed == 4


def test_the_experiment_file_is_the_same_run(tmp_path):
    d = small_platform(tmp_path / "p")
    args = (d, "EXCL-PRED-TO", 5, 5, DAY + 12 * 3600)
    path = tmp_path / "run.toml"
    path.write_text(experiment_toml(*args, history=7200.0, seed=3))
    loaded, built = load_experiment(path), kondo_experiment(*args, history=7200.0, seed=3)
    for field in ("classes", "machines", "policy", "failures", "workload", "simulation"):
        assert getattr(loaded, field) == getattr(built, field), field


def test_waste_counts_the_cpu_time_of_replicas_a_sibling_beat(tmp_path):
    # A: 1.5 GHz (power 1) at share 1; B: 3 GHz (power 2) at share 0.25, so 0.5 work per second. One task of
    # 10 min (600 work). EXCL-PRED predicts ceil(1/2) x 600 / mean rate 0.75 = 800 s; DUP gives the spare host a
    # replica. A finishes at 600 s; B's replica, cancelled then, did 0.5 x 600 = 300 work, 150 s of B's CPU.
    d = write_platform(tmp_path / "p", {"A": 1.5, "B": 3.0}, ["A,0,100000,up,1.0", "B,0,100000,up,0.25"])
    run = simulate_run(kondo_experiment(d, "EXCL-PRED-DUP", 1, 10, 1000.0, history=1000.0))
    assert (run.makespan, run.optimal, run.replicas) == (600.0, 600.0, 2)
    assert run.waste_cpu_s == pytest.approx(150.0) and run.waste == pytest.approx(0.5)
    assert run.predicted == pytest.approx(800.0) and run.prediction_error == pytest.approx(1 / 3)
    fcfs = simulate_run(kondo_experiment(d, "FCFS", 1, 10, 1000.0, history=1000.0))
    assert (fcfs.replicas, fcfs.waste_cpu_s) == (1, 0.0) and math.isnan(fcfs.prediction_error)


def sweep_data(platforms, **simulation):
    return {"scenario": "kondo", "name": "t",
            "axes": {"platform": ["sdsc"], "policy": ["FCFS", "EXCL-PRED-TO"], "tasks": ["100"], "task_minutes": ["5"]},
            "simulation": {"replications": 3, "seed": 2, **simulation},
            "options": {"platforms": str(platforms), "history": 3600.0}}


def test_the_sweep_runs_resumes_and_draws(tmp_path):
    small_platform(tmp_path / "platforms" / "sdsc", hosts=12)
    spec = parse_sweep(sweep_data(tmp_path / "platforms"), "t")
    # Replication k is the k-th start point: the same for every policy (paired), another for each k.
    cells = spec.cells()
    assert len(cells) == 2 * 3
    offsets = {(c.values[1], c.replication): spec.experiment(c).failures.offset for c in cells}
    assert offsets["FCFS", 1] == offsets["EXCL-PRED-TO", 1] != offsets["FCFS", 0]
    out = tmp_path / "out"
    result = run_sweep(spec, out, workers=1)
    assert not result.failed and result.computed == 6
    with open(out / "sweep.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6
    for r in rows:
        assert float(r["ratio"]) >= 1.0 - 1e-9
        assert float(r["ratio"]) == pytest.approx(float(r["makespan"]) / float(r["optimal"]))
    with open(out / "summary.csv") as f:
        summary = {r["policy"]: r for r in csv.DictReader(f)}
    assert set(summary) == {"FCFS", "EXCL-PRED-TO"}
    assert all(float(s["ratio_low"]) <= float(s["ratio"]) <= float(s["ratio_high"]) for s in summary.values())
    assert summary["FCFS"]["n"] == "3" and summary["FCFS"]["waste"] == "0.0"
    names = sorted(p.name for p in result.plots)
    assert {"ratio-sdsc.png", "waste-sdsc.png", "completions-sdsc.png"} <= set(names)
    again = run_sweep(spec, out, workers=1, plots=False)
    assert (again.skipped, again.computed) == (6, 0)


def test_a_sweep_file_without_run_settings(tmp_path):
    data = sweep_data(tmp_path)
    data["simulation"]["horizon"] = 10.0
    from mgst.config import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_sweep(data, "t", "f.toml")
    assert e.value.key == "simulation.horizon"


def test_the_claims_figures_are_paired(tmp_path):
    from mgst.papers.kondo.findings import better, ratio_to_optimal, read_runs

    head = "platform,policy,tasks,task_minutes,seed,replication,ratio,makespan,optimal,waste,prediction_error,error\n"
    rows = ["sdsc,FCFS,100,5,1,0,2.0,200,100,0,,", "sdsc,PRI-CR,100,5,1,0,1.0,100,100,0,,",
            "sdsc,FCFS,100,5,1,1,3.0,600,200,0,,", "sdsc,PRI-CR,100,5,1,1,2.0,400,200,0,,",
            "sdsc,FCFS,100,5,1,2,1.0,100,100,0,,",  # no PRI-CR run of this start point: left out of the pairs
            "sdsc,PRI-CR,100,5,1,3,,,,,,ValueError: x"]  # a failed cell: left out
    path = tmp_path / "sweep.csv"
    path.write_text(head + "\n".join(rows) + "\n")
    runs = read_runs([path])
    assert len(runs) == 5
    f = better(runs, "PRI-CR", "FCFS")  # FCFS / PRI-CR: 200 / 100 = 2, 600 / 400 = 1.5
    assert (f.mean, f.n) == (1.75, 2)
    assert ratio_to_optimal(runs, "FCFS").mean == 2.0


def test_sweep_csv_names_each_column_once(tmp_path):
    from mgst.papers.kondo.scenario import MEASURES
    from mgst.sweep.spec import RUN_COLUMNS

    axes = ("platform", "policy", "tasks", "task_minutes")
    columns = [*axes, *RUN_COLUMNS, *MEASURES.columns]
    assert len(columns) == len(set(columns))


def test_the_claims_compare_every_policy_on_the_same_start_points():
    from mgst.papers.kondo.findings import Run, balanced

    def run(policy, replication):
        return Run("sdsc", policy, 100, 5.0, "1", str(replication), 100.0, 1.0, 0.0, float("nan"))

    runs = [run("FCFS", 0), run("PRI-CR", 0), run("FCFS", 1)]  # start point 1 lacks PRI-CR's run
    assert [(r.policy, r.replication) for r in balanced(runs)] == [("FCFS", "0"), ("PRI-CR", "0")]


def test_the_policy_axis_takes_registered_policies_and_names_them_when_one_is_not(tmp_path):
    from mgst.config import ConfigError

    data = sweep_data(tmp_path)
    data["axes"]["policy"] = ["FCFS", "pri_cr_wait"]  # a slide's name, and a registered policy's
    assert dict(parse_sweep(data, "t").axes)["policy"] == ("FCFS", "pri_cr_wait")
    data["axes"]["policy"] = ["FCFS", "pri_cr_wiat"]
    with pytest.raises(ConfigError) as e:
        parse_sweep(data, "t", "f.toml")
    assert e.value.key == "axes.policy[1]"
    assert "pri_cr_wiat" in str(e.value) and "registered:" in str(e.value) and "excl_pred_to" in str(e.value)


def test_a_trace_host_without_a_clock_rate_is_an_error_not_a_smaller_platform(tmp_path):
    from mgst.availability.trace_files import TraceError

    d = write_platform(tmp_path / "p", {"H0": 1.5, "H1": 3.0}, ["H0,0,10,down,", "H1,0,10,down,", "H2,0,10,down,"])
    with pytest.raises(TraceError, match=re.escape(f"'H2' has no clock rate in {d / 'hosts.csv'}")):
        kondo_experiment(d, "FCFS", 2, 5, 3600.0, history=0.0)


def test_a_history_longer_than_the_trace_allows_names_the_option(tmp_path):
    from mgst.config import ConfigError

    small_platform(tmp_path / "platforms" / "sdsc")
    data = sweep_data(tmp_path / "platforms")
    data["options"]["history"] = 10.0 * DAY  # the trace spans five days: no start point has that much before it
    with pytest.raises(ConfigError) as e:
        run_sweep(parse_sweep(data, "t", "f.toml"), tmp_path / "out", workers=1)
    assert "options.history = 864000 s" in str(e.value) and "has only 0 start points" in str(e.value)
