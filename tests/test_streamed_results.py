"""A run that keeps no records gives the results of one that does, digit for digit, and holds few records."""

from __future__ import annotations

import dataclasses
import tracemalloc
from pathlib import Path

import pytest

from mgst.config import load_experiment
from mgst.core.state import JobRecord, JobStatus
from mgst.model import BagList, Experiment, Job, JobClass, Machine, PolicySpec
from mgst.papers.anglano import scenario as anglano
from mgst.results import job_rows
from mgst.sim.loop import Simulation, _EventLoop
from mgst.sim.replications import _reduced
from mgst.sim.streamed_totals import CROWDED, StreamedTotals

ROOT = Path(__file__).resolve().parents[1]
HORIZON = 200.0
WARMUP = 40.0
MAX_BAGS = 6  # a bag list's first bags: what streaming changes is per job and per bag, not their number


def _experiments() -> list[tuple[str, Experiment, float, float]]:
    """(name, experiment, horizon, warm-up): every shipped experiment that loads on its own, the MGST settings with
    three policies, and seed 000's bag grid (each policy), cut short."""
    out = []
    for path in sorted(ROOT.glob("experiments/**/*.toml")):
        try:
            exp = load_experiment(path)
        except Exception:  # noqa: BLE001 (a sweep or a scenario file, not an experiment)
            continue
        policies = ("lpas_dg", "fcfs", "random") if path.parent.name == "experiments" else (exp.policy.name,)
        if isinstance(exp.workload, BagList) and len(exp.workload.bags) > MAX_BAGS:  # (50 bags of 1,200 at 0: 20 s)
            w = exp.workload
            exp = dataclasses.replace(exp, workload=dataclasses.replace(
                w, bags=w.bags[:MAX_BAGS], attributes=w.attributes[:MAX_BAGS] if w.attributes else w.attributes))
        for policy in policies:
            spec = exp.policy if policy == exp.policy.name else PolicySpec(policy)
            horizon = min(exp.simulation.horizon, HORIZON)
            out.append((f"{path.relative_to(ROOT)}-{policy}", dataclasses.replace(exp, policy=spec), horizon,
                        min(exp.simulation.warmup, horizon / 5)))
    for policy in ("fcfs_share", "fcfs_excl", "rr", "rr_nrf", "long_idle"):
        exp = anglano.experiment("low", "heterogeneous", "All_M", "low", policy, horizon=1e12, warmup=0.0,
                                 replications=1, seed=1, checkpoint_interval=600.0, max_bags=4)
        out.append((f"anglano-{policy}", exp, 1e12, 0.0))
    base = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")  # failures noticed by time-outs (testbed)
    out.append(("hihi-mfd-fd-timeout", dataclasses.replace(
        base, testbed=dataclasses.replace(base.testbed, detection="timeout")), HORIZON, WARMUP))
    return out


EXPERIMENTS = _experiments()


@pytest.mark.parametrize(("name", "exp", "horizon", "warmup"), EXPERIMENTS, ids=[e[0] for e in EXPERIMENTS])
def test_a_run_without_records_reduces_to_the_same_results(name, exp, horizon, warmup):
    drain = 1e12 if horizon >= 1e12 else None  # (a bag run: until its bags are done)
    seed = exp.simulation.seed
    kept = _reduced(exp, 0, seed, horizon, warmup, True, True, None, drain_limit=drain)
    streamed = _reduced(exp, 0, seed, horizon, warmup, False, True, None, drain_limit=drain)
    assert len(kept.rows) == kept.jobs_total and not streamed.rows
    kept.rows = []
    if kept.bags is not None:  # the bag rows are kept either way, from the bags' own totals
        assert kept.bags.rows == streamed.bags.rows  # type: ignore[union-attr]
    # Every field, floats compared as their repr: the same sums in the same order
    assert repr(dataclasses.asdict(streamed)) == repr(dataclasses.asdict(kept))


def test_a_run_without_records_drops_them_as_jobs_end():
    exp = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    sim = Simulation(exp, horizon=2000.0, keep_records=False)
    run = sim.run()
    assert run.jobs == [] and run.jobs_total > 50_000
    assert len(sim.core.jobs) < 100  # only those still over when the run ended
    assert not sim.core.view.given_up  # those of done jobs went with them
    with pytest.raises(ValueError, match="kept no records"):
        run.counted_totals(len(exp.classes), 0.0, 2000.0)  # its totals count another window
    with pytest.raises(ValueError, match="kept no records"):
        list(job_rows(exp, run, 100.0, 2000.0))


def test_a_run_without_records_peaks_at_a_fraction_of_the_memory():
    exp = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    peaks = {}
    for keep in (True, False):
        tracemalloc.start()
        try:
            run = Simulation(exp, horizon=1000.0, keep_records=keep).run()
            peaks[keep] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert run.jobs_total > 25_000
        del run
    assert peaks[False] * 10 < peaks[True], peaks


@pytest.mark.parametrize("policy", ["lpas_dg", "fcfs"])
def test_a_job_over_leaves_the_core_at_once_even_behind_one_still_running(policy: str) -> None:
    """Mid-run on a large grid, what waits to be summed behind the oldest unfinished job is figures, not records:
    none of the jobs held as records is over, and the ones over are out of the core."""
    base = load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml")
    k = 100  # the six machines a hundred times over, each class arriving a hundred times as often
    machines = tuple(Machine(f"M{j + 1}", base.machines[j % 6].rates, base.machines[j % 6].availability)
                     for j in range(6 * k))
    classes = tuple(JobClass(c.name, c.arrival_rate * k, c.granularity) for c in base.classes)
    exp = dataclasses.replace(base, machines=machines, classes=classes, policy=PolicySpec(policy))
    sim = Simulation(exp, horizon=40.0, keep_records=False)
    loop = _EventLoop(sim)
    assert loop.run(20.0) == 20.0  # stopped mid-run
    totals = loop.totals
    assert totals.by_id  # a Poisson workload numbers its jobs in arrival order
    waiting = totals.arrived[totals.front:]
    records = [x for x in waiting if isinstance(x, JobRecord)]
    assert records and isinstance(waiting[0], JobRecord)  # the oldest is running: it holds the others back
    assert not [r for r in records if r.status is JobStatus.DONE and not r.replicas], "an over job kept its record"
    reduced = len(waiting) - len(records)
    assert reduced > 10 * len(records), (reduced, len(records))  # most that wait are over, and reduced
    assert len(sim.core.jobs) == len(records)  # the reduced ones left the core


def test_on_a_small_grid_the_few_jobs_behind_a_running_one_wait_as_records() -> None:
    """Reducing a job ahead of the front costs time; on six machines the few that wait are summed from their records."""
    sim = Simulation(load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml"), horizon=2000.0, keep_records=False)
    loop = _EventLoop(sim)
    assert loop.run(1000.0) == 1000.0
    totals = loop.totals
    waiting = totals.arrived[totals.front:]
    assert waiting and len(waiting) <= CROWDED
    assert all(isinstance(x, JobRecord) for x in waiting)


def test_jobs_numbered_out_of_arrival_order_wait_for_the_front_as_records() -> None:
    core = Simulation(load_experiment(ROOT / "experiments" / "hihi-mfd-fd.toml"), horizon=10.0).core
    totals = StreamedTotals(core, 3, 0.0, 10.0)
    for jid in (7, 8, 9):
        totals.note(JobRecord(Job(jid, 0, 1.0), 0, 1.0))
    assert totals.by_id and totals.first_id == 7
    totals.note(JobRecord(Job(11, 0, 1.0), 0, 1.0))  # not first_id + 3: places are no longer known by id
    assert not totals.by_id
    totals.note(JobRecord(Job(10, 0, 1.0), 0, 1.0))
    assert not totals.by_id
