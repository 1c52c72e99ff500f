"""A trace summary's PNG: hosts up and CPU share by hour of day, up/down duration distributions, task failure rates
with their intervals, and the clock rates (matplotlib's Agg canvas: no display, no pyplot state)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import TightLayoutEngine

from mgst.traces.platform import Platform
from mgst.traces.summary import duration_samples, host_arrays

log = logging.getLogger(__name__)

SIZE = (15.0, 8.5)  # inches: two rows of three panels
DPI = 100
CLOCK_BINS = 30


def _by_hour(ax: Axes, per_hour: Mapping[str, list], key: str, label: str) -> None:
    hours = np.arange(24) + 0.5
    for days, style in (("weekday", "-o"), ("weekend", "--s")):
        values = [np.nan if v is None else v for v in per_hour[f"{days}_{key}"]]
        ax.plot(hours, values, style, markersize=3, label=days)
    ax.axvspan(9, 17, color="0.9", zorder=0, label="business hours")
    ax.set_xlim(0, 24)
    ax.set_xticks(range(0, 25, 3))
    ax.set_xlabel("hour of day")
    ax.set_ylabel(label)
    ax.legend(fontsize=8)


def _durations(ax: Axes, samples: Mapping[str, np.ndarray]) -> None:
    for name, x in samples.items():
        if x.size:
            xs = np.sort(x)
            ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", label=f"{name} ({xs.size:,})")
    ax.set_xscale("log")
    ax.set_xlabel("duration (min, log scale)")
    ax.set_ylabel("fraction of periods <= x")
    ax.set_title("up and down periods (censored ones left out)", fontsize=10)
    ax.legend(fontsize=8)


def _failures(ax: Axes, rates: list[Mapping[str, Any]]) -> None:
    d = [r["task_minutes"] for r in rates]
    p = np.array([100 * r["rate"] for r in rates])
    low = p - np.array([100 * r["low"] for r in rates])
    high = np.array([100 * r["high"] for r in rates]) - p
    ax.errorbar(d, p, yerr=[low, high], fmt="o-", capsize=4)
    for x, y in zip(d, p):
        ax.annotate(f"{y:.2f} %", (x, y), textcoords="offset points", xytext=(6, -10), fontsize=8)
    ax.set_xlabel("task length (min on a dedicated 1.5 GHz host)")
    ax.set_ylabel("tasks failed (%)")
    ax.set_title("failure rate, business-hours starts (95 % Wilson)", fontsize=10)
    ax.set_ylim(bottom=0)


def _clocks(ax: Axes, clocks: list[float]) -> None:
    if not clocks:
        ax.text(0.5, 0.5, "clock rates unknown\n(give --hosts-file)", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    values, counts = np.unique(clocks, return_counts=True)
    if values.size <= CLOCK_BINS * 2:  # rates on a grid (a 50 MHz step, clusters): a bar per rate, no aliasing
        width = 0.8 * (np.min(np.diff(values)) if values.size > 1 else 0.1)
        ax.bar(values, counts, width=width, color="C2")
    else:
        ax.hist(clocks, bins=CLOCK_BINS, color="C2")
    ax.set_xlabel("clock rate (GHz)")
    ax.set_ylabel("hosts")
    ax.set_title(f"{len(clocks)} hosts, mean {np.mean(clocks):.2f} GHz, sd {np.std(clocks):.2f}", fontsize=10)


def summary_figure(platform: Platform, summary: Mapping[str, Any]) -> Figure:
    """The summary's panels in one figure."""
    fig = Figure(figsize=SIZE, dpi=DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    _by_hour(axes[0][0], summary["per_hour"], "up_fraction", "fraction of hosts up")
    axes[0][0].set_title("hosts up", fontsize=10)
    _by_hour(axes[0][1], summary["per_hour"], "cpu_share", "mean CPU share on up hosts")
    axes[0][1].set_title("CPU share left to grid work", fontsize=10)
    arrays = [host_arrays(items) for items in platform.intervals.values()]
    _durations(axes[0][2], duration_samples(arrays, platform.span))
    _failures(axes[1][0], summary["failure_rates"])
    _clocks(axes[1][1], list(platform.clock_ghz.values()))
    text = axes[1][2]
    text.set_axis_off()
    lines = [f"{summary['name']}: {summary['hosts']} hosts, {summary['span_days']:g} days"]
    for name, row in summary["durations"].items():
        if row["count"]:
            lines.append(f"{name}: {row['count']:,} periods, mean {row['mean_min']:.1f} min, "
                         f"median {row['q50_min']:.1f} min")
    text.text(0, 1, "\n".join(lines), va="top", fontsize=9, family="monospace", transform=text.transAxes)
    fig.suptitle(f"trace summary: {summary['name']}")
    fig.set_layout_engine(TightLayoutEngine())
    return fig


def write_summary_png(platform: Platform, summary: Mapping[str, Any], path: Path) -> Path:
    fig = summary_figure(platform, summary)
    fig.savefig(path, dpi=DPI)
    log.info("wrote %s", path)
    return path


__all__ = ["summary_figure", "write_summary_png"]
