"""The local run: a mapper and one puller process per machine on loopback, then the simulation beside it."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst.analysis.compare import comparison, plot_comparison
from mgst.mapper import Mapper, TestbedRun
from mgst.model import Experiment
from mgst.results import Summary
from mgst.simulate import run_simulation
from mgst.testbed import summarize_testbed, write_testbed_outputs

log = logging.getLogger(__name__)

# Seconds pullers get to leave on their own (after the mapper's bye), then after SIGTERM,
# before they are killed.
EXIT_GRACE = 5.0
TERM_GRACE = 5.0


@dataclass(slots=True)
class LocalResult:
    run: TestbedRun
    testbed: Summary
    simulation: Summary
    summary: dict[str, Any]  # summary.json's object, with the simulation and the comparison added
    out: Path


def start_pullers(endpoint: str, names: list[str], log_path: Path, verbose: bool = False) -> list[subprocess.Popen]:
    logf = open(log_path, "ab")  # noqa: SIM115 (the children keep it; closed when they are reaped)
    try:
        return [
            subprocess.Popen(
                [sys.executable, "-m", "puller", "--connect", endpoint, "--machine", name,
                 *(["-v"] if verbose else [])],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
            )
            for name in names
        ]
    finally:
        logf.close()


def stop_pullers(procs: list[subprocess.Popen], *, grace: float = EXIT_GRACE) -> None:
    """Time to leave on their own, then SIGTERM, then SIGKILL; every child reaped."""
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            break
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + TERM_GRACE
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("puller %d did not stop in %.0f s: killed", p.pid, TERM_GRACE)
            p.kill()
            p.wait()


def run_local(
    experiment: Experiment,
    out: Path,
    *,
    duration: float | None = None,
    time_unit: float | None = None,
    seed: int | None = None,
    progress: Callable[[Mapper], None] | None = None,
    replications: int | None = None,
    executor: str | None = None,
) -> LocalResult:
    out.mkdir(parents=True, exist_ok=True)
    mapper = Mapper(experiment, "tcp://127.0.0.1:0", duration=duration, time_unit=time_unit, seed=seed,
                    progress=progress, executor=executor)
    procs: list[subprocess.Popen] = []
    run = None
    try:
        procs = start_pullers(mapper.endpoint, [m.name for m in experiment.machines], out / "pullers.log")
        run = mapper.run()
    finally:
        stop_pullers(procs, grace=EXIT_GRACE if run is not None else 0.0)
    testbed, extras = summarize_testbed(run)
    # The same setting in simulation, over the same model time; replication 0 shares the job sequence.
    sim, _ = run_simulation(experiment, horizon=testbed.horizon, warmup=run.warmup, seed=mapper.seed,
                            replications=replications)
    extras["simulation"] = sim.as_dict()
    extras["comparison"] = comparison(testbed, sim)
    summary = write_testbed_outputs(run, testbed, extras, out)
    plot_comparison(testbed, sim, out / "comparison.png")
    return LocalResult(run, testbed, sim, summary, out)
