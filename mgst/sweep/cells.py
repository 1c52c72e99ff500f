"""A sweep's cell as a worker computes it (local process or Dask worker), and what the engines share."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from mgst.model import Experiment
from mgst.sweep.spec import Cell
from mgst.worker_memory import free_garbage_if_grown, records_out_of_sight

CellFn = Callable[[Experiment, int], Mapping[str, Any]]
Outcome = tuple[Cell, "dict[str, Any] | BaseException"]


class SweepError(RuntimeError):
    """The sweep cannot go on (a worker process died, the cluster went away); finished cells are saved."""


def default_cell(experiment: Experiment, replication: int) -> Mapping[str, Any]:
    """The real cell: mgst.sim.bag_cell.simulate_cell, imported where the cell runs."""
    from mgst.sim.bag_cell import simulate_cell  # noqa: PLC0415

    return simulate_cell(experiment, replication)


def run_cell(cell_fn: CellFn, experiment: Experiment, replication: int) -> dict[str, Any]:
    """In a worker: one cell's metrics, with ``wall_s`` measured if the cell function gives none.

    As ``mgst simulate`` runs a replication (mgst.worker_memory): the worker's garbage is freed first if it has
    grown enough (not counted in ``wall_s``), and the cell runs with the collector paused, what it leaves frozen
    after it, so that no collection walks its records (a cell of a million jobs: 0.7 s).
    """
    free_garbage_if_grown()
    t0 = time.perf_counter()
    with records_out_of_sight():
        result = cell_fn(experiment, replication)
    if not isinstance(result, Mapping):
        raise TypeError(f"the cell function returned {type(result).__name__}, not a mapping of metrics")
    out = dict(result)
    out.setdefault("wall_s", time.perf_counter() - t0)
    return out
