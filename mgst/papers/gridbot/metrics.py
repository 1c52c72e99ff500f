"""What a GridBot experiment's run measures: each bag's turnaround, its incomplete jobs over time (the paper's
Figures 5 and 7), when it reached so many incomplete jobs, its true tail; replicas, waste and losses."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from mgst.core.state import Outcome
from mgst.model import Experiment

# Points kept of each bag's curve of incomplete jobs over time (its steps, thinned evenly; its tail's kept whole).
CURVE_POINTS: Final = 120
TAIL_SHARE: Final = 0.1
# Remaining jobs at which each bag's time is recorded, as shares of its size (the paper's 1,000, 500, 100 and 50
# of 1,200-job bags, Figure 7(a)), and 0 (done).
REMAINING_SHARES: Final = (1000 / 1200, 500 / 1200, 100 / 1200, 50 / 1200, 0.0)
# A replica that ended without a result: its host went down or was given up on, or it failed.
_LOST: Final = (Outcome.LOST, Outcome.TIMED_OUT, Outcome.FAILED)
CELL_METRICS: Final = ("turnaround", "turnaround_max", "replicas_pct", "waste_pct", "lost_pct", "jobs", "wall_s",
                       "bags_json")


def bag_measures(run: Any, policy_counts: Mapping[str, float]) -> dict[str, Any]:
    """The metrics of one finished run (mgst.sim.loop.ReplicationRun) and its policy's counts."""
    per_bag: list[dict[str, Any]] = []
    jobs = discarded = lost = 0
    for bag in run.bags:
        ends = sorted(rec.completed for rec in bag.tasks if rec.completed is not None)
        sends = sorted(rec.first_sent for rec in bag.tasks if rec.first_sent is not None)
        size = len(bag.tasks)
        jobs += size
        for rec in bag.tasks:
            for r in rec.history:
                discarded += r.outcome is Outcome.DISCARDED
                lost += r.outcome in _LOST
        done = bag.completed
        # the true tail: incomplete jobs when the last of its tasks was first sent (its queue of new work empty)
        tail_at = sends[-1] if len(sends) == size and sends else None
        tail = size - bisect.bisect_right(ends, tail_at) if tail_at is not None else None
        reach = {}
        for share in REMAINING_SHARES:
            k = round(size * share)
            # the time its incomplete jobs first fell to k: when its (size - k)-th job completed
            reach[str(k)] = (ends[size - k - 1] - bag.submitted) if 0 <= size - k - 1 < len(ends) else None
        steps = [(0.0, size)] + [(t - bag.submitted, size - i - 1) for i, t in enumerate(ends)]
        # thinned evenly, but for its tail (the last TAIL_SHARE of its jobs), kept whole up to CURVE_POINTS steps
        stride = max(1, len(steps) // CURVE_POINTS)
        tail_from = len(steps) - min(CURVE_POINTS, max(1, round(size * TAIL_SHARE)))
        curve = [p for i, p in enumerate(steps) if i % stride == 0 or i >= tail_from]
        priority = bag.attributes.get("Priority")
        per_bag.append({"id": bag.id, "priority": priority, "size": size,
                        "turnaround": None if done is None else done - bag.submitted,
                        "tail_incomplete": tail, "reach": reach,
                        "curve": [[round(t, 1), n] for t, n in curve]})
    turnarounds = [b["turnaround"] for b in per_bag if b["turnaround"] is not None]
    return {
        "turnaround": sum(turnarounds) / len(turnarounds) if turnarounds else float("nan"),
        "turnaround_max": max(turnarounds) if turnarounds else float("nan"),
        "replicas_pct": 100.0 * policy_counts.get("replicas_sent", 0) / max(1, jobs),
        "waste_pct": 100.0 * discarded / max(1, jobs),
        "lost_pct": 100.0 * lost / max(1, jobs),
        "jobs": jobs,
        "bags_json": json.dumps(per_bag, separators=(",", ":")),
    }


def simulate_cell(experiment: Experiment, replication: int) -> dict[str, Any]:
    """One sweep cell: one replication of a GridBot experiment, simulated and measured."""
    from mgst.sim.loop import Simulation  # noqa: PLC0415

    t0 = time.perf_counter()
    sim = Simulation(experiment, replication=replication)
    run = sim.run()
    out = bag_measures(run, sim.policy.report())
    out["unfinished"] = run.unfinished
    out["wall_s"] = time.perf_counter() - t0
    return out


def bags_of(row: Mapping[str, str]) -> Sequence[dict[str, Any]]:
    """A sweep.csv row's bags, as bag_measures wrote them."""
    return json.loads(row["bags_json"]) if row.get("bags_json") else []
