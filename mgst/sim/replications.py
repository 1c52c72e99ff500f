"""Run an experiment's independent replications in simulation and summarise them."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from mgst.bot_metrics import arrivals_end, reduce_bags, summarize_bags
from mgst.config.checks import overload_warning
from mgst.model import Experiment
from mgst.policies import import_modules
from mgst.policies.allocation import solve_allocation
from mgst.policies.failure import PolicyFailed
from mgst.process_pool import InterruptiblePool
from mgst.results import ReplicationResult, Summary, job_rows, reduce_replication, summarize, write_job_rows
from mgst.sim.loop import Simulation
from mgst.sim.overheads import Overheads
from mgst.steady_state import growth_warning
from mgst.worker_memory import free_garbage_if_grown, records_out_of_sight

log = logging.getLogger(__name__)


def jobs_part(jobs_dir: Path, replication: int) -> Path:
    """Where replication ``replication`` writes its jobs.csv rows when run_simulation is given ``jobs_dir``."""
    return jobs_dir / f"jobs-{replication:05d}.csv.part"


def _one(
    experiment: Experiment, replication: int, seed: int, horizon: float, warmup: float, keep_rows: bool,
    imports: tuple[str, ...] = (), keep_bag_rows: bool = False, jobs_dir: Path | None = None,
    overheads: Overheads | None = None, drain_limit: float | None = None, keep_batches: bool = False,
) -> ReplicationResult:
    import_modules(imports)  # a worker process may not have them yet
    # The run's records are reference cycles (a job's replicas point back to it), which only the cyclic
    # collector frees: without this, the records of every replication a process runs pile up
    # (lolo-mpd-fe: about 80 MB each). Freed in batches, since freeing them after each replication took
    # 40 % of the time; before a run, not after, so that the last one's are never walked: the process
    # ends (mgst.worker_memory).
    free_garbage_if_grown()
    with records_out_of_sight():
        return _reduced(experiment, replication, seed, horizon, warmup, keep_rows, keep_bag_rows, jobs_dir, overheads,
                        drain_limit, keep_batches)


def _reduced(
    experiment: Experiment, replication: int, seed: int, horizon: float, warmup: float, keep_rows: bool,
    keep_bag_rows: bool, jobs_dir: Path | None, overheads: Overheads | None = None, drain_limit: float | None = None,
    keep_batches: bool = False,
) -> ReplicationResult:
    # The records only for the per-job rows; else each job is summed and dropped as it ends (bags.csv rows need
    # none: a bag's totals are kept with it)
    records = keep_rows or jobs_dir is not None
    simulation = Simulation(experiment, replication=replication, seed=seed, horizon=horizon, overheads=overheads,
                            drain_limit=drain_limit, keep_records=records, warmup=warmup, keep_batches=keep_batches)
    try:
        run = simulation.run()
    except Exception as e:  # (the policy's code raised, or broke a rule of the core: said as on the testbed, and
        # picklable with its traceback as text, from a worker process)
        raise PolicyFailed(simulation.policy.name, None, simulation.core.now, e, replication) from e
    if jobs_dir is not None:  # streamed from the records: no list of rows
        write_job_rows(jobs_part(jobs_dir, replication), job_rows(experiment, run, warmup, horizon))
    result = reduce_replication(experiment, run, warmup, horizon, keep_rows, keep_batches)
    if run.bags:
        result.bags = reduce_bags(run, warmup, horizon, keep_rows or keep_bag_rows,
                                  ran_out=arrivals_end(experiment.workload, run.bags))
    result.policy_counts = getattr(simulation.policy, "report", dict)()  # (a bare PolicyHooks has none)
    return result


def default_workers(replications: int) -> int:
    """The processes run_simulation runs ``replications`` on when not told: one per replication, at most a core each."""
    return min(replications, os.cpu_count() or 1)


def run_simulation(
    experiment: Experiment,
    *,
    horizon: float | None = None,
    warmup: float | None = None,
    replications: int | None = None,
    seed: int | None = None,
    keep_rows: bool = False,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    imports: tuple[str, ...] = (),
    keep_bag_rows: bool = False,
    jobs_dir: Path | None = None,
    overheads: Overheads | None = None,
    drain_limit: float | None = None,
    rows_of: int | None = None,
) -> tuple[Summary, list[ReplicationResult]]:
    """Simulate ``replications`` replications; each draws from streams derived from (seed, replication).

    ``workers`` > 1 runs replications in parallel processes; results do not
    depend on it. ``progress(done, total)`` is called as replications finish.
    ``imports`` are modules that register policies of their own; workers import them.

    Per-job rows: ``keep_rows`` keeps each replication's jobs.csv rows (and bags.csv rows) in its
    result, in memory; ``jobs_dir`` instead has each replication stream its jobs.csv rows to
    :func:`jobs_part` in that folder (results.write_jobs makes one file of them) and keeps none.
    ``keep_bag_rows`` keeps the bags.csv rows alone (one per bag, few). ``rows_of``: the one replication that keeps
    its jobs.csv rows (a testbed run's replication 0, the same jobs as the run's).
    ``overheads``: a testbed run's per-job overheads, which every replica then holds its machine for
    (mgst.sim.overheads).
    ``drain_limit``: how long after the horizon jobs may still finish (default: as long as the horizon), e.g. a
    testbed run's own drain, to leave out the jobs it cut off.
    """
    s = experiment.simulation
    horizon = s.horizon if horizon is None else horizon
    warmup = s.warmup if warmup is None else warmup
    reps = s.replications if replications is None else replications
    seed = s.seed if seed is None else seed
    if not 0 <= warmup < horizon:
        raise ValueError(f"warm-up {warmup} must be in [0, horizon={horizon})")
    if reps < 1:
        raise ValueError(f"replications must be >= 1, got {reps}")
    # (never more processes than replications: --workers 1000 of 50 replications started 1,000 processes)
    workers = default_workers(reps) if workers is None else min(workers, reps)
    # One replication says nothing of its own variability: its interval is made of batch means of its jobs, which it
    # keeps for that (docs/intervals.md); every replication keeps them, to tell whether its means grow through the run
    keep_batches = True
    t0 = time.perf_counter()
    results: list[ReplicationResult] = []
    if workers <= 1:
        for r in range(reps):
            results.append(_one(experiment, r, seed, horizon, warmup, keep_rows or r == rows_of, imports, keep_bag_rows,
                                jobs_dir, overheads, drain_limit, keep_batches))
            if progress:
                progress(r + 1, reps)
    else:
        with InterruptiblePool[int](workers) as pool:
            tasks = ((r, _one, (experiment, r, seed, horizon, warmup, keep_rows or r == rows_of, imports, keep_bag_rows,
                                jobs_dir, overheads, drain_limit, keep_batches)) for r in range(reps))
            for done, (_, fut) in enumerate(pool.results(tasks), 1):
                results.append(fut.result())
                if progress:
                    progress(done, reps)
        results.sort(key=lambda r: r.replication)
    elapsed = time.perf_counter() - t0
    load = None
    if any(experiment.arrival_rates):  # the allocation LP's load needs Poisson classes
        load = solve_allocation(experiment.job_rates, experiment.arrival_rates, experiment.availability).load
    summary = summarize(
        experiment, results, mode="simulation", horizon=horizon, warmup=warmup, seed=seed,
        load=load, elapsed_s=elapsed,
    )
    bag_results = [r.bags for r in results if r.bags is not None]
    if any(experiment.arrival_rates):  # (Poisson classes: a steady state to have; a bag's run has its own verdict)
        overloaded = overload_warning(experiment)
        if overloaded is None and not bag_results:
            overloaded = growth_warning(results)
        if overloaded is not None:
            summary = dataclasses.replace(summary, overloaded=overloaded)
    if bag_results:
        summary = dataclasses.replace(summary, bags=summarize_bags(bag_results))
    return summary, results
