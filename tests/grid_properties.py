"""The grids' property tests' checks: what every run on grids must show, and whether its bags can be expected to
finish (the hosts, as they drew their speed and reliability, completing the longest task at a stretch often enough)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from mgst.availability.grids import KIND, HostTraits
from mgst.config import parse_experiment
from mgst.core.state import JobStatus, Outcome
from mgst.sim.loop import Simulation
from mgst.sim.replication_run import ReplicationRun

# How many completions of the longest task, per task of the bags, the hosts must be expected to manage.
MARGIN = 20
# Model time a property test's run may drain for after its horizon.
DRAIN = 1e7


def run_checked(d: dict[str, Any]) -> tuple[Any, Simulation, ReplicationRun]:
    """The experiment of the settings ``d``, its simulator and its run, drained for up to DRAIN past its horizon;
    the core's invariants checked at the end."""
    exp = parse_experiment(d, "x")
    sim = Simulation(exp, drain_limit=DRAIN)
    run = sim.run()
    sim.core.check_invariants()
    return exp, sim, run


def bags_surely_finish(exp: Any, until: float, usable: Callable[[str], bool] | None = None) -> bool:
    """Whether the hosts of the grids the bags may use (``usable``, by grid name: all if None), at most ``max_hosts``
    of a grid the overlay sizes, are expected to complete the bags' longest task at a stretch MARGIN times per task
    over ``until`` model time units: (up periods) x p / (1 - p), p = e^(-need / mean up), need = size / (rate x
    speed). A slow, short-lived host (a black hole of the community grid, or a custom mean up of 200 at a quarter
    speed: a task of 900 once in e^18 up periods) may never finish one, and then neither does its bag."""
    spec = exp.failures
    tasks = [task for _, bag in exp.workload.bags for task in bag]
    expected = 0.0
    ranks: dict[str, int] = {}
    for j, m in enumerate(exp.machines):
        grid = KIND.grid(spec, exp, j)
        rank = ranks.get(grid.name, 0)
        ranks[grid.name] = rank + 1
        if usable is not None and not usable(grid.name):
            continue
        gap = grid.mean_down  # a host's time away between two up periods
        if grid.size is not None:  # a host the overlay grants: at most max_hosts, each after a request and a wait
            if grid.size.max_hosts is not None and rank >= grid.size.max_hosts:
                continue
            gap += grid.join + grid.size.request_every
        traits = HostTraits(grid, m.availability, exp.simulation.seed, 0, j)
        need = max(size / (m.rates[c] * traits.share) for c, size in tasks)
        p = math.exp(-need / traits.mean_up)
        expected += until / (traits.mean_up + gap) * p / (1.0 - p) if p < 1.0 else math.inf
    return expected >= MARGIN * len(tasks)


def check_run(exp: Any, run: ReplicationRun, surely_finishes: bool) -> None:
    """Every job of the bags is there and none is done twice; none is left unfinished if ``surely_finishes``; no host
    computes more replicas at once than its CPUs (a replica still running at the run's end, until then)."""
    if surely_finishes:
        assert run.unfinished == 0
    for rec in run.jobs:
        assert rec.status is not JobStatus.DONE or Counter(r.outcome for r in rec.history)[Outcome.DONE] == 1, \
            rec.history
    assert len({rec.id for rec in run.jobs}) == sum(len(tasks) for _, tasks in exp.workload.bags)  # none lost
    # Per machine, the replicas computing at once, by a sweep over their spans [start, end) in time order (an end
    # before a start at the same instant): a run that cannot finish drains for DRAIN and may hold tens of thousands
    # of replicas, which a check of every start against every span would take minutes over.
    spans: dict[int, list[tuple[float, float]]] = {}
    for rec in run.jobs:
        for r in rec.history:
            if r.computing_since is not None:
                spans.setdefault(r.machine, []).append(
                    (r.computing_since, r.ended if r.ended is not None else run.end_time))
    for j, machine_spans in spans.items():
        most = most_at_once([(a, b) for a, b in machine_spans if b > a])
        assert most <= exp.machines[j].computing_slots, (exp.machines[j].name, most, sorted(machine_spans)[:20])


def most_at_once(spans: Iterable[tuple[float, float | None]]) -> int:
    """The most spans [start, end) open at one instant (end None: open to the end), by a sweep in time order, an end
    before a start at the same instant."""
    spans = list(spans)
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans if b is not None])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most
