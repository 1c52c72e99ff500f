"""The eight claims judged on hand-built sweep rows (mgst.papers.casanova.claims): failures, factors, pairs."""

from __future__ import annotations

from mgst.papers.casanova.claims import judge
from mgst.papers.casanova.heuristics import NAMES


def row(m, w_min, sc, fails=(), **makespans):
    """An instance where every heuristic took 100 slots but those given, and those in ``fails`` hit the cap."""
    r = {"m": str(m), "n_com": "5", "w_min": str(w_min), "scenario": str(sc), "error": ""}
    for h in NAMES:
        r[f"makespan_{h}"] = "" if h in fails else str(makespans.get(h.replace("-", "_"), 100.0))
    return r


def verdicts(rows):
    return {v.number: (v.verdict, v.figure) for v in judge(rows)}


def test_failures_decide_claims_2_and_7_and_their_absence_leaves_them_undecided():
    calm = [row(10, 1, s) for s in range(3)]
    assert verdicts(calm)["2"][0] == verdicts(calm)["7"][0] == "undecided"
    # IE fails where all fail; Y-IE and P-IE on the same instances: both hold
    everyone = [row(10, 9, 0, fails=NAMES), row(10, 9, 1, fails=("Y-IE", "P-IE")), row(10, 9, 2)]
    v = verdicts(everyone)
    assert v["2"][0] == "holds" and v["7"] == ("holds", "Y-IE failed on 2, P-IE on 2, 2 the same (3 instances; "
                                                       "paper: 141 and 141)")
    # IE fails where E-IE succeeds; Y-IE fails where P-IE does not: neither holds
    v = verdicts([row(10, 9, 0, fails=[h for h in NAMES if h != "E-IE"]), row(10, 9, 1, fails=("Y-IE",))])
    assert v["2"][0] == "does not hold" and "another heuristic succeeded on 1" in v["2"][1]
    assert v["7"][0] == "does not hold"


def test_random_s_factor_and_a_paired_comparison_are_judged_by_their_intervals():
    # RANDOM 25 to 27 times IE in every scenario: above 20; IY 10 % better than IP everywhere (+-1)
    rows = [row(5, 1, s, RANDOM=2500.0 + 100 * (s % 3), IY=90.0 + s % 2, IP=100.0) for s in range(6)]
    v = verdicts(rows)
    assert v["3"][0] == "holds" and "last" in v["3"][1]
    assert v["4"][1].startswith("IY - IP -10.5 [-11.2, -9.8] (holds)")  # (90 or 91 - 100) / min: -11.1, -9.9 %
    assert v["4"][0] == "undecided"  # the C-IY and C-IP pairs are equal: their intervals are [0, 0]
    # RANDOM 3 times IE: below 20, as on small w_min
    assert verdicts([row(5, 1, s, RANDOM=300.0 + s) for s in range(4)])["3"][0] == "does not hold"


def test_ie_best_at_large_w_min_asks_every_table_ii_heuristic_to_be_worse_there():
    worse = dict(Y_IE=120.0, P_IE=121.0, E_IAY=130.0, E_IY=125.0, E_IP=140.0, IAY=150.0, IY=155.0)
    rows = [row(10, 8 + s % 3, s, **{k: v + s for k, v in worse.items()}) for s in range(5)]
    assert verdicts(rows)["8"][0] == "holds"
    rows.append(row(10, 10, 9, Y_IE=50.0))  # one scenario where Y-IE halves IE's makespan: no longer certain
    assert verdicts(rows)["8"][0] != "holds"
    assert verdicts([row(10, 3, 0)])["8"][0] == "undecided"  # no large w_min
