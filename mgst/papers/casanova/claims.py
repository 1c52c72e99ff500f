"""The paper's eight claims judged on a sweep's rows: each holds, does not hold, or is undecided, with its figure.

A comparison of two heuristics A and B is paired over the scenarios: for each scenario (n_com, w_min, index)
where both have a relative difference to IE (mgst.papers.casanova.tables.relative), rel_A - rel_B; "A better
than B" holds when the 95 % Student's t interval of its mean lies below 0, does not hold when it lies above 0,
and is undecided when it straddles 0 (or fewer than two scenarios have both). A claim of several parts does not
hold if one part does not, is undecided if one part is, and holds otherwise. Claims about failures are
undecided where nothing failed: they cannot be tested there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mgst.papers.casanova.tables import (
    PAPER_TABLE_I,
    PAPER_TABLE_II,
    REFERENCE,
    by_scenario,
    mean_interval,
    relative,
    spearman,
    table,
)
from mgst.papers.reproduction import DOES_NOT_HOLD, HOLDS, UNDECIDED

PROACTIVE = ("", "P-", "E-", "Y-")  # C in the C-H pairs of claims 4 and 5 ("": the passive heuristic alone)
LARGE_W_MIN = 8  # "large w_min" of claim 8: from this w_min up (the paper's Figure 2 runs to 10)
RANDOM_FACTOR = 20.0  # claim 3: RANDOM's makespan over IE's
TEXTS = {
    "1": "Y-IE best, then P-IE and E-IAY (m = 5)",
    "2": "IE the most robust: whenever IE fails, all fail",
    "3": "RANDOM more than 20 times worse than IE (m = 5)",
    "4": "C-IY better than C-IP (C: none, P, E, Y; m = 5)",
    "5": "C-IAY better than C-IY (C: none, P, E, Y; m = 5)",
    "6": "E-IE poor: worse than IE (m = 5)",
    "7": "Y-IE and P-IE fail on exactly the same instances at m = 10",
    "8": f"IE best at large w_min (m = 10, w_min >= {LARGE_W_MIN}, Table II's heuristics)",
}


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict and the figure it rests on."""

    number: str
    text: str
    verdict: str
    figure: str


def combine(verdicts: Sequence[str]) -> str:
    return DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else UNDECIDED if UNDECIDED in verdicts else HOLDS


def paired(rows: Sequence[Mapping[str, Any]], m: int, a: str, b: str) -> tuple[float, float, float, int]:
    """Mean of rel_A - rel_B over the scenarios where both are defined, its 95 % interval, and how many (in %)."""
    diffs = []
    for trials in by_scenario(rows, m).values():
        ra, rb = relative(trials, a), relative(trials, b)
        if ra is not None and rb is not None:
            diffs.append(ra - rb)
    if not diffs:
        return math.nan, math.nan, math.nan, 0
    low, high = mean_interval(diffs)
    return 100 * statistics.fmean(diffs), 100 * low, 100 * high, len(diffs)


def better(rows: Sequence[Mapping[str, Any]], m: int, a: str, b: str) -> tuple[str, str]:
    """Whether A is better than B (see the module's doc), and the figure: mean of rel_A - rel_B [interval]."""
    mean, low, high, n = paired(rows, m, a, b)
    if n < 2:
        return UNDECIDED, f"{a} - {b}: {n} scenario(s)"
    verdict = HOLDS if high < 0 else DOES_NOT_HOLD if low > 0 else UNDECIDED
    return verdict, f"{a} - {b} {mean:+.1f} [{low:+.1f}, {high:+.1f}]"


def _failed(row: Mapping[str, Any], h: str) -> bool:
    try:
        return math.isnan(float(row.get(f"makespan_{h}", "")))
    except (TypeError, ValueError):
        return True


def _instances(rows: Sequence[Mapping[str, Any]], m: int | None = None) -> list[Mapping[str, Any]]:
    return [r for r in rows if not r.get("error") and (m is None or str(r["m"]) == str(m))]


def judge(rows: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """The eight claims on ``rows`` (a Casanova sweep's sweep.csv); a claim whose m or w_min is not in the rows
    is undecided, its figure saying so."""
    out: list[Verdict] = []

    def add(number: str, verdict: str, figure: str) -> None:
        out.append(Verdict(number, TEXTS[number], verdict, figure))

    m5, m10 = _instances(rows, 5), _instances(rows, 10)
    ranked = [r["heuristic"] for r in table(rows, 5)] if m5 else []  # by %diff, the paper's order
    t5 = {r["heuristic"]: r for r in table(rows, 5)} if m5 else {}

    def diff(h: str) -> str:
        r = t5[h]
        return f"{h} {r['diff']:+.2f} % [{r['diff_low']:+.2f}, {r['diff_high']:+.2f}]"

    if m5:
        order = ranked
        best = [better(rows, 5, "Y-IE", h) for h in t5 if h != "Y-IE"]
        top = order[:3] == ["Y-IE", "P-IE", "E-IAY"]
        verdict = HOLDS if top else DOES_NOT_HOLD if any(v == DOES_NOT_HOLD for v, _ in best) else UNDECIDED
        rho = spearman({h: t5[h]["diff"] for h in t5}, {h: v[1] for h, v in PAPER_TABLE_I.items()})
        add("1", verdict, "top four: " + ", ".join(diff(h) for h in order[:4])
            + f" (paper: Y-IE -11.82, P-IE -10.50, E-IAY -10.40, E-IY -3.40); Spearman with Table I {rho:.3f}")
    else:
        add("1", UNDECIDED, "no instance of m = 5 in the rows")

    every = _instances(rows)
    names = list(PAPER_TABLE_I)
    ie_fails = [r for r in every if _failed(r, REFERENCE)]
    any_fail = any(_failed(r, h) for r in every for h in names if h != "RANDOM")
    if not every or not any_fail:
        add("2", UNDECIDED, f"no heuristic but RANDOM hit the cap on the {len(every)} instances: untestable")
    else:
        survived = [r for r in ie_fails if any(not _failed(r, h) for h in names if h != REFERENCE)]
        fails = {h: sum(_failed(r, h) for r in every) for h in names}
        fewer = [h for h in names if fails[h] < fails[REFERENCE]]
        verdict = DOES_NOT_HOLD if survived or fewer else HOLDS
        add("2", verdict, f"IE failed {fails[REFERENCE]} time(s), another heuristic succeeded on {len(survived)} of "
            f"those; fewer failures than IE: {', '.join(f'{h} {fails[h]}' for h in fewer) or 'none'} "
            f"({len(every)} instances)")

    if m5:
        r = t5["RANDOM"]
        factor, low, high = (1 + r[k] / 100 for k in ("diff", "diff_low", "diff_high"))
        last = ranked[-1] == "RANDOM"
        verdict = HOLDS if low > RANDOM_FACTOR else DOES_NOT_HOLD if high < RANDOM_FACTOR else UNDECIDED
        add("3", verdict, f"RANDOM {r['diff']:+.0f} % [{r['diff_low']:+.0f}, {r['diff_high']:+.0f}]: {factor:.1f} "
            f"[{low:.1f}, {high:.1f}] times IE, {'last' if last else 'not last'} (paper: +2124 %, 22.2 times; "
            f"the acceptance's factor 10: {'above' if low > 10 else 'below' if high < 10 else 'straddled'})")
    else:
        add("3", UNDECIDED, "no instance of m = 5 in the rows")

    for number, worse, good in (("4", "IP", "IY"), ("5", "IY", "IAY")):
        if m5:
            parts = [better(rows, 5, f"{c}{good}", f"{c}{worse}") for c in PROACTIVE]
            add(number, combine([v for v, _ in parts]), "; ".join(f"{f} ({v})" for v, f in parts))
        else:
            add(number, UNDECIDED, "no instance of m = 5 in the rows")

    if m5:
        r = t5["E-IE"]
        verdict = HOLDS if r["diff_low"] > 0 else DOES_NOT_HOLD if r["diff_high"] < 0 else UNDECIDED
        add("6", verdict, f"{diff('E-IE')}, rank {ranked.index('E-IE') + 1} of "
            f"{len(t5)} (paper: +53.93 %, tenth)")
    else:
        add("6", UNDECIDED, "no instance of m = 5 in the rows")

    if not m10:
        add("7", UNDECIDED, "no instance of m = 10 in the rows")
    else:
        y = {i for i, r in enumerate(m10) if _failed(r, "Y-IE")}
        p = {i for i, r in enumerate(m10) if _failed(r, "P-IE")}
        if not y and not p:
            add("7", UNDECIDED, f"neither failed on the {len(m10)} instances of m = 10: untestable")
        else:
            add("7", HOLDS if y == p else DOES_NOT_HOLD, f"Y-IE failed on {len(y)}, P-IE on {len(p)}, "
                f"{len(y & p)} the same ({len(m10)} instances; paper: 141 and 141)")

    large = [r for r in m10 if int(r["w_min"]) >= LARGE_W_MIN]
    if not large:
        add("8", UNDECIDED, f"no instance of m = 10 with w_min >= {LARGE_W_MIN} in the rows")
    else:
        t = {r["heuristic"]: r for r in table(large, 10, [*PAPER_TABLE_II, REFERENCE])}
        parts = [HOLDS if t[h]["diff_low"] > 0 else DOES_NOT_HOLD if t[h]["diff_high"] < 0 else UNDECIDED
                 for h in PAPER_TABLE_II]
        add("8", combine(parts), f"{len(large)} instances: " + ", ".join(
            f"{h} {t[h]['diff']:+.1f} [{t[h]['diff_low']:+.1f}, {t[h]['diff_high']:+.1f}]" for h in PAPER_TABLE_II))
    return out


__all__ = ["TEXTS", "Verdict", "better", "combine", "judge", "paired"]
