"""Kondo et al.'s six claims (the slides) as figures from kondo sweeps' sweep.csv files.

Every "X times better than Y" is paired: the mean over the runs (start points, and the settings named) of
makespan(Y) / makespan(X) on the same start point, with its 95 % interval across runs. A ratio to optimal is
the mean of makespan / optimum over the runs. ``python -m mgst.papers.kondo.findings runs/kondo-*/sweep.csv``
prints them (docs/reproduction-kondo.md quotes it).
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from mgst.bounded_read import read_text
from mgst.intervals import mean_ci

MAX_SWEEP_BYTES = 256 << 20  # a sweep.csv read: 256 MiB (the four platforms' are some 650 KB each)
KEY = ("platform", "tasks", "task_minutes", "seed", "replication")  # one application's run, whatever the policy


@dataclass(frozen=True)
class Run:
    platform: str
    policy: str
    tasks: int
    minutes: float
    seed: str
    replication: str
    makespan: float
    ratio: float
    waste: float
    prediction_error: float

    @property
    def application(self) -> tuple:
        return (self.platform, self.tasks, self.minutes, self.seed, self.replication)


def _float(text: str | None) -> float:
    try:
        return float(text) if text else math.nan
    except ValueError:
        return math.nan


def read_runs(paths: Iterable[str | Path]) -> list[Run]:
    """The rows of kondo sweeps' sweep.csv files (rows with an error are left out; an unfinished application's
    makespan and ratio are nan)."""
    out = []
    for path in paths:
        with io.StringIO(read_text(path, MAX_SWEEP_BYTES), newline="") as f:
            for r in csv.DictReader(f):
                if r.get("error"):
                    continue
                out.append(Run(r["platform"], r["policy"], int(r["tasks"]), float(r["task_minutes"]), r["seed"],
                               r["replication"], _float(r.get("makespan")), _float(r.get("ratio")),
                               _float(r.get("waste")), _float(r.get("prediction_error"))))
    return out


@dataclass(frozen=True)
class Figure:
    """A mean with its 95 % interval over ``n`` runs (NaN where there is none)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2, percent: bool = False) -> str:
        if self.n == 0:
            return "no runs"
        k = 100.0 if percent else 1.0
        unit = " %" if percent else ""
        ci = "" if math.isnan(self.low) else f" [{self.low * k:.{digits}f}, {self.high * k:.{digits}f}]"
        return f"{self.mean * k:.{digits}f}{unit}{ci} (n = {self.n})"


def figure(values: Sequence[float]) -> Figure:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return Figure(math.nan, math.nan, math.nan, 0)
    ci = mean_ci(values)
    return Figure(ci.mean, ci.low, ci.high, len(values))


Select = Callable[[Run], bool]


def ratio_to_optimal(runs: Sequence[Run], policy: str, where: Select = lambda r: True) -> Figure:
    return figure([r.ratio for r in runs if r.policy == policy and where(r)])


def better(runs: Sequence[Run], policy: str, than: str, where: Select = lambda r: True) -> Figure:
    """How many times better ``policy`` is than ``than``: mean of makespan(than) / makespan(policy), paired."""
    mine = {r.application: r.makespan for r in runs if r.policy == policy and where(r)}
    return figure([r.makespan / mine[r.application] for r in runs
                   if r.policy == than and where(r) and r.application in mine and mine[r.application] > 0])


def share_above(runs: Sequence[Run], policy: str, than: str, factor: float, where: Select = lambda r: True) -> float:
    """The fraction of paired runs where ``policy`` is more than ``factor`` times better than ``than``."""
    mine = {r.application: r.makespan for r in runs if r.policy == policy and where(r)}
    pairs = [r.makespan / mine[r.application] for r in runs
             if r.policy == than and where(r) and r.application in mine and mine[r.application] > 0]
    return sum(p > factor for p in pairs) / len(pairs) if pairs else math.nan


def balanced(runs: Sequence[Run]) -> list[Run]:
    """The runs of the applications that every policy of their platform ran (a sweep cut short, or extended
    for some cells only, leaves others out): every mean is then over the same start points for every policy."""
    policies: dict[str, set[str]] = {}
    ran: dict[tuple, set[str]] = {}
    for r in runs:
        policies.setdefault(r.platform, set()).add(r.policy)
        ran.setdefault(r.application, set()).add(r.policy)
    return [r for r in runs if ran[r.application] == policies[r.platform]]


def claims(runs: Sequence[Run], hosts: int = 220) -> list[str]:
    """The slides' six claims, each as lines of figures (markdown list items), over the balanced runs."""
    runs = balanced(runs)
    def on(platform: str, **more) -> Select:
        return lambda r: r.platform == platform and all(getattr(r, k) == v for k, v in more.items())

    lines = []
    many = lambda r: r.tasks >= hosts  # noqa: E731
    lines.append("1. T >= N (T = 400 > N = 220), per platform: FCFS / PRI-CR makespan; PRI-CR-WAIT / PRI-CR")
    if not any(many(r) for r in runs):  # (a --quick sweep: T = 100 only)
        lines.append(f"   - not in these runs: none has T >= N = {hosts} (the slides' grid has T = 400)")
    for p in sorted({r.platform for r in runs if many(r)}):
        sel = lambda r, p=p: r.platform == p and many(r)  # noqa: E731
        lines.append(f"   - {p}: PRI-CR {better(runs, 'PRI-CR', 'FCFS', sel).text()} x better than FCFS; "
                     f"PRI-CR-WAIT {better(runs, 'PRI-CR', 'PRI-CR-WAIT', sel).text()} x worse than PRI-CR")
    lines.append("2. T = 100, sdsc: PRI-CR x better than FCFS (slides 1.65); than PRI-HISTORY")
    lines.append(f"   - FCFS / PRI-CR {better(runs, 'PRI-CR', 'FCFS', on('sdsc', tasks=100)).text()}; "
                 f"PRI-HISTORY / PRI-CR {better(runs, 'PRI-CR', 'PRI-HISTORY', on('sdsc', tasks=100)).text()}")
    lines.append("3. EXCL-S.5 x better than FCFS (slides: 1.49 on sdsc, about 0.9 on lri-wisc), every setting")
    for p in sorted({r.platform for r in runs}):
        per_t = "; ".join(f"T = {t}: {better(runs, 'EXCL-S.5', 'FCFS', on(p, tasks=t)).text()}"
                          for t in sorted({r.tasks for r in runs if r.platform == p}))
        stricter = "; ".join(f"T = {t}: {better(runs, 'EXCL-S.5', 'EXCL-S.25', on(p, tasks=t)).text()}"
                             for t in sorted({r.tasks for r in runs if r.platform == p}))
        lines.append(f"   - {p}: {better(runs, 'EXCL-S.5', 'FCFS', on(p)).text()}; {per_t}")
        lines.append(f"     EXCL-S.5 x better than EXCL-S.25 (a stricter threshold): {stricter}")
    pred = figure([r.prediction_error for r in runs if r.policy == "EXCL-PRED"])
    worst = max((r.prediction_error for r in runs if r.policy == "EXCL-PRED" and not math.isnan(r.prediction_error)),
                default=math.nan)
    lines.append(f"4. EXCL-PRED's prediction error (slides 7.0 %, at most 10 %): {pred.text(1, True)}, "
                 f"at most {worst * 100:.1f} %")
    for p in sorted({r.platform for r in runs}):
        by_tasks = "; ".join(
            f"T = {t}: " + figure([r.prediction_error for r in runs
                                   if r.policy == "EXCL-PRED" and r.platform == p and r.tasks == t]).text(1, True)
            for t in sorted({r.tasks for r in runs if r.platform == p}))
        lines.append(f"   - {p}: {by_tasks}")
    lines.append("5. EXCL-PRED x better than FCFS and than EXCL-S.5 "
                 "(slides: 0.87 sdsc, 1.17 lri-wisc, 1.12 homogeneous)")
    for p in sorted({r.platform for r in runs}):
        lines.append(f"   - {p}: than FCFS {better(runs, 'EXCL-PRED', 'FCFS', on(p)).text()}; "
                     f"than EXCL-S.5 {better(runs, 'EXCL-PRED', 'EXCL-S.5', on(p)).text()}")
    lines.append("6. EXCL-PRED-TO: ratio to optimal (slides 1.7); x better than FCFS (2.15), than EXCL-PRED-DUP (1.5), "
                 "than EXCL-PRED (> 1.13 usually); waste")
    for p in sorted({r.platform for r in runs}):
        sel = on(p)
        waste_to = figure([r.waste for r in runs if r.policy == "EXCL-PRED-TO" and sel(r)])
        waste_dup = figure([r.waste for r in runs if r.policy == "EXCL-PRED-DUP" and sel(r)])
        lines.append(f"   - {p}: to optimal {ratio_to_optimal(runs, 'EXCL-PRED-TO', sel).text()}; "
                     f"than FCFS {better(runs, 'EXCL-PRED-TO', 'FCFS', sel).text()}; "
                     f"than EXCL-PRED-DUP {better(runs, 'EXCL-PRED-TO', 'EXCL-PRED-DUP', sel).text()}; "
                     f"than EXCL-PRED {better(runs, 'EXCL-PRED-TO', 'EXCL-PRED', sel).text()} "
                     f"({share_above(runs, 'EXCL-PRED-TO', 'EXCL-PRED', 1.13, sel):.0%} of runs > 1.13); "
                     f"waste TO {waste_to.text(1, True)}, DUP {waste_dup.text(1, True)}")
    unfinished = Counter((r.platform, r.policy) for r in runs if math.isnan(r.makespan))
    lines.append(f"Runs whose application did not finish (no makespan: out of every paired figure above): "
                 f"{sum(unfinished.values())} of {len(runs)}"
                 + "".join(f"\n   - {p} {policy}: {n}" for (p, policy), n in sorted(unfinished.items())))
    lines.append("Ratio to optimal, every policy (mean [95 %] over every setting)")
    for p in sorted({r.platform for r in runs}):
        for policy in sorted({r.policy for r in runs if r.platform == p}):
            lines.append(f"   - {p} {policy}: {ratio_to_optimal(runs, policy, on(p)).text()}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    paths = list(sys.argv[1:] if argv is None else argv)
    if not paths:
        print("usage: python -m mgst.papers.kondo.findings SWEEP.csv [SWEEP.csv ...]", file=sys.stderr)
        return 2
    try:
        runs = read_runs(paths)
    except (OSError, KeyError, ValueError) as e:
        print(f"mgst: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(claims(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
