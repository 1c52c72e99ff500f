"""Several policies on one setting, the same jobs for each (common random numbers): their means side by side."""

from __future__ import annotations

import math
import statistics
from typing import Any

from mgst.analysis.compare import beyond
from mgst.intervals import Interval, _t_quantile
from mgst.results import Summary
from mgst.wording import display_width, label_width, pad


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


PAIRED = "paired over"  # a paired difference's Interval.method, then how many replications it pairs


def paired_difference(first: Summary, other: Summary, row: int) -> Interval | None:
    """``other``'s mean response minus ``first``'s on row ``row`` (a class, or overall: the last), replication by
    replication (both ran the same jobs: the same seed and replications), over the replications in which both counted
    a job, with its Student-t 95 % interval (a difference may be negative). None where it cannot be paired: fewer
    than two such replications, or replications not kept (a bag workload's rows, a testbed run)."""
    if not first.replication_means or len(first.replication_means) != len(other.replication_means):
        return None
    pairs = [(b - a) for a, b in zip(first.replication_means[row], other.replication_means[row])
             if not math.isnan(a) and not math.isnan(b)]
    if len(pairs) < 2 or len(first.replication_means[row]) != len(other.replication_means[row]):
        return None
    mean = statistics.fmean(pairs)
    half = _t_quantile(len(pairs) - 1, 0.975) * statistics.stdev(pairs) / math.sqrt(len(pairs))
    return Interval(mean, mean - half, mean + half, f"{PAIRED} {len(pairs)}")


def _differs(summaries: list[Summary], k: int, row: int, values: list[tuple[float, float, float] | None]
             ) -> tuple[bool | None, Interval | None]:
    """Whether policy ``k`` differs from the first on ``row``: its paired difference's interval excludes 0 where the
    replications pair, else their intervals are disjoint (None: the first policy itself, or no mean to compare)."""
    if k == 0 or values[0] is None or values[k] is None:
        return None, None
    d = paired_difference(summaries[0], summaries[k], row) if summaries[0].bags is None else None
    if d is not None:
        return not d.low <= 0.0 <= d.high, d
    return beyond(values[k], values[0]), None  # type: ignore[arg-type]


def comparison(summaries: list[Summary]) -> dict[str, Any]:
    """The JSON of the comparison: per row, each policy's mean and interval, and whether it differs from the first
    policy's: by its paired difference (the same jobs, replication by replication; `difference_from_first`), or, where
    the replications do not pair (one replication, bag metrics), beyond their intervals."""
    names = [s.policy for s in summaries]
    out = []
    for row, (label, values) in enumerate(rows(summaries)):
        by_policy: dict[str, Any] = {}
        for k, (name, v) in enumerate(zip(names, values)):
            if v is None:
                by_policy[name] = None
                continue
            differs, d = _differs(summaries, k, row, values)
            by_policy[name] = {"mean": _n(v[0]), "ci95": [_n(v[1]), _n(v[2])], "beyond_first": differs}
            if d is not None:
                by_policy[name]["difference_from_first"] = {"mean": _n(d.mean), "ci95": [_n(d.low), _n(d.high)],
                                                            "replications": int(d.method.removeprefix(PAIRED))}
        out.append({"row": label, "by_policy": by_policy})
    return {"policies": names, "rows": out}


def format_policy_comparison(summaries: list[Summary]) -> str:
    """The means side by side, a column a policy; '*' marks one whose interval is disjoint from the first policy's
    (the baseline)."""
    first = summaries[0]
    what = "mean response, time units" if first.bags is None else "bag metrics, time units, RWT in %"
    width = max(24, *(display_width(s.policy) + 2 for s in summaries))
    labels = label_width(first.class_names, 10)
    lines = [f"{first.experiment}: {len(summaries)} policies on the same jobs (seed {first.seed}, "
             f"{first.replications} replication{'s' if first.replications != 1 else ''} x {first.horizon:g} time "
             f"units, warm-up {first.warmup:g}); {what}, 95 % CI",
             (pad('Class' if first.bags is None else 'Metric', labels) + "".join(pad(s.policy, width)
                                                                                 for s in summaries)).rstrip()]
    marked = paired = False
    for row, (label, values) in enumerate(rows(summaries)):
        scale = 100.0 if label == "RWT" else 1.0
        cells = []
        for k, v in enumerate(values):
            if v is None:
                cells.append(f"{'n/a':<{width}}")
                continue
            mean, low, high = (x * scale for x in v)
            differs, d = _differs(summaries, k, row, values)
            star = "*" if differs else ""
            marked = marked or bool(star)
            paired = paired or (bool(star) and d is not None)
            ci = f" ({low:.3f}, {high:.3f})" if not math.isnan(low) else ""
            cells.append(f"{f'{mean:.3f}{star}{ci}':<{width}}")
        lines.append(pad(label, labels) + "".join(cells).rstrip())
    if marked and paired:
        lines.append(f"* differs from {first.policy}: the 95 % interval of the difference, replication by replication "
                     "on the same jobs (paired), excludes 0 (where replications do not pair: beyond both intervals)")
    elif marked:
        lines.append(f"* differs from {first.policy} beyond both intervals")
    return "\n".join(lines)


def _n(x: float) -> float | None:
    return round(x, 6) if math.isfinite(x) else None
