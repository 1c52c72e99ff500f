"""The paper's eight claims, as `mgst reproduce casanova` runs and judges them on a slice of its experiment.

The slice spans w_min 1 to 10 as the paper's space does, thinly (m = 5, n_com 10, 5 scenarios, one trial
each: 50 instances, about five minutes on two cores): it judges the claims about the heuristics' order, RANDOM's
factor and robustness at m = 5 (mgst.papers.casanova.claims says how), and leaves those about m = 10
undecided, naming the sweep that reaches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mgst.papers.casanova.claims import judge as judge_rows
from mgst.papers.casanova.tables import read_rows
from mgst.papers.reproduction import Claim, Reproduction, SweepSlice

FILE = "casanova/casanova-sweep.toml"
SLICE = SweepSlice("casanova", FILE, replications=1, only=("m=5", "n_com=10", "scenario=0,1,2,3,4"))
QUICK = SweepSlice("casanova", FILE, replications=1, only=("m=5", "n_com=5", "w_min=1", "scenario=0,1,2"))
FULL = "mgst sweep experiments/casanova/casanova-sweep.toml"


def judge(folders: Mapping[str, Path]) -> list[Claim]:
    rows = [r for folder in folders.values() for r in read_rows(folder / "sweep.csv")]
    out = []
    for v in judge_rows(rows):
        figure = v.figure + (f"; `{FULL}` reaches it" if "no instance" in v.figure or "untestable" in v.figure
                             else "")
        out.append(Claim(v.number, v.text, v.verdict, figure))
    return out


REPRODUCTION = Reproduction(
    name="casanova",
    title="Casanova, Dufossé, Robert & Vivien, \"Scheduling Tightly-Coupled Applications on Heterogeneous "
          "Desktop Grids\"",
    checks="claims 1 to 6 at m = 5 on 50 instances (n_com 10, w_min 1 to 10, 5 scenarios, 1 trial); m = 10 "
           "(claims 7 and 8) needs the sweep",
    slices=(SLICE,),
    quick_slices=(QUICK,),
    judge=judge,
    minutes="about 3 to 5 min",
    quick_minutes="about 15 s",
    doc="docs/reproduction-casanova.md",
)
