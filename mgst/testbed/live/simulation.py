"""The simulation of the run's setting for the live view, computed at the start in a low-priority process."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
from typing import Any

from mgst.model import Experiment, PoissonClasses

log = logging.getLogger(__name__)

# Niceness added to the simulation's process: it takes the CPU the run (mapper, pullers) leaves over.
NICE = 15
# Seconds given to the process to stop when the view closes, after it is terminated, before it is killed.
STOP_GRACE = 2.0
# How often (s) the process checks that its parent lives: a mapper killed outright leaves no simulation behind.
ORPHAN_CHECK = 1.0


def _exit_with_parent(parent: int) -> None:
    """In the child: exit at once when the parent is gone (reparented: our parent id changes)."""
    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(ORPHAN_CHECK)
        os._exit(1)

    threading.Thread(target=watch, name="orphan-check", daemon=True).start()


def _simulate(conn: Any, parent: int, experiment: Experiment, horizon: float, warmup: float, seed: int,
              replications: int | None, imports: tuple[str, ...]) -> None:
    """The child: simulate, send ("done", summary dict) or ("failed", why)."""
    try:
        _exit_with_parent(parent)
        os.nice(NICE)
        from mgst.simulate import run_simulation  # noqa: PLC0415 (the child imports only what it runs)

        summary, _ = run_simulation(experiment, horizon=horizon, warmup=warmup, seed=seed,
                                    replications=replications, imports=imports, workers=1)
        conn.send(("done", summary.as_dict()))
    except BaseException as e:  # noqa: BLE001 (told to the page)
        conn.send(("failed", f"{type(e).__name__}: {e}"[:300]))
    finally:
        conn.close()


class BackgroundSimulation:
    """The simulation of ``experiment`` over ``horizon`` (model time) with the run's seed, in a child process.

    As ``mgst run`` compares at the end: replication 0 shares the run's job sequence; a bag workload
    is simulated with one replication (the same bags), job classes with the file's replications.
    :meth:`poll` says where it is, for the page: {"status": "running" | "done" | "failed", ...}.
    """

    def __init__(self, experiment: Experiment, horizon: float, warmup: float, seed: int,
                 imports: tuple[str, ...] = ()):
        replications = None if isinstance(experiment.workload, PoissonClasses) else 1
        ctx = mp.get_context("spawn")  # never fork a process with threads and a ZeroMQ context
        self._recv, send = ctx.Pipe(duplex=False)
        self.process = ctx.Process(target=_simulate, name="mgst-live-simulation", daemon=True,
                                   args=(send, os.getpid(), experiment, horizon, warmup, seed, replications, imports))
        self.process.start()
        send.close()
        self.state: dict[str, Any] = {"status": "running", "horizon": horizon, "seed": seed}

    def poll(self) -> dict[str, Any]:
        if self.state["status"] == "running":
            try:
                if self._recv.poll():
                    kind, value = self._recv.recv()
                    if kind == "done":
                        self.state = {"status": "done", "summary": value}
                    else:
                        self.state = {"status": "failed", "error": value}
                    self.process.join(STOP_GRACE)
            except (EOFError, OSError):
                self.state = {"status": "failed", "error": f"the simulation's process ended (exit code "
                                                          f"{self.process.exitcode})"}
            if self.state["status"] == "failed":
                log.warning("the live view's simulation failed: %s", self.state["error"])
        return self.state

    def close(self) -> None:
        """Stop the process if it still runs, and reap it."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(STOP_GRACE)
            if self.process.is_alive():
                self.process.kill()
        self.process.join(STOP_GRACE)
        self._recv.close()
