"""Several policies on one setting, the same jobs for each (common random numbers): their means side by side."""

from __future__ import annotations

import math
from typing import Any

from mgst.analysis.compare import beyond
from mgst.results import Summary


def rows(summaries: list[Summary]) -> list[tuple[str, list[tuple[float, float, float] | None]]]:
    """Per class and overall (a job workload), or per bag metric (AVT, makespan, waiting, RWT): each policy's
    (mean, low, high), None where it has none."""
    first = summaries[0]
    if first.bags is None:
        out: list[tuple[str, list[tuple[float, float, float] | None]]] = []
        for k, name in enumerate(first.class_names):
            out.append((name, [(s.classes[k].mean, s.classes[k].low, s.classes[k].high) if s.classes[k].jobs
                               else None for s in summaries]))
        out.append(("Overall", [(s.overall.mean, s.overall.low, s.overall.high) if s.overall.jobs else None
                                for s in summaries]))
        return out
    metrics = []
    for name in ("avt", "makespan", "waiting", "rwt"):
        values = []
        for s in summaries:
            m = getattr(s.bags, name) if s.bags is not None else None
            values.append(None if m is None else (m.mean, m.low, m.high))
        metrics.append((name.upper(), values))
    return metrics


def comparison(summaries: list[Summary]) -> dict[str, Any]:
    """The JSON of the comparison: per row, each policy's mean and interval, and whether it differs from the first
    policy's beyond their intervals."""
    names = [s.policy for s in summaries]
    out = []
    for label, values in rows(summaries):
        base = values[0]
        out.append({"row": label, "by_policy": {
            name: None if v is None else {
                "mean": _n(v[0]), "ci95": [_n(v[1]), _n(v[2])],
                "beyond_first": None if k == 0 or base is None else beyond(v, base)}
            for k, (name, v) in enumerate(zip(names, values))}})
    return {"policies": names, "rows": out}


def format_policy_comparison(summaries: list[Summary]) -> str:
    """The means side by side, a column a policy; '*' marks one whose interval is disjoint from the first policy's
    (the baseline)."""
    first = summaries[0]
    what = "mean response, time units" if first.bags is None else "bag metrics, time units, RWT in %"
    width = max(24, *(len(s.policy) + 2 for s in summaries))
    lines = [f"{first.experiment}: {len(summaries)} policies on the same jobs (seed {first.seed}, "
             f"{first.replications} replication{'s' if first.replications != 1 else ''} x {first.horizon:g} time "
             f"units, warm-up {first.warmup:g}); {what}, 95 % CI",
             (f"{'Class' if first.bags is None else 'Metric':<10}" + "".join(f"{s.policy:<{width}}"
                                                                             for s in summaries)).rstrip()]
    marked = False
    for label, values in rows(summaries):
        scale = 100.0 if label == "RWT" else 1.0
        cells = []
        for k, v in enumerate(values):
            if v is None:
                cells.append(f"{'n/a':<{width}}")
                continue
            mean, low, high = (x * scale for x in v)
            star = "*" if k and values[0] is not None and beyond(v, values[0]) else ""
            marked = marked or bool(star)
            ci = f" ({low:.3f}, {high:.3f})" if not math.isnan(low) else ""
            cells.append(f"{f'{mean:.3f}{star}{ci}':<{width}}")
        lines.append(f"{label:<10}" + "".join(cells).rstrip())
    if marked:
        lines.append(f"* differs from {first.policy} beyond both intervals")
    return "\n".join(lines)


def _n(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None
