"""Anglano & Canonico's five findings as checks over a sweep's cells: which hold, where, and where not."""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mgst.bounded_read import read_text

MAX_SWEEP_BYTES = 256 << 20  # a sweep.csv read: 256 MiB
RR = ("rr", "rr_nrf")
OTHERS = ("fcfs_excl", "fcfs_share", "long_idle")
SINGLE = ("All_VS", "All_S", "All_M", "All_L")
MIXES = (*SINGLE, "Uniform", "Short", "Med", "Long")


@dataclass(slots=True)
class Cell:
    """One (policy, availability, heterogeneity, mix, intensity) across its replications."""

    avt: float  # mean over the replications' AVT (bounded replications only)
    rwt: float
    unbounded: int  # replications judged unbounded
    replications: int
    undecided: int = 0  # replications whose growth came over too short a window to call (mgst.bot_metrics)

    @property
    def is_unbounded(self) -> bool:
        """Unbounded when most of its replications are (a lone replication's verdict can be noise)."""
        return 2 * self.unbounded > self.replications

    @property
    def is_bounded(self) -> bool:
        """Bounded when most of its replications are."""
        return 2 * (self.replications - self.unbounded - self.undecided) > self.replications

    @property
    def verdict(self) -> str:
        """"unbounded" or "bounded" by a strict majority of its replications; "undecided" when neither has
        one: they split evenly (a tie decides nothing, in neither direction), or too many were undecided."""
        return "unbounded" if self.is_unbounded else "bounded" if self.is_bounded else "undecided"

    def split(self) -> str:
        """How its replications voted, e.g. "unbounded 2 of 3" (", undecided 1" when some were)."""
        return f"unbounded {self.unbounded} of {self.replications}" + (
            f", undecided {self.undecided}" if self.undecided else "")


@dataclass(slots=True)
class Finding:
    number: int
    claim: str
    holds: bool | None  # None: the sweep lacks the cells to say, or (``undecided``) its replications tie
    checked: int = 0  # settings (or cells) checked
    failed: list[str] = field(default_factory=list)  # where it does not hold, and how
    undecided: list[str] = field(default_factory=list)  # settings left open: a cell's replications tie

    def line(self) -> str:
        verdict = {True: "holds", False: "does not hold", None: "undecided" if self.undecided else "not checked"}[
            self.holds]
        where = f" ({len(self.failed)} of {self.checked} settings against: {'; '.join(self.failed[:6])}" + (
            ", ..." if len(self.failed) > 6 else "") + ")" if self.failed else f" ({self.checked} settings)"
        if self.undecided:
            where += f" (undecided, replications tied: {'; '.join(self.undecided)})"
        return f"{self.number}. {verdict}{where}: {self.claim}"

    def settle(self) -> None:
        """holds from what was found: False on any failure; else None if a tie left a setting open."""
        if not self.checked:
            self.holds = None
        elif self.failed:
            self.holds = False
        else:
            self.holds = None if self.undecided else True


def _ties(f: Finding, label: str, got: Mapping[str, Cell]) -> bool:
    """Note in ``f`` the cells of ``got`` whose replications tie; whether there is one (the setting is then
    left open: neither for nor against)."""
    tied = [f"{p} {c.split()}" for p, c in got.items() if c.verdict == "undecided"]
    if tied:
        f.undecided.append(f"{label}: {', '.join(tied)}")
    return bool(tied)


def load_cells(rows: Iterable[Mapping[str, str]]) -> dict[tuple[str, str, str, str, str], Cell]:
    """sweep.csv rows (one per replication) gathered by (policy, availability, heterogeneity, mix, intensity)."""
    acc: dict[tuple, list[Mapping[str, str]]] = defaultdict(list)
    for r in rows:
        if r.get("error"):
            continue
        acc[(r["policy"], r["availability"], r["heterogeneity"], r["mix"], r["intensity"])].append(r)
    cells = {}
    for key, reps in acc.items():
        unb = sum(1 for r in reps if r["unbounded"].lower() in ("true", "1"))
        undecided = sum(1 for r in reps if r.get("undecided", "").lower() in ("true", "1"))
        avts = [float(r["avt"]) for r in reps if r["avt"] not in ("", "nan") and not math.isnan(float(r["avt"]))]
        rwts = [float(r["rwt"]) for r in reps if r["rwt"] not in ("", "nan") and not math.isnan(float(r["rwt"]))]
        cells[key] = Cell(sum(avts) / len(avts) if avts else math.nan, sum(rwts) / len(rwts) if rwts else math.nan,
                          unb, len(reps), undecided)
    return cells


def read_sweep(path: Path) -> dict[tuple[str, str, str, str, str], Cell]:
    with io.StringIO(read_text(path, MAX_SWEEP_BYTES), newline="") as f:
        return load_cells(csv.DictReader(f))


def _avt(c: Cell) -> float:
    return math.inf if c.is_unbounded else c.avt


def finding_1(cells: Mapping, heterogeneity: str = "homogeneous") -> Finding:
    f = Finding(1, "High-Avail, homogeneous, low intensity: RR and RR-NRF have higher AVT than the others on "
                   "All_VS and All_S, lower on All_L; FCFS-Excl is unbounded on All_L", None)
    for mix in ("All_VS", "All_S", "All_L"):
        got = {p: cells.get((p, "high", heterogeneity, mix, "low")) for p in (*RR, *OTHERS)}
        if any(c is None for c in got.values()):
            return f
        f.checked += 1
        if _ties(f, mix, got):
            continue
        rr = [_avt(got[p]) for p in RR]
        others = [_avt(got[p]) for p in ("fcfs_share", "long_idle")] + (
            [] if mix == "All_L" else [_avt(got["fcfs_excl"])])
        if mix == "All_L":
            lower, excl = max(rr) < min(others), got["fcfs_excl"]
            if not (lower and excl.is_unbounded):  # each part said, the one that fails first
                order = f"RR/RR-NRF {_fmt(rr)} {'below' if lower else 'not below'} FCFS-Share/LongIdle {_fmt(others)}"
                excl_said = ("FCFS-Excl unbounded" if excl.is_unbounded else
                             f"FCFS-Excl bounded ({excl.split()}), AVT {_fmt([excl.avt])}, not unbounded")
                said = ((lower, order), (excl.is_unbounded, excl_said))
                f.failed.append("All_L: " + "; ".join([t for ok, t in said if not ok]
                                                      + [f"{t} (this part holds)" for ok, t in said if ok]))
        elif not min(rr) > max(others):
            f.failed.append(f"{mix}: RR/RR-NRF {_fmt(rr)} vs others {_fmt(others)}")
    f.settle()
    return f


def finding_2(cells: Mapping) -> Finding:
    f = Finding(2, "RR and RR-NRF have the lowest RWT for every mix", None)
    settings = {k[1:] for k in cells}
    for s in sorted(settings):
        got = {p: cells.get((p, *s)) for p in (*RR, *OTHERS)}
        if any(c is None for c in got.values()):
            continue
        f.checked += 1
        rr = max(got[p].rwt for p in RR)
        low = min(got[p].rwt for p in OTHERS)
        if not rr <= low:
            f.failed.append(f"{'/'.join(s)}: RR/RR-NRF RWT up to {rr:.2%} vs {low:.2%}")
    f.holds = None if not f.checked else not f.failed
    return f


def finding_3(cells: Mapping) -> Finding:
    f = Finding(3, "High-Avail, high intensity: FCFS-Excl, FCFS-Share and LongIdle are unbounded on All_M and "
                   "All_L; RR and RR-NRF stay bounded", None)
    for het in ("homogeneous", "heterogeneous"):
        for mix in ("All_M", "All_L"):
            got = {p: cells.get((p, "high", het, mix, "high")) for p in (*RR, *OTHERS)}
            if any(c is None for c in got.values()):
                continue
            f.checked += 1
            _ties(f, f"{het} {mix}", got)
            wrong = [p for p in OTHERS if got[p].is_bounded] + [p for p in RR if got[p].is_unbounded]
            if wrong:
                f.failed.append(f"{het} {mix}: " + ", ".join(f"{p} {got[p].verdict} ({got[p].split()})"
                                                             for p in wrong))
    f.settle()
    return f


def finding_4(cells: Mapping) -> Finding:
    f = Finding(4, "Low-Avail, high intensity: every policy is unbounded", None)
    for het in ("homogeneous", "heterogeneous"):
        for mix in SINGLE:
            got = {p: cells.get((p, "low", het, mix, "high")) for p in (*RR, *OTHERS)}
            if any(c is None for c in got.values()):
                continue
            f.checked += 1
            _ties(f, f"{het} {mix}", got)
            bounded = [p for p, c in got.items() if c.is_bounded]
            if bounded:
                f.failed.append(f"{het} {mix}: {', '.join(bounded)} bounded")
    f.settle()
    return f


def finding_5(cells: Mapping, tolerance: float = 0.05) -> Finding:
    f = Finding(5, f"FCFS-Share and LongIdle perform practically identically (AVT within {tolerance:.0%}, both "
                   "bounded or both unbounded)", None)
    settings = {k[1:] for k in cells}
    for s in sorted(settings):
        a, b = cells.get(("fcfs_share", *s)), cells.get(("long_idle", *s))
        if a is None or b is None:
            continue
        f.checked += 1
        if _ties(f, "/".join(s), {"fcfs_share": a, "long_idle": b}):
            continue
        if a.is_unbounded != b.is_unbounded:
            said = ", ".join(f"{p} unbounded ({c.split()})" if c.is_unbounded else f"{p} bounded, AVT {c.avt:.0f}"
                             for p, c in (("fcfs_share", a), ("long_idle", b)))
            f.failed.append(f"{'/'.join(s)}: {said}")
        elif not a.is_unbounded and abs(a.avt - b.avt) > tolerance * max(a.avt, b.avt):
            f.failed.append(f"{'/'.join(s)}: AVT {a.avt:.0f} vs {b.avt:.0f}")
    f.settle()
    return f


def all_findings(cells: Mapping) -> list[Finding]:
    return [finding_1(cells), finding_2(cells), finding_3(cells), finding_4(cells), finding_5(cells)]


def _fmt(values: list[float]) -> str:
    return "/".join("unbounded" if math.isinf(v) else f"{v:.0f}" for v in values)
