"""The default sweep cell: one replication of a Bag-of-Tasks experiment, simulated, reduced to its bag metrics."""

from __future__ import annotations

import math
import time

from mgst.bot_metrics import UNDECIDED, Metric, arrivals_end, reduce_bags, summarize_bags
from mgst.intervals import STUDENT_T
from mgst.model import Experiment
from mgst.sim.loop import Simulation


def simulate_cell(experiment: Experiment, replication: int) -> dict[str, float | int | bool]:
    """One sweep cell: simulate one replication of a BoT experiment and reduce it to its metrics."""
    s = experiment.simulation
    t0 = time.perf_counter()
    run = Simulation(experiment, replication=replication, keep_records=False).run()
    rep = reduce_bags(run, s.warmup, s.horizon, ran_out=arrivals_end(experiment.workload, run.bags))
    summary = summarize_bags([rep])
    wall = time.perf_counter() - t0

    def mean(m: Metric | None) -> float:
        return math.nan if m is None else m.mean

    def half(m: Metric | None) -> float:
        """The half-width of a symmetric (Student-t) interval; nan for a log-scale one (mean +- half would reach
        below 0: its bounds are in the _low and _high columns) or none."""
        ok = m is not None and m.method == STUDENT_T and not math.isnan(m.high)
        return (m.high - m.low) / 2 if ok else math.nan  # type: ignore[union-attr]

    def bounds(name: str, m: Metric | None) -> dict[str, float]:
        return {f"{name}_low": math.nan if m is None else m.low, f"{name}_high": math.nan if m is None else m.high}

    return {
        "avt": mean(summary.avt), "avt_ci": half(summary.avt),
        "makespan": mean(summary.makespan), "makespan_ci": half(summary.makespan),
        "waiting": mean(summary.waiting), "waiting_ci": half(summary.waiting),
        **bounds("avt", summary.avt), **bounds("makespan", summary.makespan), **bounds("waiting", summary.waiting),
        "rwt": rep.rwt, "bags": rep.bags_counted, "tasks": rep.tasks, "replicas": rep.replicas,
        "unbounded": rep.unbounded, "undecided": rep.verdict == UNDECIDED, "backlog_mean": rep.backlog_mean,
        "backlog_growth": rep.backlog_growth, "unfinished_bags": rep.unfinished, "settle_time": rep.settle_time,
        "wall_s": wall,
    }
