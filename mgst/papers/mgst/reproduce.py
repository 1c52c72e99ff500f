"""The MGST paper's simulation tables, as `mgst reproduce mgst` runs and judges them (mgst.papers.reproduction).

One claim per setting of Tables 2, 4, 6 and 8: LPAS_DG's mean response time per class and overall, as mgst
simulates it, lies within the paper's 95 % interval or 5 % of its midpoint (`mgst paper`'s rule, tables.agrees).
A figure outside that band whose own 95 % interval still reaches into it is undecided at this run length; a
setting holds when every figure agrees, does not hold when one lies outside with its whole interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mgst.papers.mgst.tables import PAPER, TOLERANCE, Interval, agrees, deviation
from mgst.papers.reproduction import (
    DOES_NOT_HOLD,
    HOLDS,
    UNDECIDED,
    Claim,
    Reproduction,
    SimulationSlice,
    not_checked,
)

SUMMARY = "summary.json"
TEXT = "LPAS_DG's mean response per class and overall, simulated, as in Table {table}"
# The default slice: every setting of the paper as `mgst paper` simulates it (each file's own [simulation]: 10
# replications x 1000 time units).
DEFAULT = tuple(SimulationSlice(name, f"{name}.toml", policy="lpas_dg") for name in PAPER)
# --quick: Table 2's fully dedicated setting without failures, and Table 8's LoLo MPD/FE (the paper's doubtful
# availabilities: 17 % off overall), 4 replications x 300 time units.
QUICK = tuple(SimulationSlice(name, f"{name}.toml", horizon=300.0, replications=4, policy="lpas_dg")
              for name in ("hihi-mfd-fd", "lolo-mpd-fe"))


def band(interval: Interval, tolerance: float = TOLERANCE) -> tuple[float, float]:
    """The values tables.agrees accepts for ``interval``: the interval, or within ``tolerance`` of its midpoint."""
    lo, hi = interval
    mid = (lo + hi) / 2
    return min(lo, mid * (1 - tolerance)), max(hi, mid * (1 + tolerance))


def figure_verdict(mean: float, low: float, high: float, interval: Interval) -> str:
    """holds if ``mean`` agrees with the paper's ``interval``; does not hold if mgst's whole 95 % interval
    (low, high) lies outside the accepted band; undecided if it reaches into it, or if mgst has no interval (too few
    replications: less evidence than a wide interval, so no stronger verdict)."""
    if agrees(mean, interval):
        return HOLDS
    lo, hi = band(interval)
    if math.isnan(low) or math.isnan(high):
        return UNDECIDED
    return DOES_NOT_HOLD if high < lo or low > hi else UNDECIDED


def figures(summary: Mapping[str, Any]) -> list[tuple[str, float, float, float]]:
    """(label, mean, low, high) per class and overall, from a summary.json (`mgst simulate --json`'s schema)."""
    def one(label: str, d: Mapping[str, Any]) -> tuple[str, float, float, float]:
        low, high = (math.nan if v is None else v for v in d["ci95"])
        mean = d["mean_response"]
        return label, math.nan if mean is None else mean, low, high

    return [*(one(f"class {c['class']}", c) for c in summary["classes"]), one("overall", summary["overall"])]


def setting_claim(name: str, summary: Mapping[str, Any]) -> Claim:
    paper = PAPER[name]
    verdicts: list[str] = []
    words: list[str] = []
    for (label, mean, low, high), interval in zip(figures(summary), paper.simulation):
        v = figure_verdict(mean, low, high, interval)
        verdicts.append(v)
        mark = "" if v == HOLDS else f" [{v}]"
        words.append(f"{label} {mean:.3f} ({low:.3f}, {high:.3f}) vs {_interval(interval)} "
                     f"({deviation(mean, interval):+.1%}){mark}")
    verdict = combine(verdicts)
    run = f"{summary['replications']} x {summary['horizon']:g} time units: "
    note = f"; note: {paper.note}" if paper.note else ""
    return Claim(name, TEXT.format(table=paper.table), verdict, run + "; ".join(words) + note)


def combine(verdicts: Sequence[str]) -> str:
    return DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else UNDECIDED if UNDECIDED in verdicts else HOLDS


def judge(folders: Mapping[str, Path]) -> list[Claim]:
    out = []
    for name, paper in PAPER.items():
        path = folders.get(name)
        if path is None:
            out.append(not_checked(name, TEXT.format(table=paper.table), f"mgst paper {name}"))
            continue
        out.append(setting_claim(name, json.loads((path / SUMMARY).read_text(encoding="utf-8"))))
    return out


def _interval(interval: Interval) -> str:
    lo, hi = interval
    return f"{lo:.2f}" if lo == hi else f"{lo:.2f}-{hi:.2f}"


REPRODUCTION = Reproduction(
    name="mgst",
    title="Kokaly, Al-Azzoni & Down, \"MGST: A Framework for Performance Evaluation of Desktop Grids\"",
    checks="the simulation column of Tables 2, 4, 6 and 8: all 12 settings, 60 figures (as `mgst paper`)",
    slices=DEFAULT,
    quick_slices=QUICK,
    judge=judge,
    minutes="about 1 min",
    quick_minutes="about 3 s",
    doc="docs/reproduction.md",
    same_as="mgst paper",
)
