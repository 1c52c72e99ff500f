"""A sweep's cells on Dask: a cluster of the user's (its scheduler's address), or Dask workers that are Slurm jobs
(dask-jobqueue's SLURMCluster, stopped with one line once all its jobs are gone)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mgst.config import ConfigError
from mgst.sweep.cells import CellFn, Outcome, SweepError, run_cell
from mgst.sweep.slurm_workers import SlurmWorkers
from mgst.sweep.spec import Cell

# Seconds between two looks at a Slurm cluster's workers while no cell finishes (squeue once per look).
SLURM_POLL = 2.0
COMPLETED_POLL = 0.1


def check_scheduler(address: str) -> None:
    """ConfigError naming --scheduler unless ``address`` is a Dask scheduler's address (``tcp://host:port``) and
    the 'distributed' package is there. Checked before a client is made: a client made of a bad address raised,
    then hung the interpreter's exit for ever (its loop's thread awaiting a close that never came)."""
    try:
        from distributed.comm import parse_address, parse_host_port  # noqa: PLC0415
    except ImportError:
        raise ConfigError("--scheduler", "needs the 'distributed' package (pip install distributed)") from None
    try:
        scheme, location = parse_address(address)
        if scheme not in ("tcp", "tls"):
            raise ValueError(f"a scheduler is reached over tcp:// or tls://, not {scheme}://")
        parse_host_port(location)
    except (ValueError, TypeError) as e:
        raise ConfigError("--scheduler", f"{address!r} is not a scheduler's address (tcp://HOST:PORT): {e}") from None


def run_on_dask(tasks, address: str, cell_fn: CellFn, timeout: float) -> Iterator[Outcome]:
    check_scheduler(address)
    from distributed import Client  # noqa: PLC0415

    try:
        client = Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError) as e:
        raise ConfigError("--scheduler", f"cannot reach the Dask scheduler at {address}: {e}") from None
    yield from _on_client(client, tasks, cell_fn)


def run_on_slurm(tasks, workers: SlurmWorkers, log_dir: Path, cell_fn: CellFn) -> Iterator[Outcome]:
    """The cells on Dask workers that are Slurm jobs (SLURMCluster); SweepError once every job is gone."""
    from distributed import Client  # noqa: PLC0415

    from mgst.sweep.slurm_workers import job_ids, live_jobs, start_cluster  # noqa: PLC0415

    cluster = start_cluster(workers.check(), log_dir)
    try:
        client = Client(cluster, set_as_default=False)
        seen: set[int] = set()

        def gone() -> str | None:
            seen.update(job_ids(cluster))  # (every time: a job's entry may go with its worker)
            # Slurm's word, not the scheduler's: a worker killed with its job stays in the scheduler's list until
            # its time-to-live passes (a cancelled sweep then waited on it for minutes).
            if seen and not live_jobs(seen):
                return (f"the sweep's Slurm jobs ({', '.join(map(str, sorted(seen)))}) are gone (cancelled, "
                        "preempted or past their time limit); finished cells are saved: run again to go on")
            return None

        yield from _on_client(client, tasks, cell_fn, gone)
    finally:
        cluster.close()


def _on_client(client, tasks, cell_fn: CellFn, gone: Callable[[], str | None] | None = None) -> Iterator[Outcome]:
    """The cells submitted to ``client``'s cluster, their outcomes as they come; with ``gone``, asked while no
    cell finishes, SweepError with its message once it says the workers will not come back."""
    from distributed import as_completed  # noqa: PLC0415

    futures: dict[str, tuple[Any, Cell]] = {}
    clean = False
    try:
        tasks = list(tasks)
        for i, (cell, exp) in enumerate(tasks):
            # Dask runs higher priorities first: keep the order the cells come in (longest first).
            fut = client.submit(run_cell, cell_fn, exp, cell.replication, pure=False, priority=len(tasks) - i)
            futures[fut.key] = (fut, cell)
        # with_results: each result is fetched in the client's own loop as its task finishes, and the wait for it
        # is the wait for its task, which ``gone`` bounds. A result lost with its worker before it was fetched
        # (a worker job cancelled just after a cell ended) has its task computed again, by no worker once they
        # are all gone: Future.result() here waited for it for ever.
        completed = as_completed([f for f, _ in futures.values()], loop=client.loop, with_results=True,
                                 raise_errors=False)
        for fut, result in _completed(completed, gone):
            yield futures[fut.key][1], _outcome(fut, result)
        clean = True
    finally:
        if not clean and futures:
            with contextlib.suppress(Exception):
                client.cancel([f for f, _ in futures.values()])
        client.close()


def _outcome(fut, result: Any) -> dict[str, Any] | BaseException:
    """A cell's outcome from what ``as_completed(with_results=True, raise_errors=False)`` gave for its task: its
    metrics (run_cell's dict), the exception it raised (given as (type, exception, traceback)), or the
    CancelledError of a cancelled task."""
    if isinstance(result, dict | BaseException):
        return result
    if isinstance(result, tuple) and len(result) == 3 and isinstance(result[1], BaseException):
        return result[1]
    return SweepError(f"the Dask task ended as {fut.status}")


def _completed(completed, gone: Callable[[], str | None] | None) -> Iterator[Any]:
    """The (future, result) pairs of ``completed`` (distributed.as_completed) as they complete; with ``gone``, asked
    every SLURM_POLL seconds while none is ready (it notes the jobs then), SweepError with its message once it says
    the workers are gone."""
    if gone is None:
        yield from completed
        return
    asked = time.monotonic()
    while not completed.is_empty():
        if completed.has_ready():
            yield from completed.next_batch(block=False)
        elif time.monotonic() - asked >= SLURM_POLL:
            why = gone()
            if why is not None:
                raise SweepError(why)
            asked = time.monotonic()
        else:
            time.sleep(COMPLETED_POLL)  # (as as_completed's own iteration waits: in steps of 0.1 s)
