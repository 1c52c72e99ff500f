"""GridBot's experiments as `mgst sweep` runs them: one cell is one (experiment, variant, reading) at the sweep's scale,
one replication; the figures are each experiment's incomplete jobs over time per bag (the paper's Figures 5 and 7)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mgst.config.experiment import describe_value
from mgst.model import Experiment
from mgst.papers.gridbot.experiments import ALL_VARIANTS, EXPERIMENTS, READINGS, VARIANTS, build
from mgst.papers.gridbot.metrics import CELL_METRICS, simulate_cell
from mgst.scenarios.scenario import Axis, Measures, RunSettings, Scenario

MEASURES = Measures(
    columns=CELL_METRICS,
    summarised=("turnaround", "turnaround_max", "replicas_pct", "waste_pct"),
    labels=(("turnaround", "mean bag turnaround (s)"), ("turnaround_max", "last bag's turnaround (s)"),
            ("replicas_pct", "replicas (% of jobs)"), ("waste_pct", "discarded results (% of jobs)")),
)


def _option_defaults() -> dict[str, Any]:
    return {"scale": 1.0, "overlay": False}


def _check_option(name: str, value: Any) -> str | None:
    if name == "scale":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= 1
        share = "a share of the experiment's bags and hosts in (0, 1]"
        return None if ok else f"must be {share}, got {describe_value(value)}"
    if name == "overlay":
        return None if isinstance(value, bool) else f"must be true (fixed grids grow with the overlay) or false, " \
                                                    f"got {describe_value(value)}"
    return "unknown option (the options: scale, overlay)"


def _check_value(axis: str, value: str) -> str | None:
    return "not a value of this axis"


def _build(cell: Mapping[str, str], settings: RunSettings, seed: int, replications: int,
           options: Mapping[str, Any]) -> Experiment:
    experiment, variant = cell["experiment"], cell["variant"]
    if variant not in VARIANTS[experiment]:
        raise ValueError(f"variant {variant!r} is not one of experiment {experiment!r}'s "
                         f"({', '.join(VARIANTS[experiment])}): list only those in the sweep file's axes")
    return build(experiment, variant, cell["reading"], float(options["scale"]), seed, replications,
                 overlay=bool(options["overlay"]))


def _figures(spec: Any, out_dir: Path) -> list[Path]:
    from mgst.papers.gridbot.curves import write_sweep_curves  # noqa: PLC0415 (matplotlib is slow to import)

    return write_sweep_curves(out_dir.parent / "sweep.csv", out_dir)


SCENARIO = Scenario(
    name="gridbot",
    doc="GridBot's six experiments: experiment x variant (the policies it compares) x reading",
    axes=(
        Axis("experiment", EXPERIMENTS, "experiments/gridbot/<experiment>.toml"),
        Axis("variant", ALL_VARIANTS, "the experiment's policies (mgst.papers.gridbot.experiments.VARIANTS)"),
        Axis("reading", READINGS, "what the paper leaves open (docs/readings.md, GridBot)"),
    ),
    build=_build,
    option_defaults=_option_defaults,
    check_option=_check_option,
    panels=("experiment", "reading"),
    groups="experiment",
    bars="variant",
    check_value=_check_value,
    cell=simulate_cell,
    measures=MEASURES,
    figures=_figures,
    run_settings=False,
)
