"""What a testbed run leaves behind (TestbedRun), and closing its books when it ends or is replayed."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mgst.core.scheduler import Scheduler
from mgst.core.state import JobStatus
from mgst.model import Experiment, Machine
from mgst.testbed.decision_time import DecisionTime
from mgst.testbed.journal import Journal
from mgst.testbed.local_time import recorded_offset

# A run drains for at most this many times the longest job time (the biggest class on the slowest machine), and
# at least DRAIN_MIN wall seconds: long enough for a job that started at the last moment on the slowest machine,
# and for the failures and restarts it may meet.
DRAIN_JOBS = 50
DRAIN_MIN = 30.0


def slowest_machine(experiment: Experiment) -> Machine:
    """The machine on which the biggest class's job takes longest (its smallest rate at its CPU share)."""
    return min(experiment.machines, key=lambda m: min(r for r in m.rates if r > 0) * m.availability)


def drain_bound(experiment: Experiment, time_unit: float) -> float:
    """The wall seconds a run drains at most after its generation ends (the mapper's default drain time-out)."""
    biggest = max(c.granularity for c in experiment.classes)
    m = slowest_machine(experiment)
    slowest = biggest / (min(r for r in m.rates if r > 0) * m.availability)
    return max(DRAIN_MIN, DRAIN_JOBS * slowest * time_unit)


@dataclass(slots=True)
class TestbedRun:
    """What a mapper run leaves behind, for results and reports."""

    __test__ = False  # not a pytest test class, despite the name

    experiment: Experiment
    core: Scheduler
    journal: Journal
    time_unit: float
    t0: float  # wall time of model time 0 (after the last resume)
    generation_end: float  # wall time when arrivals stopped
    end: float  # wall time when the run ended
    cut_off: list[int]  # jobs unfinished when the drain timed out
    malformed: Counter  # dropped messages by reason
    warmup: float  # model time
    seed: int = 0  # the run seed: the job sequence and failure trace it drew
    security: str = "curve"  # "curve", or "none (...)" saying why
    aborted: bool = False  # stopped at once (second interrupt): not drained
    resumes: list[dict[str, float]] = field(default_factory=list)  # how long each resume took
    policy_failure: str | None = None  # what the core raised when the policy failed (the run stopped there)
    imports: tuple[str, ...] = ()  # modules that registered its policy (the simulation beside it needs them)
    closed: bool = True  # its mapper ended it; False: read from a journal without an end (live, or its mapper died)
    network: dict | None = None  # the emulated network its pullers ran behind (mgst run --network), as asked
    # grids that grew with GridBot's overlay: per grid, what the testbed's and the simulation's overlays did
    overlay: dict | None = None
    # the wall time its mapper spent in the core (the policy's decisions); None: not measured (a journal whose mapper
    # died, or one of before it was)
    decision_time: DecisionTime | None = None
    # the UTC offset (seconds) of its local times (jobs.csv's): its head node's at its start, as its journal recorded
    # it (a journal of before: this machine's zone's at the run's start)
    utc_offset_s: float = 0.0


def finish_run(experiment: Experiment, core: Scheduler, journal: Journal, time_unit: float, t0: float,
               generation_end: float, end: float, drops: Counter, horizon: float, seed: int, security_mode: str,
               aborted: bool, utc_offset: Any = None) -> TestbedRun:
    """Close the books of a run (ended, or replayed from its journal) into a TestbedRun; ``utc_offset``: the UTC offset
    its journal recorded (mgst.testbed.local_time.recorded_offset: none, or not one, is the local zone's)."""
    core.close(max(core.now, (end - t0) / time_unit))
    journal.correct()
    cut = [jid for jid, rec in core.jobs.items() if rec.status is not JobStatus.DONE]
    for r in journal.replicas.values():
        if r.outcome == "running":
            r.outcome = "cut off"
    if not math.isfinite(generation_end):  # (a resumed run stopped while it held its clock: as its journal says)
        generation_end = t0 + journal.generation_end * time_unit if journal.generation_end is not None else end
    if journal.generation_end is not None:  # generation stopped early (interrupted): a tenth of what was generated
        horizon = min(horizon, journal.generation_end)
    else:  # a run not closed (its mapper died, or it goes on): what it generated so far, as its summary counts it
        horizon = min(horizon, max(0.0, (generation_end - t0) / time_unit))
    warmup = min(experiment.simulation.warmup, 0.1 * horizon)
    run = TestbedRun(experiment, core, journal, time_unit, t0, generation_end, end, cut, Counter(drops), warmup,
                     seed, security_mode, aborted)
    run.utc_offset_s = recorded_offset(utc_offset, run_began(run))
    return run


def run_began(run: TestbedRun) -> float:
    """The wall time the run's clock first started (run.t0 is model time 0 on the last clock: a resumed run's is
    later than its start by the outage and the wait)."""
    return run.journal.first_start if run.journal.first_start is not None else run.t0
