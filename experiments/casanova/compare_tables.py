"""Print a Casanova sweep's Tables I and II beside the paper's (markdown), with Spearman's rank correlation of
%diff, and write the tables and Figure 2 into the sweep's folder.

    python experiments/casanova/compare_tables.py runs/casanova
"""

import math
import sys
from pathlib import Path

from mgst.papers.casanova.tables import PAPER_TABLE_I, PAPER_TABLE_II, read_rows, spearman, table, write_outputs


def fmt(v: float, digits: int = 2) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "sweep.csv").is_file():
        print("error: give a Casanova sweep's folder (holding sweep.csv)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    rows = read_rows(out / "sweep.csv")
    write_outputs(out)
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
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
