"""The paper's metrics (its section VII) from a sweep's rows: Tables I and II, Figure 2, and the paper's figures.

For heuristic H against the reference IE, on the instances of one m: ``fails`` counts the trials where H hit
the cap; for each scenario (n_com, w_min, scenario index), the mean makespans of H and of IE over the trials
where both succeeded give (mean_H - mean_IE) / min(mean_H, mean_IE); ``diff`` is its mean over the
scenarios (in %, with a 95 % Student's t interval across
the scenarios) and ``stdv`` its standard deviation (population, as a fraction, as the tables print it);
``wins`` and ``wins30`` are the shares of the trials where IE succeeded in which H succeeded with a makespan
at most IE's, or at most 1.3 times IE's.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mgst.papers.casanova.heuristics import NAMES

REFERENCE = "IE"
# The paper's Table I (m = 5) and Table II (m = 10): heuristic -> (#fails, %diff, %wins, %wins30, stdv).
PAPER_TABLE_I = {
    "Y-IE": (2, -11.82, 72.58, 92.09, 0.42), "P-IE": (2, -10.50, 70.98, 91.19, 0.44),
    "E-IAY": (4, -10.40, 64.75, 85.15, 0.77), "E-IY": (4, -3.40, 59.91, 81.64, 0.80),
    "IE": (1, 0.00, 100.00, 100.00, 0.00), "IAY": (2, 13.59, 51.07, 76.42, 1.93),
    "E-IP": (4, 19.35, 47.73, 69.69, 0.98), "IY": (2, 24.22, 45.26, 70.85, 1.96),
    "IP": (2, 52.03, 34.79, 58.54, 2.11), "E-IE": (5, 53.93, 39.57, 64.51, 2.57),
    "Y-IAY": (3, 99.75, 53.89, 70.77, 5.55), "Y-IY": (3, 113.01, 49.22, 66.80, 5.73),
    "P-IAY": (3, 125.27, 50.28, 67.33, 6.08), "Y-IP": (2, 145.05, 38.56, 55.54, 5.90),
    "P-IY": (3, 145.78, 42.54, 59.66, 6.22), "P-IP": (2, 176.92, 36.92, 52.00, 6.61),
    "RANDOM": (0, 2124.42, 0.00, 0.20, 22.54),
}
PAPER_TABLE_II = {
    "Y-IE": (141, -10.33, 71.35, 88.42, 0.54), "P-IE": (141, -8.62, 69.64, 87.23, 0.55),
    "E-IAY": (178, -6.10, 66.62, 81.93, 1.58), "E-IY": (176, 8.04, 61.90, 77.87, 3.07),
    "E-IP": (168, 29.68, 55.12, 71.86, 3.01), "IAY": (152, 136.65, 46.98, 69.31, 14.76),
    "IY": (152, 147.77, 42.06, 64.47, 14.76),
}
COLUMNS = ("heuristic", "instances", "fails", "diff", "diff_low", "diff_high", "wins", "wins30", "stdv", "scenarios")


def mean_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the mean over the scenarios (NaN with fewer than two)."""
    if len(values) < 2:
        return math.nan, math.nan
    from scipy.stats import t  # noqa: PLC0415

    mean, half = statistics.fmean(values), t.ppf(0.5 + level / 2, len(values) - 1) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    return mean - half, mean + half


def _value(text: Any) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return math.nan
    return v


def by_scenario(rows: Iterable[Mapping[str, Any]], m: int) -> dict[tuple[str, str, str], list[Mapping[str, Any]]]:
    """The rows of m's instances (errors left out), by scenario (n_com, w_min, scenario index)."""
    out: dict[tuple[str, str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        if str(r["m"]) == str(m) and not r.get("error"):
            out[(str(r["n_com"]), str(r["w_min"]), str(r["scenario"]))].append(r)
    return out


def relative(trials: Sequence[Mapping[str, Any]], h: str) -> float | None:
    """One scenario's relative difference of H to IE: (mean_H - mean_IE) / min of the two, over the trials
    where both succeeded (None: no such trial)."""
    both_h, both_ie = [], []
    for r in trials:
        mh, mie = _value(r.get(f"makespan_{h}")), _value(r.get(f"makespan_{REFERENCE}"))
        if not math.isnan(mh) and not math.isnan(mie):
            both_h.append(mh)
            both_ie.append(mie)
    if not both_h:
        return None
    a, b = statistics.fmean(both_h), statistics.fmean(both_ie)
    return (a - b) / min(a, b)


def table(rows: Iterable[Mapping[str, Any]], m: int, heuristics: Sequence[str] = NAMES) -> list[dict[str, Any]]:
    """One table: a row per heuristic, sorted by %diff (the paper's order)."""
    scenarios = by_scenario(rows, m)
    out = []
    for h in heuristics:
        fails = instances = wins = wins30 = judged = 0
        rel: list[float] = []
        for trials in scenarios.values():
            for r in trials:
                mh, mie = _value(r.get(f"makespan_{h}")), _value(r.get(f"makespan_{REFERENCE}"))
                instances += 1
                fails += math.isnan(mh)
                if math.isnan(mie):
                    continue
                judged += 1
                if not math.isnan(mh):
                    wins += mh <= mie
                    wins30 += mh <= 1.3 * mie
            one = relative(trials, h)
            if one is not None:
                rel.append(one)
        low, high = mean_interval(rel)
        out.append({"heuristic": h, "instances": instances, "fails": fails,
                    "diff": 100 * statistics.fmean(rel) if rel else math.nan,
                    "diff_low": 100 * low, "diff_high": 100 * high,
                    "wins": 100 * wins / judged if judged else math.nan,
                    "wins30": 100 * wins30 / judged if judged else math.nan,
                    "stdv": statistics.pstdev(rel) if rel else math.nan, "scenarios": len(rel)})
    out.sort(key=lambda row: (math.isnan(row["diff"]), row["diff"]))
    return out


def diff_by_w_min(rows: Sequence[Mapping[str, Any]], m: int, heuristics: Sequence[str]) -> dict[str, list[float]]:
    """Figure 2's curves: %diff per w_min (1 to 10) for each heuristic."""
    curves: dict[str, list[float]] = {h: [] for h in heuristics}
    for w in range(1, 11):
        sub = [r for r in rows if str(r["w_min"]) == str(w)]
        for row in table(sub, m, heuristics):
            curves[row["heuristic"]].append(row["diff"])
    return curves


def spearman(ours: Mapping[str, float], paper: Mapping[str, float]) -> float:
    """Spearman's rank correlation over the heuristics both have (average ranks for ties)."""
    from scipy.stats import spearmanr  # noqa: PLC0415

    common = [h for h in paper if h in ours and not math.isnan(ours[h])]
    return float(spearmanr([ours[h] for h in common], [paper[h] for h in common]).statistic)


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def figure2(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """The paper's Figure 2: %diff against IE per w_min at m = 10, for Table II's heuristics (and IE's 0), as a
    PNG at ``path``; a w_min without instances is a gap."""
    import matplotlib  # noqa: PLC0415 (slow to import)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [*PAPER_TABLE_II, REFERENCE]
    curves = diff_by_w_min(rows, 10, names)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for h, ys in curves.items():
        ax.plot(range(1, 11), ys, marker="o", label=h)
    ax.set_xlabel("w_min")
    ax.set_ylabel("%diff against IE")
    ax.set_title("m = 10")
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_outputs(out_dir: Path) -> list[Path]:
    """table-m5.csv, table-m10.csv and figure2.png from the sweep's sweep.csv (in ``out_dir`` or, for the
    plots folder `mgst sweep` hands its figures, its parent), written beside it."""
    if not (out_dir / "sweep.csv").exists():
        out_dir = out_dir.parent
    rows = read_rows(out_dir / "sweep.csv")
    written = []
    for m in (5, 10):
        t = table(rows, m)
        if not any(r["instances"] for r in t):
            continue
        path = out_dir / f"table-m{m}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, COLUMNS)
            w.writeheader()
            w.writerows(t)
        written.append(path)
    if any(str(r["m"]) == "10" for r in rows):
        written.append(figure2(rows, out_dir / "figure2.png"))
    return written


__all__ = ["PAPER_TABLE_I", "PAPER_TABLE_II", "by_scenario", "diff_by_w_min", "figure2", "mean_interval", "read_rows",
           "relative", "spearman", "table", "write_outputs"]
