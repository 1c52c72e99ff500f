"""Kondo, Chien & Casanova: rapid turnaround on desktop grids, as `mgst sweep` runs it.

One cell is one application (T tasks of s minutes on a dedicated 1.5 GHz host) on one platform under
one policy, started at a random business-hours point of the platform's trace: replication k is the
k-th start point drawn from the sweep's seed (the same for every platform and policy, so that
comparisons are paired). The platforms are generated once per sweep into its folder
(``platforms/<kind>``, deterministic from the kind and the options), unless ``platforms`` names a
folder of them (e.g. real traces: one folder per platform value, with hosts.csv and availability.csv).
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mgst.config.experiment import describe_value
from mgst.model import Experiment
from mgst.papers.kondo.experiment import (
    DEFAULT_HISTORY,
    OTHER_READINGS,
    POLICIES,
    kondo_experiment,
    read_platform_files,
)
from mgst.papers.kondo.metrics import CELL_METRICS, simulate_cell
from mgst.scenarios.scenario import Axis, Measures, RunSettings, Scenario, registered_policy

log = logging.getLogger(__name__)

PLATFORMS = ("sdsc", "homogeneous", "lri-wisc", "gimps")
TASKS = ("100", "200", "400")
TASK_MINUTES = ("5", "15", "35")
# Start points are drawn this many at a time (replication k takes the k-th, whatever the replication count,
# so a sweep resumed with more replications keeps its first ones).
MAX_STARTS = 1000
# A start point leaves at least this much trace after it (s): the slowest application of the grid (400 tasks
# of 35 min under FCFS) takes a few hours; after the trace's end the simulator keeps hosts up, and the
# optimum does likewise, but the start points should not lean on that.
START_MARGIN = 86_400.0
# The cumulative task completion curves (one run per policy, the slides' picture) are drawn for this
# application if the sweep has it, else for its first tasks and size values.
CURVE_APPLICATION = ("200", "15")
PLATFORMS_FOLDER = "platforms"

MEASURES = Measures(
    columns=CELL_METRICS,
    summarised=("ratio", "waste", "prediction_error", "makespan", "optimal", "replicas"),
    labels=(("ratio", "makespan / optimal makespan"),
            ("waste", "discarded replicas' work (% of the application's)"),
            ("prediction_error", "prediction error vs optimum (%)"),
            ("makespan", "makespan (s)"), ("optimal", "optimal makespan (s)"), ("replicas", "replicas started")),
    scale=(("waste", 100.0), ("prediction_error", 100.0)),
)


def _option_defaults() -> dict[str, Any]:
    return {"hosts": 220, "days": 28, "platform_seed": 1, "history": DEFAULT_HISTORY, "platforms": ""}


def _check_option(name: str, value: Any) -> str | None:
    def integer(low: int) -> str | None:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
        return None if ok else f"must be an integer >= {low}, got {describe_value(value)}"

    if name == "hosts":
        from mgst.traces.platform import MAX_HOSTS  # noqa: PLC0415 (the platform generator, loaded when it runs)

        ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_HOSTS
        return None if ok else f"must be an integer in 1..{MAX_HOSTS:,}, got {describe_value(value)}"
    if name == "days":
        return integer(3)  # a history day, a start and a margin day
    if name == "platform_seed":
        return integer(0)
    if name == "history":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf
        return None if ok else f"must be a number of seconds >= 0, got {describe_value(value)}"
    if name == "platforms":
        return None if isinstance(value, str) else f"must be a folder (a string), got {describe_value(value)}"
    return "not an option of this scenario"


def platform_folder(options: Mapping[str, Any], kind: str) -> Path:
    return Path(options["platforms"]) / kind


def _prepare(values: Mapping[str, tuple[str, ...]], options: Mapping[str, Any], out_dir: Path) -> dict[str, Any]:
    """Generate the swept platforms into ``out_dir/platforms`` (once: kept for a resumed sweep)."""
    out = dict(options)
    if options["platforms"]:
        out["platforms"] = str(Path(options["platforms"]).resolve())
        return out
    from mgst.traces.platform import write_generated_platform  # noqa: PLC0415

    root = (out_dir / PLATFORMS_FOLDER).resolve()
    out["platforms"] = str(root)
    for kind in values["platform"]:
        folder = root / kind
        if (folder / "hosts.csv").exists() and (folder / "availability.csv").exists():
            continue
        log.info("generating platform %s (%d hosts, %d days, seed %d)", kind, options["hosts"], options["days"],
                 options["platform_seed"])
        write_generated_platform(kind, folder, hosts=options["hosts"], days=options["days"],
                                 seed=options["platform_seed"])
    return out


@functools.lru_cache(maxsize=16)
def start_points(span: float, seed: int, history: float) -> tuple[float, ...]:
    """Business-hours start points (trace seconds) with ``history`` before them: replication k's is the k-th."""
    from mgst.traces.calendar import business_starts  # noqa: PLC0415

    starts = [s for s in business_starts(span, MAX_STARTS, seed, margin=START_MARGIN) if s >= history]
    return tuple(starts)


def _build(cell: Mapping[str, str], settings: RunSettings, seed: int, replication: int,
           options: Mapping[str, Any]) -> Experiment:
    folder = platform_folder(options, cell["platform"])
    span = read_platform_files(folder).span
    starts = start_points(span, seed, float(options["history"]))
    if replication >= len(starts):
        history = float(options["history"])
        raise ValueError(f"replication {replication}: the trace of {folder} (span {span:g} s) has only "
                         f"{len(starts)} start points with options.history = {history:g} s before them: "
                         "give fewer replications, a shorter history or more days")
    return kondo_experiment(folder, cell["policy"], int(cell["tasks"]), float(cell["task_minutes"]),
                            starts[replication], history=float(options["history"]), seed=seed)


def _check_policy(axis: str, value: str) -> str | None:
    """A policy outside the slides' eleven: another reading of one of them (OTHER_READINGS), or a registered one."""
    return None if axis == "policy" and value in OTHER_READINGS else registered_policy(axis, value)


def _figures(spec: Any, out_dir: Path) -> list[Path]:
    from mgst.papers.kondo.curves import write_curves  # noqa: PLC0415 (matplotlib is slow to import)

    tasks, minutes = CURVE_APPLICATION
    if tasks not in spec.values("tasks") or minutes not in spec.values("task_minutes"):
        tasks, minutes = spec.values("tasks")[0], spec.values("task_minutes")[0]
    seed = spec.seeds[0]
    written = []
    for platform in spec.values("platform"):
        runs = {policy: spec.scenario.build({"platform": platform, "policy": policy, "tasks": tasks,
                                             "task_minutes": minutes}, spec.settings, seed, 0, spec.options)
                for policy in spec.values("policy")}
        written.append(write_curves(runs, out_dir / f"completions-{platform}.png",
                                    title=f"{platform}: {tasks} tasks of {minutes} min (replication 0)"))
    return written


SCENARIO = Scenario(
    name="kondo",
    doc="Kondo, Chien & Casanova: 11 policies x 4 platforms x 3 task counts x 3 task sizes",
    axes=(
        Axis("platform", PLATFORMS, "synthetic platform (mgst traces): SDSC-like, homogeneous, LRI-WISC-, GIMPS-like"),
        Axis("policy", tuple(POLICIES), "the slides' policy names (or another reading's, e.g. EXCL-S.5-READY, or a "
             "registered policy)", open=True),
        Axis("tasks", TASKS, "T, tasks in the application"),
        Axis("task_minutes", TASK_MINUTES, "task size: minutes on a dedicated 1.5 GHz host"),
    ),
    build=_build,
    option_defaults=_option_defaults,
    check_option=_check_option,
    panels=("platform",),
    groups=("tasks", "task_minutes"),
    bars="policy",
    check_value=_check_policy,
    cell=simulate_cell,
    measures=MEASURES,
    per_replication=True,
    prepare=_prepare,
    figures=_figures,
    run_settings=False,
)
