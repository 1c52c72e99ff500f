"""mgst sweep: the sweep file, local and Dask runs with a fake cell, resume, errors, Ctrl-C, summary and plots."""

from __future__ import annotations

import csv
import dataclasses
import gc
import logging
import math
import os
import signal
import subprocess
import sys
import time
import weakref
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import pytest
import sweep_fake

from mgst import worker_memory
from mgst.cli import main
from mgst.config import ConfigError
from mgst.model import BagList, BagStream, JobClass, PoissonClasses, SimulationSettings, SwfTrace
from mgst.papers.anglano import scenario as anglano
from mgst.sweep import SweepError, estimated_cost, run_cell, run_sweep
from mgst.sweep.plots import UNBOUNDED, figure
from mgst.sweep.results import ResultLog, summarize
from mgst.sweep.spec import load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "experiments" / "bot" / "anglano-sweep.toml"
AXES = ["policy", "availability", "heterogeneity", "mix", "intensity"]
KEYS = [*AXES, "seed", "replication"]
METRICS = ["avt", "avt_ci", "makespan", "makespan_ci", "waiting", "waiting_ci", "rwt", "bags", "tasks", "unbounded",
           "wall_s"]
# The file's [quick] preset: 3 policies x high x 2 heterogeneities x 2 mixes x low (cells), 2 replications each.
QUICK_CELLS = 3 * 2 * 2
T_975_1 = 12.706204736174707  # Student t, 97.5 % quantile, 1 degree of freedom (tables)


def quick(**kw):
    return load_sweep(FILE, quick=True, **kw)


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv", newline="") as f:
        return list(csv.DictReader(f))


def key(row: dict[str, str]) -> tuple[str, ...]:
    return tuple(row[k] for k in KEYS)


def marked(folder: Path, run: str) -> list[tuple[str, ...]]:
    """(experiment name, replication) of every call of the marking fake in ``run``."""
    return sorted(tuple(p.name.split(".")[1:3]) for p in folder.iterdir() if p.name.startswith(run + "."))


class Recording:
    """A fake that appends ``experiment-name replication`` to a file as each call starts (the order cells ran in)."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, experiment, replication):
        with open(self.path, "a") as f:
            f.write(f"{experiment.name} {replication}\n")
        return sweep_fake.metrics(experiment, replication)


def recorded(path: Path) -> list[tuple[str, str, str, str]]:
    """(mix, heterogeneity, policy, replication) of each recorded call, in call order."""
    out = []
    for line in path.read_text().splitlines():
        name, rep = line.split()
        _, _, heterogeneity, mix, _, policy = name.split("-", 5)
        out.append((mix, heterogeneity, policy, rep))
    return out


# The quick preset's cells, longest first: All_M bags hold 5x the tasks of All_L bags, and the
# heterogeneous grid's bag rate is a little higher (its sum of EP is); equal costs stay in grid order.
LONGEST_FIRST = [(mix, het, policy, rep) for mix in ("All_M", "All_L") for het in ("heterogeneous", "homogeneous")
                 for policy in ("fcfs_excl", "fcfs_share", "rr") for rep in ("0", "1")]


def cell_name(row: dict[str, str]) -> tuple[str, str]:
    return (f"anglano-{row['availability']}-{row['heterogeneity']}-{row['mix']}-{row['intensity']}-{row['policy']}",
            row["replication"])


# --- the sweep file -------------------------------------------------------------------------------

def test_the_shipped_file_is_the_full_grid():
    spec = load_sweep(FILE)
    assert spec.scenario.name == "anglano" and spec.name == "anglano"
    assert len(spec.cells()) == 5 * 3 * 2 * 8 * 3 * spec.replications
    assert spec.columns == tuple(KEYS)
    assert len(quick().cells()) == QUICK_CELLS * 2


def test_filters_seeds_and_replications():
    spec = quick(only=["policy=rr,fcfs_excl", "heterogeneity=heterogeneous"])
    assert {(c.values[0], c.values[2]) for c in spec.cells()} == {("rr", "heterogeneous"),
                                                                 ("fcfs_excl", "heterogeneous")}
    assert len(spec.cells()) == 2 * 2 * 2
    assert len(quick(replications=5).cells()) == QUICK_CELLS * 5
    assert [c.replication for c in quick(only=["replication=1"]).cells()] == [1] * QUICK_CELLS
    data = {"scenario": "anglano", "axes": {"policy": ["rr"], "availability": "low", "heterogeneity": ["homogeneous"],
                                            "mix": ["All_S"], "intensity": ["high"]},
            "simulation": {"horizon": 100.0, "checkpoint_interval": 10.0, "seeds": [3, 5], "replications": 2}}
    spec = parse_sweep(data, "x")
    assert [(c.seed, c.replication) for c in spec.cells()] == [(3, 0), (3, 1), (5, 0), (5, 1)]
    assert spec.experiment(spec.cells()[2]).simulation.seed == 5


@pytest.mark.parametrize("change, key", [
    (lambda d: d.update(scenarios="anglano"), "scenarios"),
    (lambda d: d.pop("scenario"), "scenario"),
    (lambda d: d.update(scenario="no_such_scenario"), "scenario"),
    (lambda d: d["axes"].update(mix=["All_M", "All_XL"]), "axes.mix[1]"),
    (lambda d: d["axes"].update(mixes=["All_M"]), "axes.mixes"),
    (lambda d: d["axes"].update(policy=["rr", "rr"]), "axes.policy[1]"),
    (lambda d: d["axes"].update(policy=["no_such_policy"]), "axes.policy[0]"),
    (lambda d: d["axes"].update(intensity=[]), "axes.intensity"),
    (lambda d: d["simulation"].pop("horizon"), "simulation.horizon"),
    (lambda d: d["simulation"].update(horizon=-1.0), "simulation.horizon"),
    (lambda d: d["simulation"].update(warmup=200.0), "simulation.warmup"),
    (lambda d: d["simulation"].pop("checkpoint_interval"), "simulation.checkpoint_interval"),
    (lambda d: d["simulation"].update(replications=0), "simulation.replications"),
    (lambda d: d["simulation"].update(seeds=[1, 1]), "simulation.seeds"),
    (lambda d: d["simulation"].update(seeds=[1], seed=2), "simulation.seeds"),
    (lambda d: d["simulation"].update(max_bags=1.5), "simulation.max_bags"),
    (lambda d: d.update(options={"weibull_shape": -1}), "options.weibull_shape"),
    (lambda d: d.update(options={"shape": 1}), "options.shape"),
    (lambda d: d.update(quick={"simulation": {"horizon": 0}}), "quick.simulation.horizon"),
    (lambda d: d.update(name="/tmp/elsewhere"), "name"),  # (it names the folder, runs/sweep-NAME)
    (lambda d: d.update(name=".."), "name"),
    (lambda d: d.update(name=""), "name"),
    (lambda d: d.update(name=3), "name"),
])
def test_file_errors_name_the_key(change, key):
    data = {"scenario": "anglano", "axes": {"mix": ["All_M"]},
            "simulation": {"horizon": 100.0, "warmup": 10.0, "checkpoint_interval": 10.0}}
    change(data)
    with pytest.raises(ConfigError) as e:
        parse_sweep(data, "x", "f.toml", quick="quick" in data)
    assert e.value.key == key, str(e.value)


@pytest.mark.parametrize(("section", "k", "wrong", "quick_value", "key"), [
    ("simulation", "replications", 0, 1, "simulation.replications"),
    ("simulation", "horizon", -1.0, 50.0, "simulation.horizon"),
    ("axes", "mix", ["All_Q"], ["All_L"], "axes.mix[0]"),
    ("options", "weibull_shape", -1, 0.5, "options.weibull_shape"),
])
def test_a_quick_sweep_checks_the_values_its_quick_table_replaces(section, k, wrong, quick_value, key):
    """A quick try first must not hide what the full sweep would refuse: the file's values that [quick] replaces are
    checked too, naming their own key (not the [quick] table's)."""
    def sweep(value):
        data = {"scenario": "anglano", "axes": {"mix": ["All_M"]}, "options": {},
                "simulation": {"horizon": 100.0, "warmup": 10.0, "checkpoint_interval": 10.0, "replications": 2},
                "quick": {section: {k: quick_value}}}
        data[section][k] = value
        return data

    with pytest.raises(ConfigError) as e:
        parse_sweep(sweep(wrong), "x", "f.toml", quick=True)
    assert e.value.key == key, str(e.value)
    assert parse_sweep(sweep(quick_value), "x", "f.toml", quick=True)  # (the same file, its value right: taken)


def test_an_option_set_on_the_command_line_goes_over_the_files_and_its_errors_name_the_flag():
    data = {"scenario": "anglano", "axes": {"mix": ["All_M"]}, "options": {"weibull_shape": 0.5},
            "simulation": {"horizon": 100.0, "checkpoint_interval": 10.0}}
    assert parse_sweep(data, "x").options["weibull_shape"] == 0.5
    spec = parse_sweep(data, "x", options=["weibull_shape = 2.5", "grid_seed=7"])
    assert spec.options["weibull_shape"] == 2.5 and spec.options["grid_seed"] == 7
    assert spec.manifest()["options"]["weibull_shape"] == 2.5  # (a resume in the same folder is checked against it)
    for bad, words in [("weibull_shape", "KEY=VALUE"), ("shape=1", "not an option"), ("weibull_shape=-1", "weibull"),
                       ("weibull_shape=one", "TOML value")]:
        with pytest.raises(ConfigError) as e:
            parse_sweep(data, "x", options=[bad])
        assert e.value.key == "--option" and words in str(e.value), (bad, str(e.value))


def test_a_registered_policy_outside_the_paper_is_accepted():
    data = {"scenario": "anglano", "axes": {"policy": ["rr", "wqr_ft"]},
            "simulation": {"horizon": 100.0, "checkpoint_interval": 10.0}}
    assert dict(parse_sweep(data, "x").axes)["policy"] == ("rr", "wqr_ft")


@pytest.mark.parametrize("only", ["policy", "colour=red", "policy=rr_nrf", "replication=7"])
def test_bad_filters_are_errors(only):
    with pytest.raises(ConfigError) as e:
        quick(only=[only])
    assert e.value.key == "--only"


# --- running ---------------------------------------------------------------------------------------

def test_local_pool_writes_a_tidy_csv_and_summary(tmp_path, no_children_left):
    out = tmp_path / "out"
    result = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.cell, plots=False)
    assert (result.total, result.skipped, result.computed, result.failed) == (QUICK_CELLS * 2, 0, QUICK_CELLS * 2, [])
    with open(out / "sweep.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == [*KEYS, *METRICS, "error"]
    got = rows(out)
    assert len(got) == len({key(r) for r in got}) == QUICK_CELLS * 2
    assert [key(r) for r in got] == [c.key for c in quick().cells()]  # grid order once finished
    spec = quick()
    for r in got[:5]:
        cell = next(c for c in spec.cells() if c.key == key(r))
        want = sweep_fake.metrics(spec.experiment(cell), cell.replication)
        assert {k: r[k] for k in METRICS} == {k: str(v) for k, v in want.items()} and r["error"] == ""
    # summary: mean and t-interval across the two replications (the fake adds 7 s per replication)
    with open(out / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert len(summary) == QUICK_CELLS
    s = next(s for s in summary if (s["policy"], s["heterogeneity"], s["mix"]) == ("rr", "homogeneous", "All_M"))
    r0 = next(r for r in got if (r["policy"], r["heterogeneity"], r["mix"], r["replication"]) ==
              ("rr", "homogeneous", "All_M", "0"))
    avt0 = float(r0["avt"])
    assert float(s["avt"]) == pytest.approx(avt0 + 3.5)
    half = T_975_1 * 7 / math.sqrt(2) / math.sqrt(2)
    assert (float(s["avt_low"]), float(s["avt_high"])) == pytest.approx((avt0 + 3.5 - half, avt0 + 3.5 + half))
    assert (s["n"], s["failed"], s["unbounded"]) == ("2", "0", "False")
    excl = next(s for s in summary if (s["policy"], s["mix"]) == ("fcfs_excl", "All_L"))
    assert (excl["unbounded"], excl["unbounded_n"]) == ("True", "2")


def test_cells_run_longest_first_and_the_csv_is_in_grid_order(tmp_path, no_children_left):
    calls = tmp_path / "calls.txt"
    run_sweep(quick(), tmp_path / "out", workers=1, cell_fn=Recording(str(calls)), plots=False)
    assert recorded(calls) == LONGEST_FIRST
    assert [key(r) for r in rows(tmp_path / "out")] == [c.key for c in quick().cells()]


def test_the_estimated_cost_is_the_expected_number_of_jobs():
    def cell(mix, intensity="low", **kw):
        return anglano.experiment("high", "homogeneous", mix, intensity, "rr", horizon=100_000.0, warmup=0.0,
                                  replications=1, seed=1, checkpoint_interval=600.0, **kw)

    low = cell("All_VS")
    bags = low.workload.bag_rate * 100_000.0  # 13.8
    assert estimated_cost(low) == pytest.approx(bags * 3_600_000 / 1000)  # AS / X tasks per bag
    assert estimated_cost(cell("All_L")) == pytest.approx(estimated_cost(low) / 125)  # X = 125,000 s
    assert estimated_cost(cell("All_VS", "high")) == pytest.approx(estimated_cost(low) * 0.95 / 0.5)  # L
    assert estimated_cost(cell("All_VS", max_bags=2)) == pytest.approx(2 * 3_600)  # fewer bags than the horizon's
    classes = (JobClass("a", 0.5, 1.0), JobClass("b", 0.25, 2.0))
    poisson = dataclasses.replace(low, classes=classes, workload=PoissonClasses(),
                                  simulation=SimulationSettings(horizon=400.0))
    assert estimated_cost(poisson) == pytest.approx(300.0)
    listed = dataclasses.replace(low, workload=BagList(((0.0, ((0, 1.0), (1, 2.0))), (5.0, ((0, 3.0),)))))
    assert estimated_cost(listed) == 3.0
    assert estimated_cost(dataclasses.replace(low, workload=SwfTrace("x.swf"))) == 0.0
    assert estimated_cost(dataclasses.replace(low, workload=BagStream(0.001, 10.0, (0.0, 0.0, 0.0, 0.0)))) == 0.0


def test_numpy_values_and_clashing_names_are_written_plainly(tmp_path):
    np = pytest.importorskip("numpy")
    log = ResultLog(tmp_path / "s.csv", ["policy"])
    log.open()
    log.append(["rr"], {"avt": np.float64(1.5), "bags": np.int64(3), "unbounded": np.bool_(True), "policy": "x"})
    log.close()
    assert rows_of(tmp_path / "s.csv") == [{**dict.fromkeys([*METRICS, "error"], ""), "policy": "rr", "avt": "1.5",
                                            "bags": "3", "unbounded": "True", "policy_": "x"}]


def rows_of(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_summary_of_hand_made_rows():
    made = [{"policy": "a", "avt": "10", "rwt": "0.5", "unbounded": "False"},
            {"policy": "a", "avt": "14", "rwt": "0.7", "unbounded": "True"},
            {"policy": "a", "error": "boom"},
            {"policy": "b", "avt": "3", "rwt": "nan", "unbounded": "0"},
            {"policy": "c", "avt": "5", "unbounded": "1"}]
    a, b, c = summarize(made, ["policy"])
    assert (a["n"], a["failed"], a["unbounded"], a["unbounded_n"], a["error"]) == (2, 1, True, 1, "boom")
    # 12 -+ t(1) x 2 = (-13.4, 37.4) reaches below 0 for a positive time: with 2 replications, no interval
    assert a["avt"] == 12 and math.isnan(a["avt_low"]) and math.isnan(a["avt_high"])
    assert a["avt_interval"] == "too few replications" and a["verdict"] == "unbounded"
    assert a["rwt"] == pytest.approx(0.6)
    assert b["avt"] == 3 and math.isnan(b["avt_low"]) and math.isnan(b["rwt"])  # one run: no interval
    assert (b["unbounded"], c["unbounded"]) == (False, True)


class _Node:
    """A reference cycle's member: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _cell_leaving_a_cycle(experiment, replication, kept=[]):  # noqa: B006 (the list is the point)
    node = _Node()
    kept.append(weakref.ref(node))
    return {"avt": 1.0}


def _cell_leaving_nothing(experiment, replication):
    return {"avt": 2.0}


@pytest.mark.parametrize("fails", [False, True])
@pytest.mark.parametrize("grown", [False, True])
def test_a_cells_garbage_is_walked_by_no_collection_and_freed_before_a_later_cell_once_grown(
    monkeypatch, fails, grown
):
    # As `mgst simulate` runs a replication: what a cell leaves is frozen (no collection walks a cell's records,
    # 0.7 s for a million jobs), and freed before a later cell once the worker's memory has grown; without that,
    # a worker's finished cells piled up in memory.
    monkeypatch.setattr(worker_memory, "_resident_after_collection", 0)  # as if collected with nothing resident
    monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 1 << 62)  # not grown yet
    kept = _cell_leaving_a_cycle.__defaults__[0]
    kept.clear()
    cell = _cell_leaving_a_cycle if not fails else lambda e, r: (_cell_leaving_a_cycle(e, r), 1 / 0)
    was_enabled = gc.isenabled()
    try:
        if fails:
            with pytest.raises(ZeroDivisionError):
                run_cell(cell, None, 0)  # the cell ignores its experiment
        else:
            assert run_cell(cell, None, 0)["avt"] == 1.0
        assert gc.isenabled() == was_enabled
        gc.collect()
        assert len(kept) == 1 and kept[0]() is not None  # frozen: not even a full collection walks it
        monkeypatch.setattr(worker_memory, "GARBAGE_LIMIT", 1 if grown else 1 << 62)
        assert run_cell(_cell_leaving_nothing, None, 1)["avt"] == 2.0
        assert (kept[0]() is None) == grown
    finally:
        gc.unfreeze()
        gc.collect()


def test_resume_skips_finished_cells(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    first = run_sweep(quick(only=["policy=fcfs_excl"]), out, workers=2,
                      cell_fn=sweep_fake.Marking(str(marks), "a"), plots=False)
    assert first.computed == 8
    again = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "b"), plots=False)
    assert (again.skipped, again.computed) == (8, QUICK_CELLS * 2 - 8)
    got = rows(out)
    assert len(got) == len({key(r) for r in got}) == QUICK_CELLS * 2
    done_first = {cell_name(r) for r in got if r["policy"] == "fcfs_excl"}
    assert set(marked(marks, "a")) == done_first and len(marked(marks, "a")) == 8
    assert not done_first & set(marked(marks, "b")) and len(marked(marks, "b")) == QUICK_CELLS * 2 - 8
    third = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "c"), plots=False)
    assert (third.skipped, third.computed, marked(marks, "c")) == (QUICK_CELLS * 2, 0, [])
    assert rows(out) == got


def test_a_failing_cell_is_recorded_and_runs_again(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    r = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "a", fail=("rr",)), plots=False)
    assert len(r.failed) == 8 and r.computed == QUICK_CELLS * 2
    got = rows(out)
    bad = [x for x in got if x["policy"] == "rr"]
    assert len(bad) == 8 and all(x["error"] == "RuntimeError: fake failure | for rr" for x in bad)
    assert all(x["avt"] == "" for x in bad) and all(x["error"] == "" for x in got if x["policy"] != "rr")
    with open(out / "summary.csv", newline="") as f:
        s = [x for x in csv.DictReader(f) if x["policy"] == "rr"]
    assert {(x["n"], x["failed"], x["error"], x["avt"]) for x in s} == {("0", "2", bad[0]["error"], "nan")}
    again = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "b"), plots=False)
    assert again.computed == 8 and {n[0].rsplit("-", 1)[1] for n in marked(marks, "b")} == {"rr"}
    got = rows(out)
    assert len(got) == QUICK_CELLS * 2 and all(x["error"] == "" for x in got)


def test_an_extra_metric_becomes_a_column(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "a", extra="rr"), plots=False)
    with open(out / "sweep.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == [*KEYS, *METRICS, "replicas", "error"]
    assert {(r["policy"] == "rr", r["replicas"]) for r in rows(out)} == {(True, "42"), (False, "")}


def test_a_line_cut_short_is_dropped_and_its_cell_runs_again(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.cell, plots=False)
    text = (out / "sweep.csv").read_text()
    lines = text.splitlines(keepends=True)
    (out / "sweep.csv").write_text("".join(lines[:-3]) + lines[-3][:25])  # as if killed while writing
    r = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "b"), plots=False)
    assert r.computed == 3
    assert (out / "sweep.csv").read_text() == text


def test_another_sweep_in_the_same_folder_is_refused(tmp_path):
    run_sweep(quick(only=["policy=rr", "replication=0"]), tmp_path, workers=1, cell_fn=sweep_fake.cell,
              plots=False)
    data = {"scenario": "anglano", "simulation": {"horizon": 99.0, "checkpoint_interval": 600.0}}
    with pytest.raises(ConfigError) as e:
        run_sweep(parse_sweep(data, "other"), tmp_path, workers=1, cell_fn=sweep_fake.cell, plots=False)
    assert e.value.key == "--out" and "settings.horizon: 40000.0 there, 99.0 here" in str(e.value)


def test_rows_of_another_cell_function_or_scenario_are_not_mixed_in(tmp_path):
    """`mgst sweep --cell mod:fn` into a folder of the default cell's rows (or of another --cell's): refused, as a
    changed setting is (the new rows were added beside the old, and the summary mixed them); a folder of another
    scenario's sweep says so, not which option differs."""
    spec = quick(only=["policy=rr", "replication=0"])
    run_sweep(spec, tmp_path, workers=1, cell_fn=sweep_fake.cell, plots=False)
    for name in ("mymod:doubled", None):
        if name is None:  # (a folder of one --cell, then the default cell)
            other = tmp_path / "other"
            run_sweep(spec, other, workers=1, cell_fn=sweep_fake.cell, cell_name="mymod:doubled", plots=False)
            folder, want = other, "cell: 'mymod:doubled' there, None here"
        else:
            folder, want = tmp_path, "cell: None there, 'mymod:doubled' here"
        with pytest.raises(ConfigError) as e:
            run_sweep(spec, folder, workers=1, cell_fn=sweep_fake.cell, cell_name=name, plots=False)
        assert e.value.key == "--out" and want in str(e.value), str(e.value)
    kondo = {"scenario": "kondo"}
    with pytest.raises(ConfigError) as e:
        run_sweep(parse_sweep(kondo, "k"), tmp_path, workers=1, cell_fn=sweep_fake.cell, plots=False)
    assert "holds a sweep of the 'anglano' scenario, and this one is of 'kondo'" in str(e.value), str(e.value)


def test_a_dying_worker_stops_the_sweep_cleanly(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    marks.mkdir()
    with pytest.raises(SweepError, match="worker process died"):
        run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "a", die="rr"), plots=False)
    assert all(r["error"] == "" and r["policy"] != "rr" for r in rows(out))


def _start_fake_sweep(out: Path, marks: Path) -> subprocess.Popen:
    """tests/sweep_fake.py's sweep of FILE into ``out`` (its cells marked in ``marks``, 0.4 s each), as a process."""
    marks.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    return subprocess.Popen([sys.executable, str(ROOT / "tests" / "sweep_fake.py"), str(FILE), str(out), str(marks),
                             "0.4"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _await_rows(p: subprocess.Popen, out: Path, rows_done: int) -> list[psutil.Process]:
    """Once the sweep's CSV has ``rows_done`` rows past its header (20 s at most): its worker processes."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not ((out / "sweep.csv").exists()
                                               and (out / "sweep.csv").read_text().count("\n") >= rows_done + 1):
        time.sleep(0.02)
    workers = psutil.Process(p.pid).children(recursive=True)
    assert workers, "the sweep has no worker processes"
    return workers


def test_ctrl_c_stops_the_pool_and_a_rerun_finishes_the_rest(tmp_path, no_children_left):
    out, marks = tmp_path / "out", tmp_path / "marks"
    p = _start_fake_sweep(out, marks)
    try:
        workers = _await_rows(p, out, 3)
        p.send_signal(signal.SIGINT)
        output, _ = p.communicate(timeout=20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, output
    gone = psutil.wait_procs(workers, timeout=5)[1]
    assert not gone, f"workers left behind: {gone}"
    first = rows(out)
    assert 3 <= len(first) < QUICK_CELLS * 2
    r = run_sweep(quick(), out, workers=2, cell_fn=sweep_fake.Marking(str(marks), "second"), plots=False)
    assert (r.skipped, r.computed) == (len(first), QUICK_CELLS * 2 - len(first))
    assert not {cell_name(x) for x in first} & set(marked(marks, "second"))
    final = rows(out)
    assert len(final) == len({key(x) for x in final}) == QUICK_CELLS * 2


def test_the_workers_of_a_killed_sweep_end_with_it(tmp_path, no_children_left):
    """SIGKILL to the sweep (no handler can run): its workers, handed to another parent, end within a second or
    so, not live on holding the pool's pipes and the command's output open (a pipe to `cat` never ended)."""
    out, marks = tmp_path / "out", tmp_path / "marks"
    p = _start_fake_sweep(out, marks)
    workers: list[psutil.Process] = []
    try:
        workers = _await_rows(p, out, 1)
        p.kill()
        p.communicate(timeout=20)  # (the output's pipe ends once the workers holding it are gone)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        left = []
        for w in workers:  # (no longer the test's children: looked at by pid; a zombie has ended)
            deadline = time.monotonic() + 10
            while w.is_running() and w.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
                time.sleep(0.05)
            if w.is_running() and w.status() != psutil.STATUS_ZOMBIE:
                left.append(w)
                w.kill()
    assert not left, f"workers left running after their sweep was killed: {left}"


# --- plots ------------------------------------------------------------------------------------------

def test_plots_are_pngs_and_an_unbounded_cell_goes_past_the_top(tmp_path, no_children_left):
    r = run_sweep(quick(), tmp_path, workers=2, cell_fn=sweep_fake.cell)
    names = sorted(p.name for p in r.plots)
    assert names == sorted(f"{m}-high-{h}-low.png" for m in ("avt", "makespan", "waiting", "rwt")
                           for h in ("homogeneous", "heterogeneous"))
    for p in r.plots:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    order = {a.name: a.values for a in quick().scenario.axes}
    panel = {"availability": "high", "heterogeneity": "homogeneous", "intensity": "low"}
    excl = next(s for s in r.summary if (s["policy"], s["mix"], s["heterogeneity"]) ==
                ("fcfs_excl", "All_L", "homogeneous"))
    ax = figure(r.summary, "avt", panel, groups="mix", bars="policy", order=order).axes[0]
    top = ax.get_ylim()[1]
    unbounded = [p for p in ax.patches if p.get_gid() == UNBOUNDED]
    assert len(unbounded) == 1 and unbounded[0].get_height() > top and not unbounded[0].get_clip_on()
    assert [t.get_text() for t in ax.texts if t.get_gid() == UNBOUNDED] == [UNBOUNDED]
    assert top < excl["avt"] or all(p.get_height() != pytest.approx(excl["avt"]) for p in ax.patches)
    bars = [p for p in ax.patches if p.get_gid() != UNBOUNDED and p.get_height() > 0]
    assert len(bars) == 5 and all(p.get_height() < top for p in bars)  # 3 policies x 2 mixes, less the unbounded
    ax = figure(r.summary, "rwt", panel, groups="mix", bars="policy", order=order).axes[0]
    assert not [p for p in ax.patches if p.get_gid() == UNBOUNDED]  # RWT stays a value
    assert sorted(round(p.get_height(), 6) for p in ax.patches if p.get_height() > 0) == \
        sorted([10.5, 10.5, 20.5, 20.5, 30.5, 30.5])  # the fake's RWT, in %, averaged over 2 replications


def test_figures_are_laid_out_tight_and_left_without_a_layout_engine(tmp_path, no_children_left):
    matplotlib = pytest.importorskip("matplotlib")
    r = run_sweep(quick(), tmp_path, workers=1, cell_fn=sweep_fake.cell, plots=False)
    order = {a.name: a.values for a in quick().scenario.axes}
    panel = {"availability": "high", "heterogeneity": "heterogeneous", "intensity": "low"}
    fig = figure(r.summary, "avt", panel, groups="mix", bars="policy", order=order)
    # no engine: savefig draws the figure once, not twice (even tight_layout's placeholder engine makes it draw
    # a second time)
    assert fig.get_layout_engine() is None
    pars = fig.subplotpars  # laid out: room made for the legend under the axes and the title above them
    assert pars.bottom > 0.15 > 0.11 == matplotlib.rcParams["figure.subplot.bottom"]
    assert pars.top < 0.86 < 0.88 == matplotlib.rcParams["figure.subplot.top"]


# --- Dask -------------------------------------------------------------------------------------------

@pytest.fixture
def cluster():
    """A real two-process Dask cluster on loopback; closed, and its processes reaped, whatever the test did."""
    yield from _cluster(2)


@pytest.fixture
def cluster1():
    """As ``cluster``, with one worker process."""
    yield from _cluster(1)


def _cluster(workers: int):
    distributed = pytest.importorskip("distributed")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    # (dashboard_address=None leaves the scheduler's HTTP server on port 8787: two workers' clusters raced for it)
    c = distributed.LocalCluster(n_workers=workers, processes=True, threads_per_worker=1, host="127.0.0.1",
                                 dashboard_address=None, silence_logs=logging.ERROR,
                                 scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
    try:
        yield c
    finally:
        c.close()
        tracker = resource_tracker._resource_tracker  # started by the workers' spawn; lives until stopped
        mine = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        for p in psutil.wait_procs([p for p in mine if p.pid != tracker._pid], timeout=10)[1]:  # reaps them
            p.kill()
            p.wait(5)
        if tracker._pid is not None and tracker._pid not in before:
            _stop_tracker(tracker)


def _stop_tracker(tracker) -> None:
    """Stop multiprocessing's resource tracker as Python 3.12's ``_stop`` does: close its pipe, reap it."""
    if hasattr(tracker, "_stop"):
        tracker._stop()
        return
    with tracker._lock:
        if tracker._fd is not None:
            os.close(tracker._fd)
            tracker._fd = None
            os.waitpid(tracker._pid, 0)
            tracker._pid = None


def test_dask_cluster_gives_the_same_csv_as_the_local_pool(tmp_path, no_children_left, cluster):
    run_sweep(quick(), tmp_path / "local", workers=2, cell_fn=sweep_fake.cell, plots=False)
    r = run_sweep(quick(), tmp_path / "dask", scheduler=cluster.scheduler_address, cell_fn=sweep_fake.cell,
                  plots=False)
    assert r.computed == QUICK_CELLS * 2
    assert (tmp_path / "dask" / "sweep.csv").read_bytes() == (tmp_path / "local" / "sweep.csv").read_bytes()
    assert (tmp_path / "dask" / "summary.csv").read_bytes() == (tmp_path / "local" / "summary.csv").read_bytes()


def test_dask_runs_the_cells_longest_first(tmp_path, no_children_left, cluster1):
    calls = tmp_path / "calls.txt"
    r = run_sweep(quick(), tmp_path / "out", scheduler=cluster1.scheduler_address, cell_fn=Recording(str(calls)),
                  plots=False)
    assert r.computed == QUICK_CELLS * 2
    assert recorded(calls) == LONGEST_FIRST


def test_a_failing_cell_on_dask_is_recorded_as_on_the_local_pool(tmp_path, no_children_left, cluster1):
    """A cell that raises on a Dask worker: its exception's message in the error column, the other cells' metrics
    (the results come with their tasks' completion: dask_engine's as_completed with_results)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    r = run_sweep(quick(), tmp_path / "out", scheduler=cluster1.scheduler_address,
                  cell_fn=sweep_fake.Marking(str(marks), "a", fail=("rr",)), plots=False)
    assert len(r.failed) == 8 and r.computed == QUICK_CELLS * 2
    got = rows(tmp_path / "out")
    assert {x["error"] for x in got if x["policy"] == "rr"} == {"RuntimeError: fake failure | for rr"}
    assert all(x["error"] == "" and x["avt"] for x in got if x["policy"] != "rr")


def test_an_unreachable_scheduler_is_an_error(tmp_path):
    pytest.importorskip("distributed")
    with pytest.raises(ConfigError) as e:
        run_sweep(quick(), tmp_path, scheduler="tcp://127.0.0.1:9", cell_fn=sweep_fake.cell, plots=False,
                  connect_timeout=1.0)
    assert e.value.key == "--scheduler"


# --- the command ------------------------------------------------------------------------------------

def test_command_runs_and_resumes(tmp_path, capsys, caplog, no_children_left):
    args = ["sweep", str(FILE), "--quick", "--cell", "sweep_fake:cell", "--out", str(tmp_path), "--workers", "2",
            "--only", "policy=rr", "--no-plots"]
    assert main(args) == 0
    out = capsys.readouterr()
    assert "8 cells, 0 done before, 8 run now (0 failed)" in out.out
    assert "holds the plots of an earlier run" not in caplog.text  # (none yet)
    assert main([*args[:-3], "--replications", "3"]) == 0
    assert "36 cells, 8 done before, 28 run now" in capsys.readouterr().out
    assert (tmp_path / "plots").is_dir() and len(rows(tmp_path)) == 36
    # --no-plots again: summary.csv is rewritten, the plots are the run's before (they were left without a word)
    with caplog.at_level(logging.WARNING, logger="mgst.sweep.runner"):
        assert main([*args[:-3], "--replications", "3", "--no-plots"]) == 0
    assert f"{tmp_path}/plots holds the plots of an earlier run of this sweep" in caplog.text


@pytest.mark.parametrize("args, message", [
    (["--only", "mix=All_XL"], "--only: mix=All_XL is not in this sweep"),
    (["--workers", "0"], "--workers: must be >= 1"),
    (["--cell", "no.such:thing"], "--cell: cannot load"),
    (["--replications", "0"], "--replications: must be an integer >= 1"),
])
def test_command_errors_exit_2(tmp_path, capsys, args, message):
    assert main(["sweep", str(FILE), "--quick", "--out", str(tmp_path), *args]) == 2
    assert message in capsys.readouterr().err


def test_command_names_the_bad_key_of_a_file(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text('scenario = "anglano"\n[simulation]\nhorizon = 10.0\ncheckpoint_interval = 1.0\n'
                 '[axes]\nintensity = ["extreme"]\n')
    assert main(["sweep", str(f), "--out", str(tmp_path / "o")]) == 2
    assert "axes.intensity[0]: 'extreme': not a value of this axis" in capsys.readouterr().err
