"""experiments/casanova/switch_margins.py counts the proactive looks without changing a decision."""

from __future__ import annotations

import collections
import importlib.util
from pathlib import Path

import pytest

from mgst.core.iterations import Iterations
from mgst.papers.casanova.estimates import Estimates
from mgst.papers.casanova.instance import realisation, run, scenario
from mgst.sim.iterations import run_iterations

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "casanova" / "switch_margins.py"


@pytest.fixture(scope="module")
def switch_margins():
    spec = importlib.util.spec_from_file_location("switch_margins", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["P-IP", "E-IE", "Y-IY", "Y-IE"])
def test_counting_the_looks_changes_no_makespan_and_every_differing_look_is_sorted_once(switch_margins, name):
    s = scenario(5, 5, 2, 1, 0)
    chains = realisation(s, 0, 1)
    est = Estimates(s.matrices, s.n_com, s.t_prog, s.t_data)
    counts: collections.Counter = collections.Counter()
    app = Iterations([float(w) for w in s.work], s.m, 3, s.t_prog, s.t_data, s.n_com,
                     switch_margins.Counted(name, est, counts))
    counted = run_iterations(app, [r.replay() for r in chains], cap=20_000.0, proactive=True)
    shipped = run(s, name, 0, 1, chains=chains, estimates=est, cap=20_000.0, iterations=3)
    assert counted.makespan == shipped.makespan
    assert counted.log == shipped.log
    proactive = sum(1 for e in shipped.log if getattr(e, "why", None) == "proactive")
    assert counts["switched"] == proactive
    kept = sum(counts[label] for _, label in switch_margins.MARGINS)
    assert counts["differed"] == counts["switched"] + kept > 0


def test_the_script_prints_a_row_per_proactive_heuristic(switch_margins, capsys):
    assert switch_margins.main(["--w-min", "1", "--scenarios", "0", "--cap", "5000"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "-I" in line]
    assert [r.split("|")[1].strip() for r in rows] == [f"{c}-{h}" for c in "PEY" for h in ("IP", "IE", "IY", "IAY")]
