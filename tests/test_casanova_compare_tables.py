"""experiments/casanova/compare_tables.py's table of each proactive C-H against its building block H."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

from mgst.papers.casanova.heuristics import NAMES

SCRIPT = Path(__file__).resolve().parent.parent / "experiments" / "casanova" / "compare_tables.py"


def load():
    spec = importlib.util.spec_from_file_location("compare_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_c_h_is_set_beside_its_h_paired_and_beside_the_papers_difference(tmp_path, capsys):
    # Every heuristic takes IE's 100 slots but IP (150: +50 %), P-IP (300: +200 %) and E-IE (50: -100 %, the
    # relative difference's denominator being the smaller makespan), in three scenarios.
    special = {"IP": 150.0, "P-IP": 300.0, "E-IE": 50.0}
    path = tmp_path / "sweep.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["m", "n_com", "w_min", "scenario", "seed", "replication", *(f"makespan_{h}" for h in NAMES),
                    "wall_s", "error"])
        for scenario in range(3):
            w.writerow([5, 10, 1, scenario, 1, 0, *(special.get(h, 100.0) for h in NAMES), 0.1, ""])
    assert load().main([str(path)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in out.split("each proactive C-H against its building block H")[1].split("### The claims")[0]
            .splitlines() if line.startswith("| ") and "-I" in line}
    assert len(rows) == 12
    # P-IP - IP = 200 - 50 points; the paper: 176.92 - 52.03.
    assert rows["P-IP"] == ["150.0", "[150.0, 150.0]", "+124.9", "the same kind"]
    assert rows["E-IE"] == ["-100.0", "[-100.0, -100.0]", "+53.9", "the same kind"]
    # E-IP - IP = 0 - 50; P-IE - IE = 0.
    assert rows["E-IP"] == ["-50.0", "[-50.0, -50.0]", "-32.7", "different kinds"]
    assert rows["P-IE"] == ["0.0", "[0.0, 0.0]", "-10.5", "different kinds"]
