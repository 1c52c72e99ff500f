"""A sweep on Dask whose worker dies between a cell's end and the moment the sweep fetches its result: the result
is lost with the worker, and the sweep must stop with its one line once the workers are gone (it waited for
ever in Future.result, the cell computed again by no worker: a sweep on Slurm cancelled mid-sweep hung)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import sweep_fake

from mgst.sweep import SweepError
from mgst.sweep.dask_engine import _on_client
from mgst.sweep.spec import load_sweep

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "experiments" / "bot" / "anglano-sweep.toml"
BOUND = 30.0  # s the sweep may take to stop once its worker is gone (it asks every SLURM_POLL = 2 s)


def test_a_result_lost_with_its_worker_before_it_was_fetched_stops_the_sweep(tmp_path, no_children_left):
    distributed = pytest.importorskip("distributed")
    spec = load_sweep(FILE, quick=True)
    tasks = [(c, spec.experiment(c)) for c in spec.cells()[:3]]
    marker = tmp_path / "asked-for-a-result"
    cluster = distributed.LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None,
                                       silence_logs=logging.ERROR)
    client = None
    # one worker of its own process and no nanny, as a Slurm worker job: once its process ends, it is gone
    with (tmp_path / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address, "--no-nanny",
             "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard", "--local-directory", str(tmp_path)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])})
    try:
        client = distributed.Client(cluster, set_as_default=False)
        client.wait_for_workers(1, timeout=60)

        def gone() -> str | None:
            return None if worker.poll() is None else "the sweep's worker is gone"

        outcomes: list = []
        raised: list[BaseException] = []

        def sweep() -> None:
            try:
                outcomes.extend(_on_client(client, tasks, sweep_fake.LostWhenFetched(str(marker)), gone))
            except BaseException as e:  # (the thread's outcome, judged below)
                raised.append(e)

        thread = threading.Thread(target=sweep, daemon=True)
        thread.start()
        thread.join(BOUND)
        assert marker.exists(), (tmp_path / "worker.log").read_text()[-2000:]  # a result was asked for
        assert worker.poll() == 3  # ... and its worker died sending it
        assert not thread.is_alive(), f"the sweep still waits, {BOUND:g} s on, for a result lost with its worker"
        assert len(raised) == 1 and isinstance(raised[0], SweepError), raised
        assert str(raised[0]) == "the sweep's worker is gone"
        assert outcomes == []  # no cell is recorded as failed for a result that was lost
    finally:
        if client is not None:
            client.close()
        cluster.close()
        if worker.poll() is None:
            worker.kill()
        worker.wait(10)
