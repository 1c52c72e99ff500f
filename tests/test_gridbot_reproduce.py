"""`mgst reproduce gridbot --quick`: finding 1's verdict, checked against paired differences this test computes
itself from the slice's sweep.csv, the claims it does not run said so with their command, and the output as the
doc shows it."""

from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

from test_reproduce import claim, documented_quick_output, reproduce

T975 = {1: 12.706, 2: 4.303}  # Student's t, 97.5 % quantile, by degrees of freedom


def interval(rows: list[dict], faster: str, slower: str) -> tuple[float, float]:
    """The 95 % interval of T(slower) - T(faster) over the paired replications (the test's own)."""
    t = {(r["variant"], r["replication"]): float(r["turnaround"]) for r in rows}
    diffs = [t[(slower, k)] - t[(faster, k)] for (v, k) in t if v == faster]
    mean = statistics.fmean(diffs)
    half = T975[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return mean - half, mean + half


def test_gridbot_quick_judges_finding_1_from_paired_turnarounds(capsys, tmp_path: Path):
    code, out, _ = reproduce(capsys, "gridbot", "--quick", "--out", str(tmp_path))
    assert code == 0, out
    with open(tmp_path / "replication" / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 15 and not any(r["error"] for r in rows)
    assert {r["reading"] for r in rows} == {"default"}

    def judged(pairs: list[tuple[str, str]]) -> str:
        """Each comparison's interval above 0 (holds), below (does not), else undecided; combined."""
        verdicts = []
        for faster, slower in pairs:
            low, high = interval(rows, faster, slower)
            verdicts.append("holds" if low > 0 else "does not hold" if high < 0 else "undecided")
        return "does not hold" if "does not hold" in verdicts else "undecided" if "undecided" in verdicts else "holds"

    # 1: RR the lowest; 1a: both disabled variants the highest
    verdict, figure = claim(out, "1.")
    assert verdict == judged([("RR", x) for x in ("PP", "PR", "DP", "DR")])
    assert claim(out, "1a:")[0] == judged([(x, d) for d in ("DP", "DR") for x in ("PP", "RR", "PR")])
    means = {v: statistics.fmean(float(r["turnaround"]) for r in rows if r["variant"] == v) for v in ("RR", "DP")}
    assert f"RR {means['RR'] / 3600:.2f} h" in figure and f"DP {means['DP'] / 3600:.2f} h" in figure
    assert figure.startswith("default reading, 3 paired replications: RR ")
    low, high = interval(rows, "RR", "PP")
    assert f"T(PP) - T(RR) [{low:.0f}, {high:.0f}] s" in figure
    for number, sweep in (("1b:", "replication"), ("2.", "naive"), ("3.", "condor"), ("4.", "priorities"),
                          ("5.", "small-bags"), ("6.", "community")):
        assert claim(out, number) == ("not checked in this slice", f"run `mgst sweep experiments/gridbot/"
                                                                    f"{sweep}-sweep.toml --workers 2` for it")
    assert out.splitlines()[2:] == documented_quick_output("reproduction-gridbot.md")
