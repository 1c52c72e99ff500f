"""The Kondo slide grid's speed (issue 23's target: one platform's full grid under 30 minutes on this machine).

A slice of the sdsc grid (experiments/kondo/kondo-sdsc.toml): every policy (11), task count (100, 200, 400) and
size (5, 15, 35 min) at --start-points start points, so every kind of cell is in it in the grid's proportions;
the full grid is the same cells at 100 start points, so its time is the slice's x 100 / start points. Each run is
the command itself, ``python -m mgst sweep FILE --workers N --no-plots --quiet``, in a fresh process and folder; the
platform is generated once, before the clock starts (a sweep generates it once too, in some 20 s). 1 and 2 workers
alternate over the repeats, so drift hits both alike; medians are reported, with the CPU that other processes used
during each run (from /proc/stat). Then ``--full`` times the whole grid once with 2 workers, as a user runs it.

    MGST_PURE=1 python benchmarks/bench_kondo_sweep.py                      # 3 repeats, some 5 minutes
    MGST_PURE=1 python benchmarks/bench_kondo_sweep.py --repeat 1 --full    # and the whole grid (some 11 minutes)
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GRID = ROOT / "experiments" / "kondo" / "kondo-sdsc.toml"
FULL_START_POINTS = 100


def busy_ticks() -> tuple[int, int]:
    """All CPUs' busy and total jiffies so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def sweep_file(folder: Path, platforms: Path) -> Path:
    """The sdsc grid's file with the platform given (generated once, outside the timed runs)."""
    text = GRID.read_text()
    assert "[options]" in text and "platforms" not in tomllib.loads(text).get("options", {})
    path = folder / "kondo-sdsc.toml"
    path.write_text(text.replace("[options]", f"[options]\nplatforms = {str(platforms)!r}"))
    return path


def run(file: Path, out: Path, workers: int, start_points: int | None) -> tuple[float, float, str]:
    """One sweep command: its wall time, the CPUs others used meanwhile, and a digest of its results."""
    argv = [sys.executable, "-m", "mgst", "sweep", str(file), "--workers", str(workers), "--out", str(out),
            "--no-plots", "--quiet"]
    if start_points is not None:
        argv += ["--replications", str(start_points)]
    ours0 = os.times()
    busy0, total0 = busy_ticks()
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    busy1, total1 = busy_ticks()
    ours1 = os.times()
    hz = os.sysconf("SC_CLK_TCK")
    ours = (ours1.children_user + ours1.children_system) - (ours0.children_user + ours0.children_system)
    others = max(0.0, (busy1 - busy0) / hz - ours) / wall
    with open(out / "sweep.csv", newline="") as f:
        rows = sorted((r["policy"], r["tasks"], r["task_minutes"], r["replication"], r["ratio"], r["waste"])
                      for r in csv.DictReader(f))
    return wall, others, hashlib.sha256(repr(rows).encode()).hexdigest()[:16]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--start-points", type=int, default=5, help="start points of the slice (the grid has 100)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--full", action="store_true", help="then the whole grid once, with 2 workers")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-kondo-") as tmp:
        folder = Path(tmp)
        from mgst.traces.platform import generate_platform, write_platform  # noqa: PLC0415

        spec = tomllib.loads(GRID.read_text())["options"]
        platforms = folder / "platforms"
        write_platform(generate_platform("sdsc", hosts=spec["hosts"], days=spec["days"], seed=spec["platform_seed"]),
                       platforms / "sdsc")
        file = sweep_file(folder, platforms)
        times: dict[int, list[float]] = {1: [], 2: []}
        digests = set()
        for k in range(args.repeat):
            for workers in ((1, 2) if k % 2 == 0 else (2, 1)):
                wall, others, digest = run(file, folder / f"w{workers}-{k}", workers, args.start_points)
                times[workers].append(wall)
                digests.add(digest)
                print(f"repeat {k}: {workers} worker(s) {wall:6.1f} s (others used {others:.2f} CPUs)", flush=True)
        cells = 11 * 3 * 3 * args.start_points
        for workers, t in times.items():
            m = statistics.median(t)
            print(f"{workers} worker(s): median {m:.1f} s for {cells} cells ({cells / m:.1f} cells/s); the full grid "
                  f"({cells * FULL_START_POINTS // args.start_points} cells) at this rate: "
                  f"{m * FULL_START_POINTS / args.start_points / 60:.1f} min")
        print(f"2 workers / 1: {statistics.median(times[1]) / statistics.median(times[2]):.2f}x; results "
              f"{'identical in every run' if len(digests) == 1 else 'DIFFER between runs'}")
        if args.full:
            wall, others, _ = run(file, folder / "full", 2, None)
            print(f"the full grid ({cells * FULL_START_POINTS // args.start_points} cells), 2 workers: "
                  f"{wall / 60:.1f} min (others used {others:.2f} CPUs)")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
