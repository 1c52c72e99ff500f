"""Paired makespans of two Casanova sweeps of the same cells (e.g. `mgst reproduce casanova` with and without
`--option reuse_data=true`): per heuristic, the ratio second / first over the instances both finished.

usage: python benchmarks/casanova_reuse_compare.py FIRST/sweep.csv SECOND/sweep.csv
"""

from __future__ import annotations

import csv
import statistics
import sys

KEY = ("m", "n_com", "w_min", "scenario", "replication")
FAILED = ("", "nan")


def rows(path: str) -> dict[tuple[str, ...], dict[str, str]]:
    with open(path, newline="") as f:
        return {tuple(r.get(k, "") for k in KEY): r for r in csv.DictReader(f)}


def main(first: str, second: str) -> None:
    a, b = rows(first), rows(second)
    keys = sorted(a.keys() & b.keys())
    heuristics = [c.removeprefix("makespan_") for c in next(iter(a.values())) if c.startswith("makespan_")]
    print(f"{len(keys)} paired instances")
    print(f"{'heuristic':10} {'median':>8} {'mean':>8} {'min':>6} {'max':>6} {'changed':>8} {'failed':>9}")
    for h in heuristics:
        ratios, changed, failed_a, failed_b = [], 0, 0, 0
        for k in keys:
            x, y = a[k][f"makespan_{h}"], b[k][f"makespan_{h}"]
            failed_a += x in FAILED
            failed_b += y in FAILED
            if x in FAILED or y in FAILED:
                continue
            ratios.append(float(y) / float(x))
            changed += float(y) != float(x)
        print(f"{h:10} {statistics.median(ratios):8.4f} {statistics.fmean(ratios):8.4f} {min(ratios):6.3f} "
              f"{max(ratios):6.3f} {changed:8d} {failed_a:>4d}/{failed_b:<4d}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
