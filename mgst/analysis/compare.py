"""Testbed against simulation for one setting: a table like the paper's Table 2, and a bar chart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from mgst.bot_metrics import UNBOUNDED, UNDECIDED_TEXT
from mgst.intervals import is_default, method_note
from mgst.results import OVERLOADED_NOTE, Estimate, Summary
from mgst.wording import label_width, pad


def beyond(t: tuple[float, float, float], s: tuple[float, float, float]) -> bool:
    """Whether two (mean, low, high) estimates differ beyond their intervals: the intervals are disjoint. Without an
    interval on either side nothing can be said (False): a mean without one (a few jobs, too few batches or
    replications) is no more than a sample, and testing it against the other's interval of a mean would call
    sampling noise a difference."""
    (tm, tl, th), (sm, sl, sh) = t, s
    if math.isnan(tm) or math.isnan(sm) or math.isnan(tl) or math.isnan(sl):
        return False
    return tl > sh or th < sl


def replication_spread(simulation: Summary, row: int) -> tuple[float, float, float] | None:
    """Row ``row``'s (a class's, or overall: the last) mean in the simulation's replication 0, and the least and the
    greatest of its replications' means: None with fewer than two replications, or none counting a job of it."""
    means = simulation.replication_means[row] if row < len(simulation.replication_means) else ()
    counted = [m for m in means if not math.isnan(m)]
    if len(means) < 2 or not counted:
        return None
    return means[0], min(counted), max(counted)


def comparison(testbed: Summary, simulation: Summary) -> list[dict[str, Any]]:
    """Per class and overall: both means, the simulation's CI, the testbed's relative difference; with more than
    one replication, replication 0's mean (the testbed's very jobs) and the range of the replications' means."""
    rows = []
    labels = [*testbed.class_names, "Overall"]
    for k, (label, t, s) in enumerate(zip(labels, [*testbed.classes, testbed.overall],
                                          [*simulation.classes, simulation.overall])):
        diff = (t.mean - s.mean) / s.mean if s.mean and not math.isnan(s.mean) else math.nan
        rows.append({"class": label, "testbed": _n(t.mean), "testbed_ci95": [_n(t.low), _n(t.high)],
                     "simulation": _n(s.mean), "simulation_ci95": [_n(s.low), _n(s.high)],
                     "difference": _n(diff)})
        spread = replication_spread(simulation, k)
        if spread is not None:
            rows[-1]["simulation_replication_0"] = _n(spread[0])
            rows[-1]["simulation_replications_range"] = [_n(spread[1]), _n(spread[2])]
        for side, e in (("testbed", t), ("simulation", s)):
            if not is_default(e.method):
                rows[-1][f"{side}_interval_method"] = e.method
    return rows


def bag_comparison(testbed: Summary, simulation: Summary) -> list[dict[str, Any]]:
    """Per Bag-of-Tasks metric (AVT, makespan, waiting, RWT): both means, their CIs, the relative difference."""
    rows = []
    tb, sim = testbed.bags, simulation.bags
    if tb is None or sim is None:
        return rows
    for name in ("avt", "makespan", "waiting", "rwt"):
        t, s = getattr(tb, name), getattr(sim, name)
        row: dict[str, Any] = {"metric": name}
        for side, m, whole in (("testbed", t, tb), ("simulation", s, sim)):
            # (no mean: unbounded, or growth over too short a window: "undecided at this horizon")
            row[side] = (UNBOUNDED if whole.unbounded else UNDECIDED_TEXT) if m is None else _n(m.mean)
            row[f"{side}_ci95"] = None if m is None else [_n(m.low), _n(m.high)]
            if m is not None and not is_default(m.method):
                row[f"{side}_interval_method"] = m.method
        ok = t is not None and s is not None and s.mean and not math.isnan(s.mean)
        row["difference"] = _n((t.mean - s.mean) / s.mean) if ok else None  # type: ignore[union-attr]
        rows.append(row)
    return rows


def format_bag_comparison(testbed: Summary, simulation: Summary) -> str:
    rows = bag_comparison(testbed, simulation)
    tb, sim = testbed.bags, simulation.bags
    counts = "" if tb is None or sim is None else f"; {tb.bags} bags counted on the testbed, {sim.bags} in simulation"
    lines = [
        f"{testbed.experiment}: {testbed.policy}, bags, testbed ({testbed.elapsed_s:.0f} s) beside simulation "
        f"of the same bag sequence{counts}; time units, RWT in % of replica time",
        f"{'Metric':<10}{'Testbed':>12}  {'95 % CI':<24}{'Simulation':>12}  {'95 % CI':<24}{'Diff.':>8}",
    ]

    def ci(c: list | None, scale: float, fmt: str, method: str | None) -> str:
        note = method_note(method) if method else ""
        if not c or c[0] is None:
            return note.strip()
        return f"({fmt.format(c[0] * scale)}, {fmt.format(c[1] * scale)}){note}"

    def val(v: Any, scale: float, fmt: str) -> str:
        return v if isinstance(v, str) else ("n/a" if v is None else fmt.format(v * scale))

    for r in rows:
        how = (100.0, "{:.2f}%") if r["metric"] == "rwt" else (1.0, "{:.4g}")
        diff = "" if r["difference"] is None else f"{r['difference']:+.1%}"
        lines.append(f"{r['metric'].upper():<10}{val(r['testbed'], *how):>12}  "
                     f"{ci(r['testbed_ci95'], *how, r.get('testbed_interval_method')):<24}"
                     f"{val(r['simulation'], *how):>12}  "
                     f"{ci(r['simulation_ci95'], *how, r.get('simulation_interval_method')):<24}{diff:>8}")
    return "\n".join(lines)


def _n(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(x, 6)


def format_comparison(testbed: Summary, simulation: Summary) -> str:
    def ci(e: Estimate) -> str:
        note = method_note(e.method)
        return note.strip() if math.isnan(e.low) else f"({e.low:.3f}, {e.high:.3f}){note}"

    width = label_width(testbed.class_names, 9)
    lines = [
        f"{testbed.experiment}: {testbed.policy}, testbed ({testbed.elapsed_s:.0f} s) beside simulation "
        f"({simulation.replications} x {simulation.horizon:g} time units), jobs submitted after {testbed.warmup:g} "
        "counted; mean response, time units",
        f"{pad('Class', width)}{'Testbed':>9}  {'batch-means CI':<16}{'Simulation':>11}  {'95 % CI':<16}{'Diff.':>7}",
    ]
    def mean(e: Estimate, width: int) -> str:  # (a class with no job counted on that side has no mean)
        return f"{e.mean:>{width}.3f}" if not math.isnan(e.mean) else f"{'n/a':>{width}}"

    for label, t, s in zip([*testbed.class_names, "Overall"], [*testbed.classes, testbed.overall],
                           [*simulation.classes, simulation.overall]):
        both = not math.isnan(t.mean) and not math.isnan(s.mean) and s.mean
        diff = f"{(t.mean - s.mean) / s.mean:>+7.1%}" if both else f"{'':>7}"
        lines.append(f"{pad(label, width)}{mean(t, 9)}  {ci(t):<16}{mean(s, 11)}  {ci(s):<16}{diff}")
    if any(math.isnan(e.mean) for e in [*testbed.classes, *simulation.classes]):
        lines.append("n/a: no job of the class counted on that side")
    spread = replication_spread(simulation, len(simulation.classes))
    if spread is not None and not math.isnan(testbed.overall.mean):
        first, least, most = spread
        versus = f" (testbed {(testbed.overall.mean - first) / first:+.1%})" if first and not math.isnan(first) else ""
        lines.append(f"simulation, overall: replication 0, on the testbed's very jobs, {first:.3f}{versus}; the "
                     f"{simulation.replications} replications' means range from {least:.3f} to {most:.3f}")
    if simulation.overloaded is not None and simulation.overloaded == testbed.overloaded:  # (the setting's: the LP's)
        lines.append(f"WARNING: {simulation.overloaded}; {OVERLOADED_NOTE}")
    else:  # (a side's own figures: its policy fell behind there)
        sides = (("on the testbed", testbed), ("in simulation", simulation))
        lines += [f"WARNING, {side}: {x.overloaded}; {OVERLOADED_NOTE}" for side, x in sides if x.overloaded]
    return "\n".join(lines)


def plot_comparison(testbed: Summary, simulation: Summary, path: Path) -> None:
    """A PNG bar chart: testbed and simulation side by side per class, with 95 % intervals."""
    labels = [f"class {c}" for c in testbed.class_names] + ["overall"]
    ests = {"testbed": [*testbed.classes, testbed.overall], "simulation": [*simulation.classes, simulation.overall]}
    bars = {name: [(e.mean, e.low, e.high) for e in values] for name, values in ests.items()}
    _bar_chart([(labels, bars, "mean response time (time units)")],
               f"{testbed.experiment} ({testbed.policy}): testbed vs simulation, 95 % CI", path)


def plot_bag_comparison(testbed: Summary, simulation: Summary, path: Path) -> None:
    """A PNG: AVT, makespan and waiting (time units) beside RWT (%), testbed and simulation, 95 % intervals;
    an unbounded metric has no bar."""
    nan = (math.nan, math.nan, math.nan)

    def values(s: Summary, names: tuple[str, ...], scale: float) -> list[tuple[float, float, float]]:
        out = []
        for n in names:
            m = getattr(s.bags, n) if s.bags is not None else None
            out.append(nan if m is None else (m.mean * scale, m.low * scale, m.high * scale))
        return out

    times, rwt = ("avt", "makespan", "waiting"), ("rwt",)
    panels = [(["AVT", "makespan", "waiting"], {"testbed": values(testbed, times, 1.0),
                                                 "simulation": values(simulation, times, 1.0)}, "time units"),
              (["RWT"], {"testbed": values(testbed, rwt, 100.0), "simulation": values(simulation, rwt, 100.0)},
               "% of replica time")]
    _bar_chart(panels, f"{testbed.experiment} ({testbed.policy}), bags: testbed vs simulation, 95 % CI", path)


def _bar_chart(panels: list[tuple[list[str], dict[str, list[tuple[float, float, float]]], str]], title: str,
               path: Path) -> None:
    """Side-by-side bars (one per series) with their intervals, in one panel per (labels, series, y label)."""
    import matplotlib  # noqa: PLC0415 (slow import; only needed here)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    widths = [len(labels) + 1 for labels, _, _ in panels]
    fig, axes = plt.subplots(1, len(panels), figsize=(7, 4), dpi=120, squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    width = 0.38
    for ax, (labels, series, ylabel) in zip(axes[0], panels):
        for k, (name, ests) in enumerate(series.items()):
            xs = [i + (k - 0.5) * width for i in range(len(labels))]
            means = [0.0 if math.isnan(m) else m for m, _, _ in ests]
            err = [[0 if math.isnan(lo) else m - lo for m, lo, _ in ests],
                   [0 if math.isnan(hi) else hi - m for m, _, hi in ests]]
            ax.bar(xs, means, width, yerr=err, capsize=3, label=name)
        ax.set_xticks(range(len(labels)), labels=labels)
        ax.set_ylabel(ylabel)
    axes[0][0].legend()
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
