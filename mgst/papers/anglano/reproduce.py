"""Anglano & Canonico's five findings, as `mgst reproduce anglano` runs and judges them (mgst.papers.reproduction).

The verdicts are findings.py's, on the cells of the slices run: a finding checked over fewer settings than the
paper's says on how many, and one whose cells are not in the slice names the sweep that checks it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from mgst.papers.anglano.findings import OTHERS, RR, Finding, all_findings, read_sweep
from mgst.papers.reproduction import (
    DOES_NOT_HOLD,
    HOLDS,
    UNDECIDED,
    Claim,
    Reproduction,
    SweepSlice,
    not_checked,
)

POLICIES = (*RR, *OTHERS)
# Finding 1's settings (High-Avail, homogeneous, low intensity) with All_M, so that findings 2 and 5 see every
# single-size mix there; 3 replications, as the main sweep's (docs/reproduction-bot.md).
LOW_INTENSITY = SweepSlice("low-intensity", "bot/anglano-sweep.toml", replications=3, only=(
    "availability=high", "heterogeneity=homogeneous", "intensity=low", "mix=All_VS,All_S,All_M,All_L"))
# Findings 3 and 4 over the long sweep's window (1,000,000 s), on the mix whose backlog settles within it (All_L).
HIGH_INTENSITY = SweepSlice("high-intensity", "bot/anglano-high-intensity-long.toml", replications=3, only=(
    "heterogeneity=homogeneous", "mix=All_L"))
# --quick: finding 1's three mixes, one replication.
QUICK = SweepSlice("low-intensity", "bot/anglano-sweep.toml", replications=1, only=(
    "availability=high", "heterogeneity=homogeneous", "intensity=low", "mix=All_VS,All_S,All_L"))

FULL = ("mgst sweep experiments/bot/anglano-sweep.toml --replications 3", "mgst sweep "
        "experiments/bot/anglano-high-intensity-long.toml")
SETTINGS = (144, 144, 4, 8, 144)  # the settings each finding is about, over the paper's grid


def judge(folders: Mapping[str, Path]) -> list[Claim]:
    cells: dict = {}
    for folder in folders.values():
        cells |= read_sweep(folder / "sweep.csv")
    out = []
    for f, total in zip(all_findings(cells), SETTINGS):
        full = FULL[1] if f.number in (3, 4) else FULL[0]
        if not f.checked:
            out.append(not_checked(str(f.number), f.claim, full))
            continue
        verdict = {True: HOLDS, False: DOES_NOT_HOLD, None: UNDECIDED}[f.holds]
        scope = f"on {f.checked} of the paper's {total} settings"
        if f.checked < total:
            scope += f" (the others: `{full}`)"
        out.append(Claim(str(f.number), f.claim, verdict, f"{scope}; {_figure(f, cells)}"))
    return out


def _figure(f: Finding, cells: Mapping) -> str:
    """What the finding rests on: its failures or ties where there are some, else the cells' AVT, RWT or
    verdicts."""
    if f.failed or f.undecided:
        return "; ".join([*(f"against: {x}" for x in f.failed), *(f"tied: {x}" for x in f.undecided)])
    settings = sorted({k[1:] for k in cells if k[0] in POLICIES})
    if f.number == 1:
        mixes = [s for s in settings if s[0] == "high" and s[1] == "homogeneous" and s[3] == "low"
                 and s[2] != "All_M"]
        return "AVT (s), " + "; ".join(f"{s[2]}: " + " ".join(_avt(cells.get((p, *s)), p) for p in POLICIES)
                                        for s in mixes)
    if f.number == 2:
        return "RWT, " + "; ".join(
            f"{'/'.join(s)}: RR/RR-NRF {max(cells[(p, *s)].rwt for p in RR):.1%} vs others from "
            f"{min(cells[(p, *s)].rwt for p in OTHERS):.1%}"
            for s in settings if all((p, *s) in cells for p in POLICIES))
    if f.number == 5:
        return "AVT (s), " + "; ".join(
            f"{'/'.join(s)}: " + " ".join(_avt(cells.get((p, *s)), p) for p in ("fcfs_share", "long_idle"))
            for s in settings if all((p, *s) in cells for p in ("fcfs_share", "long_idle")))
    availability = "high" if f.number == 3 else "low"  # finding 3's settings, or 4's
    return "; ".join(f"{'/'.join(s)}: " + ", ".join(f"{p} {cells[(p, *s)].verdict} ({cells[(p, *s)].split()})"
                                                   for p in POLICIES if (p, *s) in cells)
                     for s in settings if s[3] == "high" and s[0] == availability)


def _avt(cell, policy: str) -> str:
    if cell is None:
        return f"{policy} -"
    if cell.is_unbounded:
        return f"{policy} unbounded"
    return f"{policy} {cell.avt:.0f}" if not math.isnan(cell.avt) else f"{policy} -"


REPRODUCTION = Reproduction(
    name="anglano",
    title="Anglano & Canonico, \"Knowledge-Free Scheduling Algorithms for Multiple Bag-of-Task Applications on "
          "Desktop Grids\" (technical report TR-INF-2009-02-01-UNIPMN, 2009)",
    checks="finding 1 (AVT orderings, FCFS-Excl unbounded on All_L) on its settings; findings 3 and 4 (who stays "
           "bounded at high intensity) on All_L over 1,000,000 s; findings 2 and 5 on 6 of their 144 settings",
    slices=(LOW_INTENSITY, HIGH_INTENSITY),
    quick_slices=(QUICK,),
    judge=judge,
    minutes="about 2 min",
    quick_minutes="about 15 s",
    doc="docs/reproduction-bot.md",
)

