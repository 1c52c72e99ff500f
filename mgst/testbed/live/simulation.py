"""The simulation of the run's setting for the live view, computed in a low-priority process of its own.

The process is a plain ``python -m mgst.testbed.live.simulation DIR`` in a process group of its own
(:mod:`.child`): a Ctrl-C at the terminal never reaches it, the mapper stops it (close), and it exits by
itself if the mapper dies first. Its input (the pickled setting) and output (the summary as JSON)
are files in DIR, so that neither side ever blocks on a pipe.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

from mgst.model import Experiment, PoissonClasses
from mgst.testbed.live import child

log = logging.getLogger(__name__)

# Niceness added to the simulation's process: it takes the CPU the run (mapper, pullers) leaves over.
NICE = 15
# The longest output read back (bytes): a summary is a few kB per hundred machines.
MAX_OUTPUT = 16 * 2**20


class BackgroundSimulation:
    """The simulation of ``experiment`` over ``horizon`` (model time) with the run's seed, in a child process.

    As ``mgst run`` compares at the end: replication 0 shares the run's job sequence; a bag workload
    is simulated with one replication (the same bags), job classes with the file's replications.
    :meth:`poll` says where it is, for the page: {"status": "running" | "done" | "failed", ...}.
    """

    def __init__(self, experiment: Experiment, horizon: float, warmup: float, seed: int,
                 imports: tuple[str, ...] = ()):
        replications = None if isinstance(experiment.workload, PoissonClasses) else 1
        self.dir = tempfile.TemporaryDirectory(prefix="mgst-live-sim-")
        folder = Path(self.dir.name)
        (folder / "input.pickle").write_bytes(pickle.dumps(
            {"experiment": experiment, "horizon": horizon, "warmup": warmup, "seed": seed,
             "replications": replications, "imports": imports, "parent": os.getpid()}))
        self.output = folder / "output.json"
        self.process = child.start("mgst.testbed.live.simulation", folder)
        self.state: dict[str, Any] = {"status": "running", "horizon": horizon, "seed": seed}

    def poll(self) -> dict[str, Any]:
        if self.state["status"] == "running" and self.process.poll() is not None:
            try:
                with open(self.output, "rb") as f:
                    kind, value = json.loads(f.read(MAX_OUTPUT))
                self.state = {"status": "done", "summary": value} if kind == "done" else {"status": "failed",
                                                                                           "error": value}
            except (OSError, ValueError):
                self.state = {"status": "failed", "error": f"the simulation's process ended without a result "
                                                           f"(exit code {self.process.returncode})"}
            if self.state["status"] == "failed":
                log.warning("the live view's simulation failed: %s", self.state["error"])
        return self.state

    def close(self) -> None:
        """Stop the process if it still runs, reap it, remove its files."""
        child.stop(self.process)
        self.dir.cleanup()


def main(folder: Path) -> None:
    """The child: simulate the setting in ``folder``/input.pickle (written by the parent, trusted), write
    ["done", summary] or ["failed", why] to ``folder``/output.json."""
    result: list[Any]
    try:
        task = pickle.loads((folder / "input.pickle").read_bytes())  # noqa: S301 (our parent's own file)
        child.exit_with_parent(task["parent"], folder)
        os.nice(NICE)
        from mgst.sim.replications import run_simulation  # noqa: PLC0415 (the child imports only what it runs)

        summary, _ = run_simulation(task["experiment"], horizon=task["horizon"], warmup=task["warmup"],
                                    seed=task["seed"], replications=task["replications"], imports=task["imports"],
                                    workers=1)
        result = ["done", summary.as_dict()]
    except Exception as e:  # noqa: BLE001 (told to the page)
        result = ["failed", f"{type(e).__name__}: {e}"[:300]]
    tmp = folder / "output.json.part"
    tmp.write_text(json.dumps(result))
    tmp.replace(folder / "output.json")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
