"""A sweep's figures, laid out like Anglano & Canonico's Figures 2-9: grouped bars, unbounded cells past the top."""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.layout_engine import TightLayoutEngine
from matplotlib.patches import Patch

from mgst.sweep.results import GROWING, PLOTTED

log = logging.getLogger(__name__)

LABELS = {"avt": "average turnaround time (s)", "makespan": "average makespan (s)",
          "waiting": "average bag waiting time (s)", "rwt": "relative wasted time (%)"}
SCALE = {"rwt": 100.0}  # RWT is a fraction in the CSVs, a percentage on the plots
UNBOUNDED = "unbounded"  # the gid of an unbounded bar, and its label
UNDECIDED = "undecided"  # the gid and label of a cell whose growth a short run cannot call (no bar)
OVERSHOOT = 1.07  # an unbounded bar reaches this multiple of the axes' top (past the border)


def _order(values: Sequence[str], preferred: Sequence[str]) -> list[str]:
    """``values`` in the scenario's order, then any others alphabetically."""
    known = [v for v in preferred if v in values]
    return known + sorted(set(values) - set(known))


def panels(summary: Sequence[Mapping[str, Any]], panel_axes: Sequence[str],
           order: Mapping[str, Sequence[str]]) -> list[dict[str, str]]:
    """Every combination of the panel axes present in ``summary``, in the scenario's order."""
    present = {a: _order({str(s[a]) for s in summary}, order.get(a, ())) for a in panel_axes}
    combos = [dict(zip(panel_axes, c)) for c in itertools.product(*(present[a] for a in panel_axes))]
    return [p for p in combos if any(all(s[a] == v for a, v in p.items()) for s in summary)]


def _group_key(groups: str | Sequence[str]) -> tuple[str, Any]:
    """The summary key a bar group reads: an axis, or several axes' values joined by " x "."""
    if isinstance(groups, str):
        return groups, lambda s: str(s[groups])
    return " x ".join(groups), lambda s: " x ".join(str(s[g]) for g in groups)


def _group_order(groups: str | Sequence[str], order: Mapping[str, Sequence[str]]) -> list[str]:
    if isinstance(groups, str):
        return list(order.get(groups, ()))
    return [" x ".join(c) for c in itertools.product(*(order.get(g, ()) for g in groups))]


def figure(summary: Sequence[Mapping[str, Any]], metric: str, panel: Mapping[str, str], *,
           groups: str | Sequence[str], bars: str, order: Mapping[str, Sequence[str]],
           growing: Sequence[str] = GROWING, label: str | None = None, scale: float | None = None) -> Figure:
    """One metric for one panel: a bar group per value of ``groups`` (per combination of values, if it
    names several axes), a bar per value of ``bars``.

    Error bars are the 95 % t-interval across replications. A cell whose run is unbounded is
    drawn, for the growing metrics, as a hatched bar beyond the top of the axes (gid
    ``"unbounded"``, labelled so), never as a number; an undecided cell (growth over too short a
    window to call) shows "undecided", and a cell with no result "n/a".
    """
    rows = [s for s in summary if all(s[a] == v for a, v in panel.items())]
    groups_name, group_of = _group_key(groups)
    group_values = _order({group_of(s) for s in rows}, _group_order(groups, order))
    bar_values = _order({str(s[bars]) for s in rows}, order.get(bars, ()))
    by_cell = {(group_of(s), s[bars]): s for s in rows}
    scale = SCALE.get(metric, 1.0) if scale is None else scale

    def value(s: Mapping[str, Any]) -> tuple[float, float, float] | None:
        if s["n"] == 0 or (metric in growing and (s["unbounded"] or s.get("undecided"))):
            return None
        m, lo, hi = (float(s[f"{metric}{x}"]) * scale for x in ("", "_low", "_high"))
        return None if math.isnan(m) else (m, lo, hi)

    tops = [max(v[0], v[2]) if not math.isnan(v[2]) else v[0]
            for s in rows if (v := value(s)) is not None]
    top = max(tops) * 1.15 if tops and max(tops) > 0 else 1.0

    width = max(6.0, 1.1 * len(group_values) + 2)
    if len(bar_values) > 5:  # a legend of five columns of long names (the Kondo policies) needs room
        width = max(width, 8.0)
    fig = Figure(figsize=(width, 4.2), layout="none")
    FigureCanvasAgg(fig)  # the Agg backend, for this figure only (no pyplot, no global backend switch)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(bar_values))
    # The default cycle's ten colours; past ten bars, tab20's twenty (no two bars of a group share one).
    colours = ([f"C{i}" for i in range(len(bar_values))] if len(bar_values) <= 10
               else [matplotlib.colormaps["tab20"](i % 20) for i in range(len(bar_values))])
    for b, (bar, colour) in enumerate(zip(bar_values, colours)):
        for g, group in enumerate(group_values):
            x = g - 0.4 + width * (b + 0.5)
            s = by_cell.get((group, bar))
            if s is None:
                continue
            v = value(s)
            if v is not None:
                m, lo, hi = v
                yerr = None if math.isnan(lo) else [[m - lo], [hi - m]]
                ax.bar(x, m, width, color=colour, yerr=yerr, capsize=2, ecolor="black")
            elif s["n"] > 0 and not s["unbounded"] and s.get("undecided"):  # undecided at this horizon: no bar, a label
                ax.text(x, top * 0.02, UNDECIDED, rotation=90, ha="center", va="bottom", fontsize=7, color="grey",
                        gid=UNDECIDED)
            elif s["n"] > 0:  # unbounded: past the border, as the paper draws it
                (patch,) = ax.bar(x, top * OVERSHOOT, width, color=colour, hatch="//", edgecolor="black",
                                  clip_on=False)
                patch.set_gid(UNBOUNDED)
                ax.text(x, top * 0.97, UNBOUNDED, rotation=90, ha="center", va="top", fontsize=7,
                        gid=UNBOUNDED, bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5})
            else:
                ax.text(x, top * 0.02, "n/a", rotation=90, ha="center", va="bottom", fontsize=7, color="grey")
    ax.set_ylim(0, top)
    ax.set_xticks(range(len(group_values)), group_values)
    ax.set_xlim(-0.6, len(group_values) - 0.4)
    ax.set_ylabel(label or LABELS.get(metric, metric))
    title = " / ".join(f"{k} {v}" for k, v in panel.items())
    fig.suptitle(title if isinstance(groups, str) else f"{title} (bar groups: {groups_name})", fontsize=10)
    if bar_values:
        handles = [Patch(facecolor=c, label=b) for b, c in zip(bar_values, colours)]
        ax.legend(handles=handles, title=bars, fontsize=8, title_fontsize=8, ncols=min(len(bar_values), 5),
                  loc="upper left", bbox_to_anchor=(0, -0.08), frameon=False)
    # Laid out once, as fig.tight_layout() does, but without leaving a layout engine on the figure:
    # any engine, even tight_layout's placeholder, makes savefig draw the whole figure once more.
    TightLayoutEngine().execute(fig)
    return fig


def write_plots(summary: Sequence[Mapping[str, Any]], out_dir: Path, *, panel_axes: Sequence[str],
                groups: str | Sequence[str], bars: str, order: Mapping[str, Sequence[str]],
                metrics: Sequence[str] = PLOTTED, growing: Sequence[str] = GROWING,
                labels: Mapping[str, str] | None = None, scales: Mapping[str, float] | None = None) -> list[Path]:
    """A PNG per metric per panel into ``out_dir``: ``METRIC-VALUE-VALUE....png``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for panel in panels(summary, panel_axes, order):
        for metric in metrics:
            fig = figure(summary, metric, panel, groups=groups, bars=bars, order=order, growing=growing,
                         label=(labels or {}).get(metric), scale=(scales or {}).get(metric))
            path = out_dir / ("-".join([metric, *panel.values()]) + ".png")
            fig.savefig(path, dpi=110)
            written.append(path)
    log.info("wrote %d plots into %s", len(written), out_dir)
    return written
