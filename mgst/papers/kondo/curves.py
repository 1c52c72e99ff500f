"""The slides' "cumulative task completion" picture: tasks done against time, one run per policy, and the optimum."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from mgst.model import Experiment
from mgst.papers.kondo.experiment import optimal_schedule
from mgst.papers.kondo.metrics import simulate_run

log = logging.getLogger(__name__)

OPTIMAL = "optimal"


def completion_curves(runs: Mapping[str, Experiment]) -> dict[str, tuple[float, ...]]:
    """Label -> its tasks' completion times after the submission (s), sorted: each run's, then the optimum's."""
    curves = {label: simulate_run(exp).completions for label, exp in runs.items()}
    if runs:
        curves[OPTIMAL] = optimal_schedule(next(iter(runs.values())))
    return curves


def write_curves(runs: Mapping[str, Experiment], path: Path, *, title: str = "") -> Path:
    """Simulate each run (label -> a kondo_experiment of one application) and draw their curves into ``path``."""
    curves = completion_curves(runs)
    fig = Figure(figsize=(8.0, 5.0), layout="tight")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    many = len(curves) > 11  # (ten runs and the optimum fit the default cycle; more take tab20's colours)
    for i, (label, times) in enumerate(curves.items()):
        minutes = [0.0, *(t / 60.0 for t in times)]
        colour = matplotlib.colormaps["tab20"](i % 20) if many else f"C{i}"
        style = {"color": "black", "linestyle": "--", "linewidth": 2.0} if label == OPTIMAL else {"color": colour}
        ax.step(minutes, range(len(minutes)), where="post", label=label, **style)
    ax.set_xlabel("time since the application's submission (min)")
    ax.set_ylabel("tasks completed")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, loc="lower right", ncols=2)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    log.info("wrote %s", path)
    return path
