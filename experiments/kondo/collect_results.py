"""Copy a kondo sweep's summary.csv and plots into a results folder, with runs.csv: the per-run columns
mgst.papers.kondo.findings reads (6 significant digits; sweep.csv is larger, and its wall times are the machine's).

    python experiments/kondo/collect_results.py runs/kondo/sdsc experiments/kondo/results/sdsc
"""

import csv
import shutil
import sys
from pathlib import Path

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
dst.mkdir(parents=True, exist_ok=True)
shutil.copy(src / "summary.csv", dst / "summary.csv")
(dst / "plots").mkdir(exist_ok=True)
for p in (src / "plots").glob("*.png"):
    shutil.copy(p, dst / "plots" / p.name)
cols = ("platform", "policy", "tasks", "task_minutes", "seed", "replication", "ratio", "makespan", "optimal", "waste",
        "prediction_error", "replicas", "error")
with open(src / "sweep.csv", newline="") as f, open(dst / "runs.csv", "w", newline="") as g:
    w = csv.writer(g, lineterminator="\n")
    w.writerow(cols)
    for r in csv.DictReader(f):
        out = []
        for c in cols:
            v = r.get(c, "")
            if c in ("ratio", "makespan", "optimal", "waste", "prediction_error") and v not in ("", "nan"):
                v = f"{float(v):.6g}"
            out.append(v)
        w.writerow(out)
print(dst, sum(1 for _ in open(dst / "runs.csv")) - 1, "runs")
