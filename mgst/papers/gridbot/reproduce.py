"""GridBot's findings, as `mgst reproduce gridbot` runs and judges them (mgst.papers.reproduction): slices of the
experiments' sweeps (experiments/gridbot/*-sweep.toml) at their files' scales, judged by mgst.papers.gridbot.findings.

The default slice judges finding 1's ordering (Restrictive/Restrictive the lowest, disabled replication the highest)
under mgst's readings (a bag's pending replicas before its waiting tasks) and with its waiting tasks first, at 1/25
of the paper's size with 8 paired runs, and findings 3 (Condor), 4 (priorities) and 5 (small bags); --quick judges
finding 1 under mgst's readings on 3 paired runs. docs/reproduction-gridbot.md has the full sweeps and every
reading.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mgst.papers.gridbot import findings
from mgst.papers.reproduction import Claim, Reproduction, SweepSlice, not_checked

# The reading under which finding 1's ordering is judged first: mgst's (docs/reproduction-gridbot.md); 1b judges it
# under the reading that moves it (a bag's waiting tasks before its pending replicas).
ORDERING_READING = "default"
OTHER_READING = "waiting-first"
STATIC_TAIL = 2000  # R4's threshold in the community experiment's file, before scaling

DEFAULT = (
    SweepSlice("replication", "gridbot/replication-small-sweep.toml"),
    SweepSlice("condor", "gridbot/condor-sweep.toml", replications=3),
    SweepSlice("small-bags", "gridbot/small-bags-sweep.toml", replications=2, only=("reading=default",)),
    SweepSlice("priorities", "gridbot/priorities-sweep.toml", replications=1),
)
QUICK = (SweepSlice("replication", "gridbot/replication-small-sweep.toml", replications=3,
                    only=(f"reading={ORDERING_READING}",)),)

TEXTS = {
    "1": "replication in collaborative grids: Restrictive/Restrictive has the lowest turnaround",
    "1a": "replication in collaborative grids: disabled replication has the highest turnaround",
    "1b": "Restrictive/Restrictive the lowest under the waiting-first reading (a bag's waiting tasks before its "
          "pending replicas)",
    "2": "a naive server (three-day deadline, no tail policy) is much slower than GridBot on the same grids",
    "3": "GridBot is faster than plain Condor on 3,000 short jobs in one pool",
    "4": "50 bags with unique ranks start in rank order: none reaches 1,000 of 1,200 remaining jobs before a "
         "higher-ranked one",
    "5": "small bags: bundles of 10 (B1) lengthen the tail against one job at a time (B3); reserving the cluster for "
         "the tail (B5) is slower than B3",
    "6": "R4's static tail threshold (2,000 incomplete jobs) is far below its true tail (near 10,000)",
}


def judge(folders: Mapping[str, Path]) -> list[Claim]:
    rows = findings.read_rows(folder / "sweep.csv" for folder in folders.values())
    out: list[Claim] = []

    def claim(number: str, run: bool, result: tuple[str, str] | None, command: str) -> None:
        if not run or result is None:
            out.append(not_checked(number, TEXTS[number], command))
        else:
            out.append(Claim(number, TEXTS[number], *result))

    has = {r["experiment"] for r in rows}
    readings = {r["reading"] for r in rows if r["experiment"] == "replication"}
    sweep = "mgst sweep experiments/gridbot/{}-sweep.toml --workers 2"
    ordering = ORDERING_READING in readings
    claim("1", ordering, findings.replication_ordering(rows, ORDERING_READING, "lowest") if ordering else None,
          sweep.format("replication"))
    claim("1a", ordering, findings.replication_ordering(rows, ORDERING_READING, "highest") if ordering else None,
          sweep.format("replication"))
    other = OTHER_READING in readings
    claim("1b", other, findings.replication_ordering(rows, OTHER_READING, "lowest") if other else None,
          sweep.format("replication"))
    claim("2", "naive" in has, findings.ratio_claim(rows, "naive", "naive", "gridbot", "default", "280 h vs 8 h, 35")
          if "naive" in has else None, sweep.format("naive"))
    claim("3", "condor" in has, findings.ratio_claim(rows, "condor", "condor", "gridbot", "default",
                                                     "170 vs 53 min, 3.2") if "condor" in has else None,
          sweep.format("condor"))
    claim("4", "priorities" in has, findings.priority_order(rows) if "priorities" in has else None,
          sweep.format("priorities"))
    claim("5", "small-bags" in has, findings.small_bags(rows) if "small-bags" in has else None,
          sweep.format("small-bags"))
    community = [r for r in rows if r["experiment"] == "community"]
    threshold = STATIC_TAIL
    if community:
        sizes = findings.bags_of(community[0])
        threshold = max(1, round(STATIC_TAIL * sizes[3]["size"] / 30000)) if len(sizes) > 3 else STATIC_TAIL
    claim("6", bool(community), findings.static_tail(rows, threshold) if community else None,
          sweep.format("community"))
    return out


REPRODUCTION = Reproduction(
    name="gridbot",
    title="Silberstein, Sharov, Geiger & Schuster, \"GridBot: Execution of Bags of Tasks in Multiple Grids\"",
    checks="finding 1's ordering (under mgst's readings and with waiting tasks first), Condor, priorities and the "
           "small bags, on the experiments' files at a tenth to the whole of the paper's size",
    slices=DEFAULT,
    quick_slices=QUICK,
    judge=judge,
    minutes="about 20 s",
    quick_minutes="about 15 s",
    doc="docs/reproduction-gridbot.md",
)
