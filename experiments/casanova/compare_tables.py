"""Print Casanova sweeps' Tables I and II beside the paper's (markdown), with Spearman's rank correlation of
%diff and the eight claims judged (mgst.papers.casanova.claims), from one or more sweep folders read
together (slices run into separate folders; an instance in several counts once); --figure draws the paper's
Figure 2 (%diff against w_min, m = 10).

    python experiments/casanova/compare_tables.py runs/casanova-m5 runs/casanova-m10 \\
        --figure docs/img/casanova-figure2.png
"""

import argparse
import math
import sys
from pathlib import Path

from mgst.papers.casanova.claims import judge, paired
from mgst.papers.casanova.heuristics import CRITERIA, PASSIVE
from mgst.papers.casanova.tables import PAPER_TABLE_I, PAPER_TABLE_II, figure2, read_rows, spearman, table

INSTANCE = ("m", "n_com", "w_min", "scenario", "seed", "replication")  # slices that overlap count it once


def fmt(v: float, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path,
                        help="sweep folders (each holding sweep.csv), or sweep.csv files")
    parser.add_argument("--figure", type=Path, help="write Figure 2 (PNG) here")
    args = parser.parse_args(argv)
    files = [f if f.is_file() else f / "sweep.csv" for f in args.folders]
    missing = [f for f in files if not f.is_file()]
    if missing:
        print(f"error: {missing[0]} is not a file (give Casanova sweep folders or their sweep.csv)", file=sys.stderr)
        return 2
    rows = list({tuple(r[k] for k in INSTANCE): r for f in files for r in read_rows(f)}.values())
    for m, paper in ((5, PAPER_TABLE_I), (10, PAPER_TABLE_II)):
        t = table(rows, m)
        if not any(r["instances"] for r in t):
            continue
        print(f"\n### m = {m}: {t[0]['instances']} instances\n")
        print("| heuristic | #fails | %diff | 95 % interval | %wins | %wins30 | stdv | paper #fails | paper %diff |"
              " paper %wins | paper %wins30 | paper stdv |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in t:
            p = paper.get(r["heuristic"])
            theirs = (" | ".join(fmt(float(v)) if i else str(v) for i, v in enumerate(p)) if p
                      else "- | - | - | - | -")
            interval = f"[{fmt(r['diff_low'])}, {fmt(r['diff_high'])}]"
            print(f"| {r['heuristic']} | {r['fails']} | {fmt(r['diff'])} | {interval} |"
                  f" {fmt(r['wins'])} | {fmt(r['wins30'])} |"
                  f" {fmt(r['stdv'])} | {theirs} |")
        rho = spearman({r["heuristic"]: r["diff"] for r in t}, {h: v[1] for h, v in paper.items()})
        print(f"\nSpearman's rank correlation of %diff with the paper's ({len(paper)} heuristics): {rho:.3f}")
    if any(str(r["m"]) == "5" for r in rows):
        building_blocks(rows)
    print("\n### The claims\n")
    for v in judge(rows):
        print(f"{v.number}. **{v.text}**: *{v.verdict}*. {v.figure}")
    if args.figure is not None:
        print(f"\nFigure 2: {figure2(rows, args.figure)}")
    return 0


def kind(metric: str) -> str:
    return "time" if metric.lstrip("I") == "E" else "probability-weighted"


def building_blocks(rows: list) -> None:
    """Each C-H against its passive H at m = 5, paired over the scenarios, beside the paper's difference of
    Table I's %diff: the paper's C-H is worse than H exactly where C and H measure the same kind
    (docs/reproduction-casanova.md, "What the paper's poor proactive heuristics have in common")."""
    print("\n### m = 5: each proactive C-H against its building block H\n")
    print("| C-H | C-H - H | 95 % interval | paper C-H - H | C and H measure |")
    print("|---|---|---|---|---|")
    for c in CRITERIA:
        for h in PASSIVE:
            mean, low, high, _ = paired(rows, 5, f"{c}-{h}", h)
            theirs = PAPER_TABLE_I[f"{c}-{h}"][1] - PAPER_TABLE_I[h][1]
            same = "the same kind" if kind(c) == kind(h) else "different kinds"
            print(f"| {c}-{h} | {fmt(mean, 1)} | [{fmt(low, 1)}, {fmt(high, 1)}] | {theirs:+.1f} | {same} |")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
