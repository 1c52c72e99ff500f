"""The MGST paper's simulation column, reproduced: every figure within its interval or 5 % of its midpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

import mgst
from mgst.build_info import compiled, decide
from mgst.config import load_experiment
from mgst.papers.mgst.tables import PAPER, agrees, deviation
from mgst.sim.replications import run_simulation

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
PACKAGE = Path(mgst.__file__).resolve().parent

# Figures we do not reproduce, each with its reason; checked against a wider bound so
# that they cannot drift unnoticed. Index 4 is "overall".
KNOWN = {
    # The paper prints class 1's interval again for class 2: a copy error (POLICIES.md).
    ("hihi-mpd-fe", 1): None,
    # The LP's optimal face is wide in the 21-machine MPD settings; per-class figures
    # depend on which optimal vertex the solver returns (docs/reproduction.md).
    ("lohi-mpd-fd", 2): 0.08,
    ("hilo-mpd-fd", 2): 0.08,
}

SETTINGS = ["hihi-mfd-fd", "hihi-mpd-fd", "hihi-mfd-fe", "hihi-mpd-fe", "lohi-mfd-fd", "lohi-mpd-fd"]


# The figures are checked once, on the compiled build where there is one (the pure pass took 12 times as long:
# 21 s for a LoHi setting's 810,000 jobs); test_build.py checks that pure Python gives the same jobs, job by job,
# on each of these settings. An install without a compiled build checks them here on pure Python.
checked_on_the_compiled_build = pytest.mark.skipif(
    not compiled() and decide(PACKAGE, environ={}) is None,
    reason="pure pass: checked on the compiled build, which test_build.py finds gives the same jobs as this one")


@checked_on_the_compiled_build
@pytest.mark.parametrize("name", SETTINGS)
def test_simulation_column_of_the_paper(name):
    exp = load_experiment(EXPERIMENTS / f"{name}.toml")
    summary, _ = run_simulation(exp)  # the file's own horizon, warm-up, replications and seed
    figures = [e.mean for e in summary.classes] + [summary.overall.mean]
    paper = PAPER[name].simulation
    failures = []
    for k, (value, interval) in enumerate(zip(figures, paper)):
        label = "overall" if k == 4 else f"class {k + 1}"
        if (name, k) in KNOWN:
            bound = KNOWN[(name, k)]
            if bound is not None and abs(deviation(value, interval)) > bound:
                off = deviation(value, interval)
                failures.append(f"{label}: {value:.4f} vs {interval}, {off:+.1%} (a known deviation, grown)")
        elif not agrees(value, interval):
            failures.append(f"{label}: {value:.4f} vs {interval}, {deviation(value, interval):+.1%}")
    assert not failures, f"{name}: " + "; ".join(failures)
    assert summary.unfinished == 0
