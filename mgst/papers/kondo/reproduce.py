"""The slides' six claims, as `mgst reproduce kondo` runs and judges them on a slice of the sdsc grid.

Every figure is findings.py's (paired over start points, with its 95 % interval). A claim that one policy is
"x times better" than another holds in direction when the interval of makespan(other) / makespan(policy) lies
above 1, does not hold when it lies below 1, and is undecided when it straddles 1; the slides' own factor is
printed beside ours. Only sdsc is run: the parts of a claim about the other platforms are not checked here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from mgst.papers.kondo.findings import Figure, balanced, better, figure, ratio_to_optimal, read_runs
from mgst.papers.reproduction import DOES_NOT_HOLD, HOLDS, UNDECIDED, Claim, Reproduction, SweepSlice

# Policies of the slides the claims compare (the EXCL-S thresholds other than .5 are in none of them).
POLICIES = ("FCFS", "PRI-CR", "PRI-CR-WAIT", "PRI-HISTORY", "EXCL-S.5", "EXCL-PRED", "EXCL-PRED-DUP",
            "EXCL-PRED-TO")
SDSC = "experiments/kondo/kondo-sdsc.toml"
FULL = f"mgst sweep {SDSC} --workers 2"  # the slides' grid on sdsc (docs/reproduction-kondo.md)
OTHERS = "`mgst sweep experiments/kondo/kondo-lri-wisc.toml` (and kondo-homogeneous.toml) for them"
SLICE = SweepSlice("sdsc", "kondo/kondo-sdsc.toml", replications=30, only=(
    f"policy={','.join(POLICIES)}", "tasks=100,400", "task_minutes=15"))
QUICK = SweepSlice("sdsc", "kondo/kondo-sdsc.toml", replications=6, only=(
    "policy=FCFS,PRI-CR,PRI-HISTORY,EXCL-S.5", "tasks=100", "task_minutes=15"))
# Prioritisation "brings little" over FCFS when T >= N: less than a tenth (it brings 0.6 x FCFS's makespan and
# more when T < N: docs/reproduction-kondo.md), as tests/test_kondo_findings.py reads it.
LITTLE = 1.10
HOSTS = 220  # N of the sweep file's platform


def direction(f: Figure, above: float = 1.0) -> str:
    """holds if the figure's 95 % interval lies above ``above``, does not hold if below, else undecided."""
    if f.n == 0:
        return UNDECIDED
    low, high = (f.mean, f.mean) if math.isnan(f.low) else (f.low, f.high)
    return HOLDS if low > above else DOES_NOT_HOLD if high < above else UNDECIDED


def below(f: Figure, limit: float) -> str:
    """holds if the figure's 95 % interval lies below ``limit``, does not hold if above, else undecided."""
    if f.n == 0:
        return UNDECIDED
    low, high = (f.mean, f.mean) if math.isnan(f.low) else (f.low, f.high)
    return HOLDS if high < limit else DOES_NOT_HOLD if low > limit else UNDECIDED


def combine(verdicts: Sequence[str]) -> str:
    """A claim of several parts: does not hold if one does not, else undecided if one is, else holds."""
    return DOES_NOT_HOLD if DOES_NOT_HOLD in verdicts else UNDECIDED if UNDECIDED in verdicts else HOLDS


def judge(folders: Mapping[str, Path]) -> list[Claim]:
    runs = balanced([r for r in read_runs(folder / "sweep.csv" for folder in folders.values())
                     if r.platform == "sdsc"])
    have = {(r.policy, r.tasks) for r in runs}
    all_tasks = sorted({r.tasks for r in runs})

    def ran(*policies: str, tasks: Sequence[int] = ()) -> bool:
        return all((p, t) in have for p in policies for t in (tasks or all_tasks)) and bool(all_tasks)

    def sel(tasks: int | None = None):
        return lambda r: tasks is None or r.tasks == tasks

    out: list[Claim] = []
    many = [t for t in all_tasks if t >= HOSTS]
    text = "T >= N: prioritisation (PRI-CR) brings little over FCFS; waiting for better hosts (PRI-CR-WAIT) hurts"
    if many and ran("FCFS", "PRI-CR", "PRI-CR-WAIT", tasks=many):
        t = many[-1]
        gain = better(runs, "PRI-CR", "FCFS", sel(t))
        wait = better(runs, "PRI-CR", "PRI-CR-WAIT", sel(t))
        little, hurts = below(gain, LITTLE), direction(wait)
        out.append(Claim("1", text, combine([little, hurts]),
                         f"sdsc, T = {t}: PRI-CR {gain.text()} x better than FCFS (little: below {LITTLE:.2f}; "
                         f"{little}); PRI-CR-WAIT {wait.text()} x worse than PRI-CR ({hurts})"))
    else:
        out.append(_missing("1", text))

    text = "T = 100, sdsc: PRI-CR is 1.65 x better than FCFS; CR does as well as or better than PRI-HISTORY"
    if 100 in all_tasks and ran("FCFS", "PRI-CR", "PRI-HISTORY", tasks=[100]):
        gain = better(runs, "PRI-CR", "FCFS", sel(100))
        history = better(runs, "PRI-CR", "PRI-HISTORY", sel(100))
        as_well = DOES_NOT_HOLD if direction(history) == DOES_NOT_HOLD else HOLDS
        out.append(Claim("2", text, combine([direction(gain), as_well]),
                         f"FCFS / PRI-CR {gain.text()} ({direction(gain)}); PRI-HISTORY / PRI-CR {history.text()} "
                         f"(as well or better unless below 1: {as_well})"))
    else:
        out.append(_missing("2", text))

    text = "EXCL-S.5 is 1.49 x better than FCFS on SDSC (and about 10 % worse on LRI-WISC)"
    if ran("FCFS", "EXCL-S.5"):
        gain = better(runs, "EXCL-S.5", "FCFS")
        per_t = "; ".join(f"T = {t}: {better(runs, 'EXCL-S.5', 'FCFS', sel(t)).text()}" for t in all_tasks)
        out.append(Claim("3", text, direction(gain),
                         f"sdsc: {gain.text()} ({per_t}); LRI-WISC not checked here: {OTHERS}"))
    else:
        out.append(_missing("3", text))

    text = "EXCL-PRED's makespan prediction errs by 7.0 % on average, at most 10 %"
    errors = [r.prediction_error for r in runs if r.policy == "EXCL-PRED" and not math.isnan(r.prediction_error)]
    if errors:
        mean = figure(errors)
        worst = max(errors)
        verdict = combine([below(mean, 0.10), HOLDS if worst <= 0.10 else DOES_NOT_HOLD])
        per_t = "; ".join(f"T = {t}: " + figure([r.prediction_error for r in runs if r.policy == "EXCL-PRED"
                                                 and r.tasks == t]).text(1, True) for t in all_tasks)
        out.append(Claim("4", text, verdict, f"sdsc: {mean.text(1, True)}, at most {worst * 100:.1f} % ({per_t})"))
    else:
        out.append(_missing("4", text))

    text = "EXCL-PRED is about 13 % worse than EXCL-S.5 on SDSC (17 % better on LRI-WISC, 12 % on homogeneous)"
    if ran("EXCL-PRED", "EXCL-S.5"):
        f = better(runs, "EXCL-PRED", "EXCL-S.5")
        worse = {HOLDS: DOES_NOT_HOLD, DOES_NOT_HOLD: HOLDS}.get(direction(f), UNDECIDED)
        out.append(Claim("5", text, worse, f"sdsc: EXCL-PRED {f.text()} x better than EXCL-S.5 (worse if below 1: "
                                           f"{worse}); LRI-WISC and homogeneous not checked here: {OTHERS}"))
    else:
        out.append(_missing("5", text))

    text = ("EXCL-PRED-TO is within 1.7 x of optimal on average, 2.15 x better than FCFS, 1.5 x better than "
            "EXCL-PRED-DUP, usually more than 13 % better than EXCL-PRED")
    if ran("EXCL-PRED-TO", "FCFS", "EXCL-PRED-DUP", "EXCL-PRED"):
        to_opt = ratio_to_optimal(runs, "EXCL-PRED-TO")
        parts = [("to optimal", to_opt, below(to_opt, 1.7))]
        parts += [(f"than {p}", f, direction(f)) for p in ("FCFS", "EXCL-PRED-DUP", "EXCL-PRED")
                  for f in [better(runs, "EXCL-PRED-TO", p)]]
        out.append(Claim("6", text, combine([v for _, _, v in parts]),
                         "sdsc: " + "; ".join(f"{name} {f.text()} ({v})" for name, f, v in parts)))
    else:
        out.append(_missing("6", text))
    return out


def _missing(number: str, text: str) -> Claim:
    return Claim(number, text, "not checked in this slice", f"run `{FULL}` for it")


REPRODUCTION = Reproduction(
    name="kondo",
    title="Kondo, Chien & Casanova, \"Resource management for rapid application turnaround on enterprise desktop "
          "grids\" (SC 2004)",
    checks="the six claims on sdsc (T = 100 and 400 tasks of 15 min, 30 paired start points); the LRI-WISC and "
           "homogeneous halves of claims 3 and 5 name their sweeps",
    slices=(SLICE,),
    quick_slices=(QUICK,),
    judge=judge,
    minutes="about 2 min",
    quick_minutes="about 15 s",
    doc="docs/reproduction-kondo.md",
)
