"""A digest of every job record over a fixed set of simulations: a refactor proves itself by the same digest.

The runs: the 16 MGST paper experiments with LPAS_DG, FCFS and random (one replication, horizon 300),
the bag experiments of ``experiments/bot`` (one replication each, as their files say, horizon cut to
300), and hihi-mfd-fd's grid scaled to 10, 100 and 1,000 machines (LPAS_DG and FCFS, 5,000 jobs); then
seed 000's Bag-of-Tasks grid (``--bags``, on by default): its five schedulers, High and Low availability,
both grids, All_M at low intensity, 4 bags each (the shipped bag experiment ends before a bag arrives).
Hashed per job: status, completion time, finishing machine, and per replica its machine, sent and
ended times and outcome (times as ``repr`` of floats: any change shows).

    python benchmarks/job_digest.py            # prints the digest and the number of jobs hashed
    python benchmarks/job_digest.py --no-bags  # the runs of issues 8-19's digest only (83b37c255d4a76ff)
Since 2026-12-02 (a run whose last job ends before its horizon lasts until the horizon: docs/models.md), one run's
``end_time`` hashed here is its horizon, not 0 (lab-rrnrf-weibull: no bag arrives in its 300): a0ee86122fc65f8d and
83b37c255d4a76ff; 7030a377339400b7 and 318379e40520cb6a before, every job record the same.

It digests the mgst of its own checkout (its root goes first on sys.path), whatever is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # this checkout's mgst, not an installed one

from bench_scale import scaled  # noqa: E402

from mgst.config import load_experiment  # noqa: E402
from mgst.model import Experiment, PolicySpec, SimulationSettings  # noqa: E402
from mgst.papers.anglano import scenario as anglano  # noqa: E402
from mgst.sim.loop import Simulation  # noqa: E402

HORIZON = 300.0
SCALED_SIZES = (10, 100, 1000)
SCALED_JOBS = 5000


BAG_POLICIES = ("fcfs_share", "fcfs_excl", "rr", "rr_nrf", "long_idle")
BAGS = 4


def bag_runs() -> list[Experiment]:
    """Seed 000's schedulers on small grids: every policy, High and Low availability, both grids."""
    return [anglano.experiment(avail, grid, "All_M", "low", policy, horizon=1e12, warmup=0.0, replications=1,
                               seed=1, checkpoint_interval=600.0, max_bags=BAGS)
            for policy in BAG_POLICIES for avail in ("high", "low") for grid in ("homogeneous", "heterogeneous")]


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
        drain = 1e12 if exp.simulation.horizon >= 1e12 else None  # (a bag run: until its bags are done)
        sim = Simulation(exp, replication=0, seed=exp.simulation.seed, horizon=exp.simulation.horizon,
                         **({"drain_limit": drain} if drain is not None else {}))
        run = sim.run()
        h.update(f"{exp.name}|{run.unfinished}|{run.end_time!r}\n".encode())
        for rec in run.jobs:
            jobs += 1
            h.update(f"{rec.id}|{rec.status.value}|{rec.completed!r}|{rec.done_on}".encode())
            for r in rec.history:
                h.update(f"|{r.machine},{r.sent!r},{r.ended!r},{r.outcome}".encode())
            h.update(b"\n")
    return h.hexdigest(), jobs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-bags", action="store_true", help="leave out seed 000's bag grid")
    args = ap.parse_args(argv)
    exps = runs() + ([] if args.no_bags else bag_runs())
    value, jobs = digest(exps)
    print(f"{value}  ({jobs} jobs in {len(exps)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
