"""Does a simulation calibrated from a short testbed run predict a longer run on the same network? (issue 22, part 2)

For each experiment file and one-way delay: a short calibration run and a longer run (another seed) with
`mgst run FILE [--network delay=Dms]`, then the longer run's setting simulated over the same model time, with the
same seed (replication 0 draws the very jobs the run had), warm-up and replications, three ways: as it is, with the
short run's overheads (`--overheads SHORT_RUN`, the journal's four: t2..t4 before computing, t5..t6 after), and with
those and the executor's overrun. Writes a Markdown table of the errors against the long run's overall mean response
(docs/fidelity.md, "Calibrated overheads"). Run from the repository root:

    MGST_PURE=1 python experiments/calibration/run_calibration.py --out runs/calibration

`--reuse` takes the runs already in --out (only the simulations are redone). The machine's load average is noted
with every run: the figures of a loaded machine are not those of an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mgst.config import load_experiment  # noqa: E402
from mgst.simulate import run_simulation  # noqa: E402
from mgst.testbed.overheads import overheads_from_run  # noqa: E402

GOAL = 0.10  # the issue's: within 10 % of the longer run's overall mean response


@dataclass
class Row:
    file: str
    delay_ms: float
    load: str
    short: Path
    long: Path
    testbed: tuple[float, float, float, int]  # mean, low, high, jobs
    plain: tuple[float, float, float]
    calibrated: tuple[float, float, float]
    with_overrun: tuple[float, float, float]
    same_jobs: tuple[float, float, float]  # replication 0 alone: plain, calibrated, with overrun (means)
    pre_post_ms: tuple[float, float]


def testbed_run(file: Path, delay_ms: float, duration: float, seed: int, out: Path, reuse: bool) -> str:
    """Run the testbed (unless ``reuse`` and its summary is there); the 1-minute load before and after."""
    if reuse and (out / "summary.json").exists():
        return "reused"
    cmd = [sys.executable, "-m", "mgst", "run", str(file), "--duration", str(duration), "--seed", str(seed),
           "--out", str(out), "--no-live", "--quiet"]
    if delay_ms > 0:
        cmd += ["--network", f"delay={delay_ms:g}ms"]
    before = os.getloadavg()[0]
    t0 = time.time()
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    after = os.getloadavg()[0]
    load = f"{before:.2f}->{after:.2f}"
    (out / "load.txt").write_text(f"{load} ({time.time() - t0:.0f} s)\n")
    return load


def mean_ci(summary) -> tuple[float, float, float]:
    o = summary.overall
    return o.mean, o.low, o.high


def simulate(file: Path, long_run: Path, short_run: Path) -> tuple:
    exp = load_experiment(file)
    s = json.loads((long_run / "summary.json").read_text())
    horizon, warmup, seed = s["horizon"], s["warmup"], s["seed"]
    four = overheads_from_run(short_run, exp, overrun=False)
    full = overheads_from_run(short_run, exp)
    out = []
    for reps in (None, 1):
        out.append([mean_ci(run_simulation(exp, horizon=horizon, warmup=warmup, seed=seed, replications=reps,
                                           overheads=ov, workers=1)[0]) for ov in (None, four, full)])
    pre = [v for m in four.machines for v in m.pre]
    post = [v for m in four.machines for v in m.post]
    unit = exp.testbed.time_unit * 1e3
    testbed = (s["overall"]["mean_response"], *s["overall"]["ci95"], s["overall"]["jobs"])
    return testbed, out, (sum(pre) / len(pre) * unit, sum(post) / len(post) * unit)


def err(sim: float, testbed: float) -> str:
    e = (sim - testbed) / testbed
    return f"{e:+.1%}{'' if abs(e) <= GOAL else ' ✗'}"


def table(rows: list[Row], short: float, long: float) -> str:
    lines = [
        f"Short (calibration) runs of {short:g} s, longer runs of {long:g} s; errors are (simulation - testbed) / "
        f"testbed of the longer run's overall mean response; ✗: beyond {GOAL:.0%}. 'Same jobs': replication 0 alone, "
        "which draws the very jobs of the longer run.",
        "",
        "| setting | delay | load (1 min, before->after each run) | testbed (95 % CI), jobs | mean pre / post (ms) "
        "| plain sim | error | calibrated | error | + overrun | error | same jobs: plain / calibrated / + overrun |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tm, tl, th, n = r.testbed
        cells = [r.file, f"{r.delay_ms:g} ms", r.load, f"{tm:.4f} ({tl:.4f}, {th:.4f}), {n}",
                 f"{r.pre_post_ms[0]:.2f} / {r.pre_post_ms[1]:.2f}"]
        for sim in (r.plain, r.calibrated, r.with_overrun):
            cells += [f"{sim[0]:.4f}", err(sim[0], tm)]
        cells.append(" / ".join(err(m, tm) for m in r.same_jobs))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", nargs="+", type=Path,
                   default=[ROOT / "experiments/hihi-mfd-fd.toml", ROOT / "experiments/hihi-mpd-fe.toml"])
    p.add_argument("--delays", nargs="+", type=float, default=[0.0, 20.0, 50.0], help="one-way delays, ms")
    p.add_argument("--short", type=float, default=60.0, help="seconds of job generation of the calibration run")
    p.add_argument("--long", type=float, default=180.0, help="seconds of job generation of the predicted run")
    p.add_argument("--short-seed", type=int, default=101)
    p.add_argument("--long-seed", type=int, default=202)
    p.add_argument("--out", type=Path, default=Path("runs/calibration"))
    p.add_argument("--reuse", action="store_true", help="reuse the runs already in --out")
    args = p.parse_args()
    rows = []
    for delay in args.delays:
        for file in args.files:
            name = f"{file.stem}-d{delay:g}ms"
            short, long = args.out / f"{name}-short", args.out / f"{name}-long"
            load_s = testbed_run(file, delay, args.short, args.short_seed, short, args.reuse)
            load_l = testbed_run(file, delay, args.long, args.long_seed, long, args.reuse)
            if load_s == "reused":
                load_s = (short / "load.txt").read_text().split()[0] if (short / "load.txt").exists() else "?"
            if load_l == "reused":
                load_l = (long / "load.txt").read_text().split()[0] if (long / "load.txt").exists() else "?"
            testbed, sims, pre_post = simulate(file, long, short)
            (ten, one) = sims
            rows.append(Row(file.stem, delay, f"{load_s}, {load_l}", short, long, testbed, ten[0], ten[1], ten[2],
                            (one[0][0], one[1][0], one[2][0]), pre_post))
            out = table(rows, args.short, args.long)
            (args.out / "calibration.md").write_text(out)
            print(out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
