"""Does a simulation calibrated from a short testbed run predict a longer run on the same network?

For each experiment file and one-way delay: a short calibration run and a longer run (another seed) with
`mgst run FILE [--network delay=Dms]`, then the longer run's setting simulated over the same model time, with the
same seed (replication 0 draws the very jobs the run had), warm-up and replications, three ways: as it is, with the
short run's overheads (`--overheads SHORT_RUN`, the journal's four: t2..t4 before computing, t5..t6 after), and with
those and the executor's overrun. Writes a Markdown table of the errors against the long run's overall mean response
(docs/fidelity.md, "Calibrated overheads"). Run from the repository root:

    MGST_PURE=1 python experiments/calibration/run_calibration.py --out runs/calibration

`--delays loopback 0 20 50` adds the pullers on loopback (no emulated network) to the relay at 0, 20 and 50 ms.
`--reuse` takes the runs already in --out (only the simulations are redone). The machine's load average is noted
with every run: the figures of a loaded machine are not those of an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mgst.config import load_experiment  # noqa: E402
from mgst.sim.replications import run_simulation  # noqa: E402
from mgst.testbed.export import load_run  # noqa: E402
from mgst.testbed.overheads import overheads_from_run  # noqa: E402

GOAL = 0.10  # the target: within 10 % of the longer run's overall mean response


# The simulations set beside each longer run: (column, overheads from which run, with the overrun).
VARIANTS = (("plain", None, False), ("calibrated", "short", False), ("+ overrun", "short", True),
            ("own run's", "long", True))


@dataclass
class Row:
    file: str
    network: str  # "loopback", or the --network spec
    durations: tuple[float, float]  # short, long (s)
    load: str
    testbed: tuple[float, float, float, int, int]  # mean, low, high, jobs counted, jobs cut off at the end
    ten: list[tuple]  # per VARIANTS, its 10 replications (as mean_ci)
    same_jobs: list[tuple]  # per VARIANTS, replication 0 alone (as mean_ci)
    pre_post_ms: dict[str, tuple[float, float]]  # short, long: mean pre and post, wall ms
    drain: float | None  # the simulations' drain limit (model time): the run's own, when it cut jobs off


def network_spec(delay: str) -> str | None:
    """The --network of a --delays value: "loopback" is none (the pullers on loopback), a number is that one-way
    delay in ms through the emulated network (0: the relay alone)."""
    return None if delay == "loopback" else f"delay={float(delay):g}ms"


def testbed_run(file: Path, network: str | None, duration: float, seed: int, out: Path, reuse: bool) -> str:
    """Run the testbed (unless ``reuse`` and its summary is there); the 1-minute load before and after."""
    if reuse and (out / "summary.json").exists():
        load = out / "load.txt"
        return load.read_text().split()[0] if load.exists() else "?"
    cmd = [sys.executable, "-m", "mgst", "run", str(file), "--duration", str(duration), "--seed", str(seed),
           "--out", str(out), "--no-live", "--quiet"]
    if network is not None:
        cmd += ["--network", network]
    before = os.getloadavg()[0]
    t0 = time.time()
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    after = os.getloadavg()[0]
    load = f"{before:.2f}->{after:.2f}"
    (out / "load.txt").write_text(f"{load} ({time.time() - t0:.0f} s)\n")
    return load


def mean_ci(simulated) -> tuple[float, float, float, int, float, float]:
    """Of run_simulation's result: the overall mean response with its interval, the jobs still in the system at the
    drain limit, and the least and greatest of the replications' own means."""
    summary, results = simulated
    o = summary.overall
    means = [r.mean() for r in results]
    return o.mean, o.low, o.high, summary.unfinished, min(means), max(means)


def simulate(file: Path, long_run: Path, short_run: Path) -> tuple:
    """The longer run's testbed figures, the VARIANTS' simulations of it (10 replications, and replication 0), and
    the mean pre and post delays of each run."""
    exp = load_experiment(file)
    s = json.loads((long_run / "summary.json").read_text())
    horizon, warmup, seed = s["horizon"], s["warmup"], s["seed"]
    drain = None  # the simulation drains as long as the horizon, unless the run cut jobs off: then as long as it did
    if s["cut_off"]:
        run = load_run(long_run)
        drain = (run.end - run.generation_end) / run.time_unit
    runs = {"short": short_run, "long": long_run}
    ten, one = [], []
    for _, source, overrun in VARIANTS:
        ov = overheads_from_run(runs[source], exp, overrun=overrun) if source else None
        for reps, out in ((None, ten), (1, one)):
            out.append(mean_ci(run_simulation(exp, horizon=horizon, warmup=warmup, seed=seed, replications=reps,
                                              overheads=ov, workers=1, drain_limit=drain)))
    unit = exp.testbed.time_unit * 1e3
    pre_post = {}
    for name, run in runs.items():
        ov = overheads_from_run(run, exp)
        pre_post[name] = tuple(statistics.fmean(v for m in ov.machines for v in getattr(m, kind)) * unit
                               for kind in ("pre", "post"))
    testbed = (s["overall"]["mean_response"], *s["overall"]["ci95"], s["overall"]["jobs"], len(s["cut_off"]))
    return testbed, ten, one, pre_post, drain


def err(sim: float, testbed: float) -> str:
    e = (sim - testbed) / testbed
    return f"{e:+.1%}{'' if abs(e) <= GOAL else ' ✗'}"


def table(rows: list[Row]) -> str:
    names = [v[0] for v in VARIANTS]
    lines = [
        "Errors are (simulation - testbed) / testbed of the longer run's overall mean response; ✗: beyond "
        f"{GOAL:.0%}. 10 replications, then replication 0 alone ('same jobs': the very jobs and failures of the "
        "longer run). Columns: " + ", ".join(names) + " (the last: the longer run's own overheads, for reference); "
        "each with its 95 % interval over the 10 replications, and for 'calibrated' the range of the replications' "
        "own means. A run that cut jobs off at the end of its drain is simulated with the same drain (jobs unfinished "
        "then are not counted, as the run's were not).",
        "",
        "| setting | network | runs (s) | load (1 min, before->after: short; long) | longer run: testbed (95 % CI), "
        "jobs counted, cut off | mean pre / post (ms): short; long | " + " | ".join(names)
        + " | calibrated: replications' range | same jobs: " + " / ".join(names) + " |",
        "|" + "---|" * (8 + len(names)),
    ]
    for r in rows:
        tm, tl, th, n, cut = r.testbed
        cells = [r.file, r.network, f"{r.durations[0]:g}, {r.durations[1]:g}", r.load,
                 f"{tm:.4f} ({tl:.4f}, {th:.4f}), {n}, {cut}" + (f" (drain {r.drain:.0f})" if r.drain else ""),
                 "; ".join(f"{a:.2f} / {b:.2f}" for a, b in r.pre_post_ms.values())]
        for sim in r.ten:
            cells.append(f"{sim[0]:.4f} ({sim[1]:.3g}, {sim[2]:.3g}) {err(sim[0], tm)}"
                         + (f", {sim[3]} unfinished" if sim[3] else ""))
        cells.append(f"{r.ten[1][4]:.3g} to {r.ten[1][5]:.3g}")
        cells.append(" / ".join(err(m[0], tm) + (f" ({m[3]} unfinished)" if m[3] else "") for m in r.same_jobs))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", nargs="+", type=Path,
                   default=[ROOT / "experiments/hihi-mfd-fd.toml", ROOT / "experiments/hihi-mpd-fe.toml"])
    p.add_argument("--delays", nargs="+", default=["0", "20", "50"],
                   help="one-way delays in ms through the emulated network (mgst run --network delay=Dms), or "
                        "loopback (no --network)")
    p.add_argument("--short", type=float, default=60.0, help="seconds of job generation of the calibration run")
    p.add_argument("--long", type=float, default=180.0, help="seconds of job generation of the predicted run")
    p.add_argument("--short-seed", type=int, default=101)
    p.add_argument("--long-seed", type=int, default=202)
    p.add_argument("--out", type=Path, default=Path("runs/calibration"))
    p.add_argument("--reuse", action="store_true", help="reuse the runs already in --out")
    args = p.parse_args()
    rows = []
    args.out.mkdir(parents=True, exist_ok=True)
    for delay in args.delays:
        network = network_spec(delay)
        for file in args.files:
            name = f"{file.stem}-{'loopback' if network is None else f'd{float(delay):g}ms'}"
            short, long = args.out / f"{name}-short", args.out / f"{name}-long"
            load_s = testbed_run(file, network, args.short, args.short_seed, short, args.reuse)
            load_l = testbed_run(file, network, args.long, args.long_seed, long, args.reuse)
            durations = tuple(json.loads((d / "summary.json").read_text())["duration_s"] for d in (short, long))
            testbed, ten, one, pre_post, drain = simulate(file, long, short)
            rows.append(Row(file.stem, network or "loopback", durations, f"{load_s}; {load_l}", testbed, ten, one,
                            pre_post, drain))
            out = table(rows)
            (args.out / "calibration.md").write_text(out)
            print(out, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
