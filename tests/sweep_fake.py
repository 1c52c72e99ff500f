"""Picklable stand-ins for mgst.sim.bag_cell.simulate_cell: metrics from the cell's parameters, no simulation."""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from pathlib import Path

from mgst.model import Experiment

POLICIES = ("fcfs_excl", "fcfs_share", "rr", "rr_nrf", "long_idle")


def metrics(experiment: Experiment, replication: int) -> dict[str, float | int | bool]:
    """Deterministic metrics: a function of policy, machine count, bag rate, mix and replication only.

    fcfs_excl with a mix that is all L tasks is unbounded, as in the paper's Figure 2.
    """
    policy = POLICIES.index(experiment.policy.name) if experiment.policy.name in POLICIES else 9
    mix = experiment.workload.mix
    base = 1000.0 * (policy + 1) + 10.0 * len(experiment.machines) + 1e6 * experiment.workload.bag_rate
    avt = base + 100.0 * mix.index(max(mix)) + 7.0 * replication
    return {
        "avt": avt, "avt_ci": 1.5, "makespan": avt / 2, "makespan_ci": 0.5, "waiting": avt / 4, "waiting_ci": 0.25,
        "rwt": 0.1 * (policy + 1) + 0.01 * replication, "bags": 10 + replication, "tasks": 100 * (policy + 1),
        "unbounded": experiment.policy.name == "fcfs_excl" and mix[3] == 1.0, "wall_s": 0.0,
    }


def cell(experiment: Experiment, replication: int) -> dict[str, float | int | bool]:
    """The plain fake."""
    return metrics(experiment, replication)


class Marking:
    """A fake that leaves a marker file per call in ``folder`` (who computed what), and may sleep or fail.

    A call for a cell whose policy is in ``fail`` raises; one whose policy is ``extra`` adds a column;
    one whose policy is ``die`` ends its worker process.
    """

    def __init__(self, folder: str, run: str, delay: float = 0.0, fail: tuple[str, ...] = (), extra: str = "",
                 die: str = ""):
        self.folder, self.run, self.delay, self.fail, self.extra, self.die = folder, run, delay, fail, extra, die

    def __call__(self, experiment: Experiment, replication: int) -> dict[str, float | int | bool]:
        time.sleep(self.delay)
        name = f"{self.run}.{experiment.name}.{replication}.{os.getpid()}.{uuid.uuid4().hex[:6]}"
        Path(self.folder, name).touch()
        if experiment.policy.name == self.die:
            os._exit(3)
        if experiment.policy.name in self.fail:
            raise RuntimeError(f"fake failure\nfor {experiment.policy.name}")
        out = metrics(experiment, replication)
        if self.extra and experiment.policy.name == self.extra:
            out["replicas"] = 42
        return out



class _EndsItsWorkerWhenSent:
    """A metric whose pickling ends the process that pickles it: the worker's, as it sends a finished cell's result
    to the sweep. ``marker`` is made first (the sweep has asked for the result)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        Path(self.marker).touch()
        os._exit(3)


class LostWhenFetched:
    """A fake whose cells finish, but whose worker dies as the sweep fetches a result: a Slurm worker job cancelled
    between a cell's end and the moment the sweep gathers it (its result is lost with it)."""

    def __init__(self, marker: str):
        self.marker = marker

    def __call__(self, experiment: Experiment, replication: int) -> dict[str, object]:
        return {**metrics(experiment, replication), "avt": _EndsItsWorkerWhenSent(self.marker)}


def main() -> None:
    """``python sweep_fake.py FILE OUT MARKERS DELAY``: a sweep with a slow marking fake (for Ctrl-C tests)."""
    import logging

    from sweep_fake import Marking as Fake  # by module name, not __main__, so workers can unpickle it

    from mgst.sweep import run_sweep
    from mgst.sweep.spec import load_sweep

    logging.basicConfig(level=logging.INFO)
    # Ctrl-C raises KeyboardInterrupt even when this was started with SIGINT ignored (a job put in the
    # background by a shell without job control, as a CI runner may be): Python then keeps it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    file, out, markers, delay = sys.argv[1:5]
    spec = load_sweep(file, quick=True)
    try:
        run_sweep(spec, out, workers=2, cell_fn=Fake(markers, "first", float(delay)), plots=False)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        sys.exit(130)


if __name__ == "__main__":
    main()


class RemovingFolder:
    """The plain fake, which removes ``folder`` (the sweep's own) the first time it is called: as a user's rm -rf
    while the sweep runs."""

    def __init__(self, folder: str, calls: str):
        self.folder, self.calls = folder, calls  # calls: a folder outside it, a file in it per call

    def __call__(self, experiment: Experiment, replication: int) -> dict[str, float | int | bool]:
        import shutil  # noqa: PLC0415

        Path(self.calls, uuid.uuid4().hex).touch()
        shutil.rmtree(self.folder, ignore_errors=True)
        return metrics(experiment, replication)
