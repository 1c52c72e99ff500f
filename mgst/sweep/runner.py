"""Run a sweep's cells on a local process pool or on Dask (dask_engine); resume; write summary and plots."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst.bounded_read import read_text
from mgst.config import ConfigError
from mgst.model import BagList, BagStream, Experiment, PoissonClasses
from mgst.process_pool import InterruptiblePool
from mgst.sweep.cells import CellFn, Outcome, SweepError, default_cell, run_cell
from mgst.sweep.dask_engine import run_on_dask, run_on_slurm
from mgst.sweep.folder_lock import one_sweep_at_a_time
from mgst.sweep.results import ResultLog, summarize, write_summary
from mgst.sweep.slurm_workers import SlurmWorkers
from mgst.sweep.spec import Cell, SweepSpec

log = logging.getLogger(__name__)

MANIFEST = "sweep.json"
RUNS = "runs"  # the manifest's record of the commands that ran cells in the folder (mgst's version, ...)
MAX_RUNS = 1000  # the latest kept: a manifest stays some kilobytes however often a sweep is resumed
MAX_MANIFEST_BYTES = 16 << 20  # sweep.json read back: 16 MiB (a sweep's settings are some kilobytes)
CSV = "sweep.csv"
SUMMARY = "summary.csv"
PLOTS = "plots"
SLURM_LOGS = "slurm-logs"  # the Slurm worker jobs' scripts' output


@dataclass(frozen=True, slots=True)
class Progress:
    done: int  # cells finished, those of earlier runs included
    total: int
    skipped: int  # finished by an earlier run
    failed: int  # failed in this run
    elapsed: float  # s since this run started
    eta: float | None  # s, from this run's pace (None before the first cell)


@dataclass
class SweepResult:
    out_dir: Path
    total: int
    skipped: int
    computed: int = 0
    failed: list[tuple[Cell, str]] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    elapsed: float = 0.0


def run_sweep(spec: SweepSpec, out_dir: str | os.PathLike, *, workers: int = 1, scheduler: str | None = None,
              cell_fn: CellFn | None = None, progress: Callable[[Progress], None] | None = None,
              plots: bool = True, connect_timeout: float = 30.0, worker_log_level: int | None = None,
              slurm: SlurmWorkers | None = None, cell_name: str | None = None,
              made_by: Mapping[str, Any] | None = None) -> SweepResult:
    """Run every cell of ``spec`` not yet in ``out_dir/sweep.csv``, then write summary.csv and plots.

    Cells run on ``workers`` local processes, or on the Dask cluster whose scheduler is at
    ``scheduler`` (``tcp://host:port``), or on Dask workers submitted as Slurm jobs (``slurm``: dask-jobqueue's
    SLURMCluster, its scheduler in this process; the sweep stops, finished cells saved, once all its jobs
    are gone). ``cell_fn(experiment, replication)`` computes one cell
    (default: the scenario's ``cell``, else mgst.sim.bag_cell.simulate_cell); it must be picklable (a
    module-level function).
    A cell that raises gets its message in the ``error`` column and runs again next time. On
    KeyboardInterrupt the pool is shut down (workers killed) and the interrupt re-raised.
    ``connect_timeout`` (s) bounds the wait for the Dask scheduler; ``worker_log_level`` sets the
    root log level in local workers (None: as in this process). ``cell_name`` (``mgst sweep --cell``'s
    ``module:function``) is kept with the folder's settings: rows of another cell function are not mixed in.
    ``made_by`` (e.g. mgst's version, the sweep file's digest, ``--quick``) is appended to the manifest's ``runs``,
    one entry a command that ran cells in the folder, kept but not compared: a resumed sweep says which mgst made
    which of its invocations (a different version than the last is logged as a warning).
    """
    out = Path(out_dir)
    with one_sweep_at_a_time(out):
        return _run_sweep(spec, out, workers, scheduler, cell_fn, progress, plots, connect_timeout, worker_log_level,
                          slurm, cell_name, made_by)


def _run_sweep(spec: SweepSpec, out: Path, workers: int, scheduler: str | None, cell_fn: CellFn | None,
               progress: Callable[[Progress], None] | None, plots: bool, connect_timeout: float,
               worker_log_level: int | None, slurm: SlurmWorkers | None, cell_name: str | None,
               made_by: Mapping[str, Any] | None) -> SweepResult:
    """run_sweep's work, the folder's lock held."""
    t0 = time.perf_counter()
    claimed = _claim(out, spec, cell_name)
    scenario = spec.scenario
    measures = scenario.measures
    try:
        if scenario.prepare is not None:  # what the cells share (files in the sweep's folder), made once
            try:
                spec = dataclasses.replace(spec, options=scenario.prepare(dict(spec.axes), spec.options, out))
            except ValueError as e:  # (options that cannot make what the cells share: a platform too large)
                raise ConfigError("options", str(e), str(spec.path) if spec.path is not None else None) from None
        cells = spec.cells()
        for cell in cells:  # every cell built and checked (ConfigError naming the cell) before a row is written
            spec.experiment(cell)
    except ConfigError:
        if claimed is not None:  # (a refused sweep leaves no manifest of its settings to refuse the corrected one)
            claimed.unlink(missing_ok=True)
        raise
    results = ResultLog(out / CSV, spec.columns, measures.columns)
    try:
        done = results.open()
    except ValueError as e:
        raise ConfigError("--out", str(e)) from None
    todo = [c for c in cells if c.key not in done]
    result = SweepResult(out, total=len(cells), skipped=len(cells) - len(todo))
    # Longest first, so that no long cell starts last while the other workers idle (the order changes
    # nothing else: cells are independent and sweep.csv is put in grid order at the end).
    todo = longest_first(todo, spec.experiment, scenario.cost)
    if todo and made_by is not None:
        _record_run(out / MANIFEST, made_by)
    log.info("%s: %d cells, %d already done, %d to run", spec.name, len(cells), result.skipped, len(todo))
    if cell_fn is None and scenario.cell is not None:
        cell_fn = scenario.cell
    if cell_fn is None:
        if todo and scheduler is None and slurm is None and importlib.util.find_spec("mgst.sim.bag_cell") is None:
            results.close()
            raise SweepError("mgst.sim.bag_cell (simulate_cell) is not available: no cell can run")
        cell_fn = default_cell

    def report() -> None:
        if progress is not None:
            n = result.computed
            elapsed = time.perf_counter() - t0
            eta = elapsed / n * (len(todo) - n) if n else None
            progress(Progress(result.skipped + n, result.total, result.skipped, len(result.failed), elapsed, eta))

    report()
    seen_errors: set[str] = set()
    try:
        tasks = ((c, spec.experiment(c)) for c in todo)
        if slurm is not None:
            runner = run_on_slurm(tasks, slurm, out / SLURM_LOGS, cell_fn) if todo else iter(())
        elif scheduler is not None:
            runner = run_on_dask(tasks, scheduler, cell_fn, connect_timeout)
        else:
            runner = _local(tasks, workers, cell_fn, worker_log_level)
        with contextlib.closing(runner):
            for cell, outcome in runner if todo else ():
                if isinstance(outcome, BaseException):
                    message = f"{type(outcome).__name__}: {outcome}"
                    results.append(cell.key, None, message)
                    result.failed.append((cell, message))
                    first = message not in seen_errors
                    seen_errors.add(message)
                    (log.warning if first else log.debug)("cell %s failed: %s", "/".join(cell.key), message)
                else:
                    results.append(cell.key, outcome)
                result.computed += 1
                report()
        position = {c: {v: i for i, v in enumerate(spec.values(c))} for c in spec.columns}

        def order(row: Mapping[str, str]) -> tuple:
            return tuple((position[c].get(row[c], len(position[c])), _int_or(row[c])) for c in spec.columns)

        results.sort(order)
    except (ConfigError, SweepError):
        results.close()
        if claimed is not None and not done and not result.computed:  # (a cluster that could not be reached, say:
            # nothing of a sweep that never ran a cell is left to refuse the rerun with other options)
            for made in (out / CSV, claimed):
                made.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                (out / SLURM_LOGS).rmdir()  # (empty: no worker was started)
        raise
    finally:
        results.close()
    axes = [a.name for a in scenario.axes]
    result.summary = summarize(results.rows, axes, measures)
    write_summary(out / SUMMARY, result.summary, axes, measures)
    if not plots and (out / PLOTS).is_dir() and any((out / PLOTS).iterdir()):  # (an earlier run's, now stale)
        log.warning("%s/%s holds the plots of an earlier run of this sweep, not of summary.csv as it is now "
                    "(--no-plots)", out, PLOTS)
    if plots:
        from mgst.sweep.plots import write_plots  # noqa: PLC0415 (matplotlib is slow to import)

        order_of = {a.name: spec.values(a.name) + tuple(v for v in a.values if v not in spec.values(a.name))
                    for a in scenario.axes}
        result.plots = write_plots(result.summary, out / PLOTS, panel_axes=scenario.panels,
                                   groups=scenario.groups, bars=scenario.bars, order=order_of,
                                   metrics=measures.summarised, growing=measures.growing,
                                   labels=dict(measures.labels), scales=dict(measures.scale))
        if scenario.figures is not None:
            result.plots += scenario.figures(spec, out / PLOTS)
    result.elapsed = time.perf_counter() - t0
    return result


def estimated_cost(experiment: Experiment) -> float:
    """A cell's expected cost, relative to the other cells of its sweep: the jobs it is expected to simulate.

    Only the order in which cells are submitted depends on it. 0.0 for a workload whose size is not
    known in advance (a trace).
    """
    w = experiment.workload
    horizon = experiment.simulation.horizon
    if isinstance(w, BagStream):
        bags = w.bag_rate * horizon
        if w.max_bags is not None:
            bags = min(bags, w.max_bags)
        total = sum(w.mix)
        mean_task = sum(f * c.granularity for f, c in zip(w.mix, experiment.classes)) / total if total > 0 else 0.0
        return bags * w.application_size / mean_task if mean_task > 0 else 0.0
    if isinstance(w, PoissonClasses):
        return horizon * sum(c.arrival_rate for c in experiment.classes)
    if isinstance(w, BagList):
        return float(sum(len(tasks) for _, tasks in w.bags))
    return 0.0


def longest_first(cells: list[Cell], experiment: Callable[[Cell], Experiment],
                  estimate: Callable[[Experiment], float] | None = None) -> list[Cell]:
    """``cells`` by decreasing cost (``estimate``, default estimated_cost); cells of equal cost keep their order
    (grid order)."""
    estimate = estimate or estimated_cost
    cost = {c: estimate(experiment(c)) for c in cells}
    return sorted(cells, key=lambda c: -cost[c])


def _int_or(text: str) -> tuple[int, str]:
    try:
        return (int(text), "")
    except ValueError:
        return (0, text)


# What a testbed run or a simulation leaves in its folder: a folder new to a sweep holding one is refused (the sweep's
# summary.csv replaced theirs)
OTHER_RESULTS = ("summary.csv", "summary.json", "journal.sqlite", "jobs.csv")


def _claim(out: Path, spec: SweepSpec, cell_name: str | None = None) -> Path | None:
    """Make ``out`` this sweep's folder, or check that the sweep already in it has the same settings (and cell
    function: ``cell_name``, kept only when one is given, so that the folders of before it stay the same). The
    manifest it wrote in a folder new to a sweep (to remove if the sweep is refused before its first row), or None."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / MANIFEST
    mine = spec.manifest()
    if cell_name is not None:
        mine["cell"] = cell_name
    if path.exists():
        try:
            theirs = json.loads(read_text(path, MAX_MANIFEST_BYTES))
        except (OSError, ValueError) as e:
            raise ConfigError("--out", f"{path} cannot be read ({e}); choose another folder") from None
        if isinstance(theirs, dict):
            theirs.pop(RUNS, None)  # (how each command was made: kept, not compared)
        if isinstance(theirs, dict) and theirs.get("scenario") != mine["scenario"]:
            raise ConfigError("--out", f"{out} holds a sweep of the {theirs.get('scenario')!r} scenario, and this one "
                                       f"is of {mine['scenario']!r}: choose another folder")
        if theirs != mine:
            diff = _difference(theirs, mine)
            raise ConfigError("--out", f"{out} holds a sweep with other settings ({diff}); its rows cannot be "
                                       "mixed with this sweep's: choose another folder")
    elif (out / CSV).exists():
        raise ConfigError("--out", f"{out / CSV} exists but {MANIFEST} does not: choose another folder")
    elif others := [n for n in OTHER_RESULTS if (out / n).exists()]:  # (a run's or a simulation's, overwritten)
        raise ConfigError("--out", f"{out} holds other results ({', '.join(others)}), which the sweep would "
                                   "overwrite or mix with its own: choose another folder")
    else:
        path.write_text(json.dumps(mine, indent=1) + "\n", encoding="utf-8")
        return path
    return None


def _record_run(path: Path, made_by: Mapping[str, Any]) -> None:
    """Append ``made_by`` to the manifest's ``runs`` (the latest MAX_RUNS kept), replacing the file whole; warn when
    the mgst that made the folder's previous cells was another version."""
    manifest = json.loads(read_text(path, MAX_MANIFEST_BYTES))
    runs = manifest.get(RUNS)
    runs = [r for r in runs if isinstance(r, dict)] if isinstance(runs, list) else []
    before = runs[-1].get("mgst_version") if runs else None
    if before is not None and before != made_by.get("mgst_version"):
        log.warning("%s: its earlier cells were computed by mgst %s, these by mgst %s (sweep.json's 'runs' records "
                    "which): their rows are mixed in one sweep.csv", path.parent, before, made_by.get("mgst_version"))
    manifest[RUNS] = [*runs, dict(made_by)][-MAX_RUNS:]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _difference(theirs: Any, mine: Any, where: str = "") -> str:
    if isinstance(theirs, dict) and isinstance(mine, dict):
        for k in sorted(set(theirs) | set(mine)):
            if theirs.get(k) != mine.get(k):
                return _difference(theirs.get(k), mine.get(k), f"{where}.{k}" if where else k)
    return f"{where}: {theirs!r} there, {mine!r} here"


def _local(tasks, workers: int, cell_fn: CellFn, log_level: int | None) -> Iterator[Outcome]:
    with InterruptiblePool[Cell](workers, log_level) as pool:
        for cell, fut in pool.results((cell, run_cell, (cell_fn, exp, cell.replication)) for cell, exp in tasks):
            exc = fut.exception()
            if isinstance(exc, BrokenProcessPool):
                raise SweepError(f"a worker process died ({exc}); finished cells are saved: run again to go on")
            yield cell, exc if exc is not None else fut.result()
