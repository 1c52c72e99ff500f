"""A digest of every job record over a fixed set of simulations: a refactor proves itself by the same digest.

The runs: the 16 MGST paper experiments with LPAS_DG, FCFS and random (one replication, horizon 300),
the bag experiments of ``experiments/bot`` (one replication each, as their files say, horizon cut to
300), and hihi-mfd-fd's grid scaled to 10, 100 and 1,000 machines (LPAS_DG and FCFS, 5,000 jobs).
Hashed per job: status, completion time, finishing machine, and per replica its machine, sent and
ended times and outcome (times as ``repr`` of floats: any change shows).

    python benchmarks/job_digest.py            # prints the digest and the number of jobs hashed
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_scale import scaled  # noqa: E402

from mgst.config import load_experiment  # noqa: E402
from mgst.model import Experiment, PolicySpec, SimulationSettings  # noqa: E402
from mgst.sim import Simulation  # noqa: E402

HORIZON = 300.0
SCALED_SIZES = (10, 100, 1000)
SCALED_JOBS = 5000


def runs() -> list[Experiment]:
    """The fixed set of experiments, in a fixed order."""
    out: list[Experiment] = []
    for path in sorted((ROOT / "experiments").glob("*.toml")):
        base = load_experiment(path)
        for policy in ("lpas_dg", "fcfs", "random"):
            sim = dataclasses.replace(base.simulation, horizon=HORIZON, warmup=0.0, replications=1)
            out.append(dataclasses.replace(base, name=f"{base.name}-{policy}", policy=PolicySpec(policy),
                                           simulation=sim))
    for path in sorted((ROOT / "experiments" / "bot").glob("*.toml")):
        try:
            base = load_experiment(path)
        except Exception:  # noqa: BLE001 (a sweep file, not an experiment)
            continue
        sim = dataclasses.replace(base.simulation, horizon=min(base.simulation.horizon, HORIZON), replications=1)
        out.append(dataclasses.replace(base, simulation=sim))
    base = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    for policy in ("lpas_dg", "fcfs"):
        for n in SCALED_SIZES:
            exp = scaled(base, n, policy, SCALED_JOBS)
            out.append(dataclasses.replace(exp, simulation=SimulationSettings(
                horizon=exp.simulation.horizon, warmup=0.0, replications=1, seed=exp.simulation.seed)))
    return out


def digest(experiments: list[Experiment]) -> tuple[str, int]:
    h = hashlib.blake2b(digest_size=8)
    jobs = 0
    for exp in experiments:
        run = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon=exp.simulation.horizon).run()
        h.update(f"{exp.name}|{run.unfinished}|{run.end_time!r}\n".encode())
        for rec in run.jobs:
            jobs += 1
            h.update(f"{rec.id}|{rec.status.value}|{rec.completed!r}|{rec.done_on}".encode())
            for r in rec.history:
                h.update(f"|{r.machine},{r.sent!r},{r.ended!r},{r.outcome}".encode())
            h.update(b"\n")
    return h.hexdigest(), jobs


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    exps = runs()
    value, jobs = digest(exps)
    print(f"{value}  ({jobs} jobs in {len(exps)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
