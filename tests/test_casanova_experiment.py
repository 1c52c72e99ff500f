"""Casanova et al.'s experiment: the paper's chain generator, section VII's metrics on hand-built rows, and
one sweep cell (common random numbers: the same realisation for every heuristic)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from mgst.papers.casanova.estimates import paper_matrix
from mgst.papers.casanova.heuristics import NAMES
from mgst.papers.casanova.instance import run, scenario
from mgst.papers.casanova.scenario import SCENARIO, simulate_cell
from mgst.papers.casanova.tables import PAPER_TABLE_I, spearman, table
from mgst.scenarios import get
from mgst.scenarios.scenario import RunSettings

ROOT = Path(__file__).resolve().parents[1]


def test_the_paper_s_chains_stay_between_0_90_and_0_99_and_split_the_rest_evenly():
    rng = np.random.default_rng(3)
    for _ in range(200):
        m = np.array(paper_matrix(rng))
        assert np.allclose(m.sum(axis=1), 1.0)
        for x in range(3):
            assert 0.90 <= m[x, x] <= 0.99
            others = [m[x, y] for y in range(3) if y != x]
            assert others[0] == others[1] == pytest.approx(0.5 * (1 - m[x, x]))


def row(n_com, w_min, sc, **makespans):
    r = {"m": "5", "n_com": str(n_com), "w_min": str(w_min), "scenario": str(sc), "error": ""}
    r.update({f"makespan_{h}": ("" if v is None else str(v)) for h, v in makespans.items()})
    return r


def test_the_metrics_are_section_vii_s():
    rows = [
        # scenario A: H's trial means 90 (both trials) against IE's 100 -> -10 / 90; H wins both
        row(5, 1, 0, IE=100, IP=80), row(5, 1, 0, IE=100, IP=100),
        # scenario B: H fails once (not a win, not in the means): means 150 against 100 -> +50 / 100
        row(5, 2, 0, IE=100, IP=150), row(5, 2, 0, IE=100, IP=None),
    ]
    (ip,) = [r for r in table(rows, 5, ("IP", "IE")) if r["heuristic"] == "IP"]
    rel = [-10 / 90, 0.5]
    assert ip["fails"] == 1 and ip["instances"] == 4 and ip["scenarios"] == 2
    assert ip["diff"] == pytest.approx(100 * sum(rel) / 2)
    assert ip["stdv"] == pytest.approx(abs(rel[0] - rel[1]) / 2)  # population standard deviation of two
    assert ip["wins"] == pytest.approx(50.0)  # 80 and 100 <= 100; 150 and the failure are not
    assert ip["wins30"] == pytest.approx(50.0)  # 150 > 130
    (ie,) = [r for r in table(rows, 5, ("IP", "IE")) if r["heuristic"] == "IE"]
    assert (ie["diff"], ie["wins"], ie["stdv"]) == (0.0, 100.0, 0.0)


def test_spearman_against_the_paper_is_one_for_the_paper_s_own_figures():
    assert spearman({h: v[1] for h, v in PAPER_TABLE_I.items()}, {h: v[1] for h, v in PAPER_TABLE_I.items()}) \
        == pytest.approx(1.0)


def test_a_cell_runs_every_heuristic_on_the_same_realisation():
    assert get("casanova") is SCENARIO
    exp = SCENARIO.build({"m": "5", "n_com": "5", "w_min": "1", "scenario": "0"}, RunSettings(0, 0, 0), 1, 0,
                         {"exact": False, "cap": 1_000_000.0, "iterations": 2, "processors": 20})
    out = simulate_cell(exp, 0)
    assert set(out) == {*(f"makespan_{h}" for h in NAMES), "wall_s"}
    s = scenario(5, 5, 1, 1, 0)
    assert out["makespan_IE"] == run(s, "IE", 0, 1, iterations=2).makespan  # the cell is the instance
    assert all(not math.isnan(v) for k, v in out.items())


def test_reuse_data_reaches_every_heuristic_of_a_cell_and_a_folder_of_before_resumes_without_it():
    """The option (the paper's section VI: survivors of a DOWN keep their data) is the cell's instance run with it;
    left at its default, a sweep's manifest is that of the sweeps kept before the option existed."""
    from mgst.sweep.spec import load_sweep  # noqa: PLC0415

    cell = {"m": "5", "n_com": "5", "w_min": "4", "scenario": "1"}
    options = {"exact": False, "cap": 1_000_000.0, "iterations": 10, "processors": 20}
    s = scenario(5, 5, 4, 1, 1)
    for reuse in (False, True):
        exp = SCENARIO.build(cell, RunSettings(0, 0, 0), 1, 0, {**options, "reuse_data": reuse})
        out = simulate_cell(exp, 0)
        assert all(out[f"makespan_{h}"] == run(s, h, 0, 1, reuse_data=reuse).makespan for h in ("IE", "IP", "E-IE"))
    assert any(run(s, h, 0, 1, reuse_data=True).makespan != run(s, h, 0, 1).makespan for h in ("IE", "IAY", "IY"))
    sweep = Path(__file__).resolve().parents[1] / "experiments" / "casanova" / "casanova-sweep.toml"
    assert "reuse_data" not in load_sweep(sweep).manifest()["options"]
    assert load_sweep(sweep, options=["reuse_data=true"]).manifest()["options"]["reuse_data"] is True


def test_a_makespan_at_the_cap_is_a_failure():
    s = scenario(5, 5, 1, 1, 0)
    assert run(s, "IE", 0, 1, cap=5.0).makespan is None


def test_a_sweep_starts_its_costliest_cells_first_larger_w_min_and_m_before_smaller():
    """Casanova's cells have no jobs to count (the sweep's default estimate was 0 for all of them, so they started
    in grid order: `mgst reproduce casanova` began its w_min 10 cells, the longest, last). The scenario's own
    estimate orders them by m, then w_min, larger first; n_com and scenarios keep grid order."""
    from mgst.sweep.runner import longest_first  # noqa: PLC0415
    from mgst.sweep.spec import load_sweep  # noqa: PLC0415

    spec = load_sweep(ROOT / "experiments" / "casanova" / "casanova-sweep.toml", replications=1,
                      only=("m=5,10", "n_com=5,10", "w_min=1,4,9,10", "scenario=0,1"))
    axes = [a.name for a in spec.scenario.axes]
    order = [dict(zip(axes, c.values)) for c in longest_first(spec.cells(), spec.experiment, spec.scenario.cost)]
    assert [(o["m"], o["w_min"]) for o in order[:4]] == [("10", "10")] * 4
    assert [(o["m"], o["w_min"]) for o in order[-4:]] == [("5", "1")] * 4
    at = {(o["m"], o["w_min"], o["n_com"], o["scenario"]): i for i, o in enumerate(order)}
    for (m, w, n, s), i in at.items():
        assert all(i < at.get((m, str(smaller), n, s), math.inf) for smaller in range(1, int(w)))
        assert m == "10" or at[("10", w, n, s)] < i
    assert [(o["n_com"], o["scenario"]) for o in order[:4]] == [("5", "0"), ("5", "1"), ("10", "0"), ("10", "1")]
    assert len(order) == 2 * 2 * 4 * 2


def test_limits_that_cannot_hold_an_iteration_stop_the_sweep_naming_the_options_and_its_folder_takes_the_fix(tmp_path,
                                                                                                          capsys):
    """processors x mu < m: every heuristic of every cell failed with a ValueError naming neither option (the sweep
    exit 1, an empty figure2.png), and the folder, claimed with those settings, then refused the corrected sweep."""
    from mgst.cli import main  # noqa: PLC0415

    sweep = tmp_path / "gang.toml"
    text = (ROOT / "experiments" / "casanova" / "casanova-sweep.toml").read_text()
    sweep.write_text(text + "\n")
    out = tmp_path / "out"
    args = ["sweep", str(sweep), "--out", str(out), "--only", "m=10", "--only", "n_com=5", "--only", "w_min=1",
            "--only", "scenario=0", "--replications", "1", "--no-plots", "--quiet"]
    assert main([*args, "--option", "processors=5", "--option", "mu=1"]) == 2
    err = capsys.readouterr().err
    assert "options.processors = 5" in err and "options.mu = 1" in err and "fewer than the m = 10 tasks" in err, err
    assert not (out / "sweep.csv").exists() and not (out / "sweep.json").exists()
    assert main([*args, "--option", "processors=5", "--option", "mu=2", "--option", "iterations=1"]) == 0, \
        capsys.readouterr().err
    assert (out / "sweep.csv").read_text().count("\n") == 2  # (the header and the one cell)
