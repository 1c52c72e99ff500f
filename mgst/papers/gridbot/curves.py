"""Each GridBot experiment's incomplete jobs over time, one line per bag (the paper's Figures 5 and 7), from a sweep's
rows: replication 0 of the first seed, one panel per variant."""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mgst.papers.gridbot.metrics import bags_of

HOUR = 3600.0


def write_curves(panels: Mapping[str, Sequence[dict[str, Any]]], path: Path, title: str) -> Path:
    """One PNG: a panel per variant (name -> its bags), incomplete jobs against hours, a line per bag."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    zoom: float | None = None
    if all(len(bags) == 1 for bags in panels.values()):  # one bag each: a line per variant, and its tail enlarged
        lines = [dict(b, label=name) for name, bags in panels.items() for b in bags]
        panels = {"all jobs": lines, "the tail (last 10 %)": lines}
        zoom = max(b["size"] for b in lines) / 10
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(max(6.0, 4.2 * n), 3.6), sharey=zoom is None, squeeze=False)
    for ax, (name, bags) in zip(axes[0], panels.items()):
        many = len(bags) > 10
        for b in bags:
            xs = [t / HOUR for t, _ in b["curve"]]
            ys = [k for _, k in b["curve"]]
            label = None if many else b.get("label") or f"bag {b['id'] + 1}" + (
                f" (priority {b['priority']})" if b.get("priority") is not None else "")
            ax.step(xs, ys, where="post", linewidth=0.9 if many else 1.4, label=label)
        ax.set_title(name, fontsize=10)
        if zoom is not None and name.startswith("the tail"):
            ax.set_ylim(0, zoom)
            ends = [t / HOUR for b in bags for t, k in b["curve"] if k <= zoom]
            if ends:
                ax.set_xlim(min(ends), max(ends) * 1.02)
        ax.set_xlabel("hours")
        ax.grid(alpha=0.3)
        if not many and len(bags) > 1:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("incomplete jobs")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_sweep_curves(sweep_csv: Path, out_dir: Path) -> list[Path]:
    """One PNG per (experiment, reading) of a sweep: ``curves-<experiment>-<reading>.png``."""
    if not sweep_csv.exists():
        return []
    with sweep_csv.open(newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r.get("bags_json") and r.get("replication") == "0"]
    if not rows:
        return []
    first_seed = rows[0]["seed"]
    groups: dict[tuple[str, str], dict[str, Sequence[dict[str, Any]]]] = {}
    for r in rows:
        if r["seed"] == first_seed:
            groups.setdefault((r["experiment"], r["reading"]), {})[r["variant"]] = bags_of(r)
    return [write_curves(panels, out_dir / f"curves-{experiment}-{reading}.png",
                         f"{experiment} ({reading} reading): incomplete jobs per bag, replication 0")
            for (experiment, reading), panels in groups.items()]
