"""Rebuilds a testbed run from its journal store: the journal, and the scheduling core by replaying its inputs.

The core is a deterministic state machine and its policy draws from a seeded
stream, so feeding a fresh core the inputs the mapper recorded, in order, at
the model times recorded, rebuilds exactly the state the dead mapper had:
the same queues, replicas, replica ids and timers. ``mgst export`` and
``mgst mapper --resume`` both start here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst import policies
from mgst.core.scheduler import Scheduler
from mgst.model import Bag, Experiment, Job
from mgst.streams import Purpose, python_random
from mgst.testbed.experiment_codec import from_plain
from mgst.testbed.journal import Journal
from mgst.testbed.store import FILENAME, RunStore, StoreError

# The core inputs the mapper records, by method name; the first argument is always model time.
CORE_INPUTS = frozenset({"start", "job_arrived", "bag_arrived", "machine_ready", "replica_done", "replica_failed",
                         "replica_computing", "replica_checkpoint", "cpu_share_changed", "machine_availability",
                         "machine_up",
                         "machine_down", "timer_fired", "machine_silent", "machine_heard"})


def make_core(experiment: Experiment, seed: int) -> Scheduler:
    """The core and policy of a testbed run, as the mapper makes them (replication 0's policy stream)."""
    policy = policies.build_policy(experiment, python_random(seed, 0, Purpose.POLICY))
    return Scheduler(experiment.classes, experiment.machines, policy, experiment.staging)


def encode_args(method: str, args: tuple) -> tuple:
    """A core input's arguments as plain values for the store."""
    if method == "job_arrived":
        (job,) = args
        return (tuple(job),)
    if method == "bag_arrived":
        (bag,) = args
        return ((bag.id, bag.submitted, [tuple(t) for t in bag.tasks], [list(a) for a in bag.attributes]),)
    return args


def call_core(core: Scheduler, method: str, now: float, args: tuple) -> list:
    if method == "job_arrived":
        return core.job_arrived(now, Job(*args[0]))
    if method == "bag_arrived":
        arg = args[0]
        if isinstance(arg, Bag):
            return core.bag_arrived(now, arg)
        bid, submitted, tasks, attributes = arg
        bag = Bag(bid, submitted, tuple(Job(*t) for t in tasks), tuple((k, v) for k, v in attributes))
        return core.bag_arrived(now, bag)
    return getattr(core, method)(now, *args)


@dataclass(slots=True)
class Replayed:
    """A run as its store has it."""

    experiment: Experiment
    meta: dict[str, Any]
    store: RunStore
    journal: Journal
    core: Scheduler
    model_time: float  # the core's clock when the log ends


def open_store(folder: Path, journal: str = FILENAME) -> tuple[RunStore, dict[str, Any], Experiment]:
    """The store of a run directory (the file ``journal`` in it), its settings and its experiment (from the copy
    kept in the store)."""
    store = RunStore(folder / journal, create=False)
    try:
        meta = store.meta()
        missing = {"experiment", "seed", "time_unit"} - meta.keys()
        if missing:
            raise StoreError(f"{store.path}: the run's settings are incomplete (no {', '.join(sorted(missing))})")
        experiment = from_plain(meta["experiment"])
        policies.import_modules(meta.get("imports", []))
    except BaseException:
        store.close()
        raise
    return store, meta, experiment


def replay(folder: Path, journal: str = FILENAME) -> Replayed:
    """Open ``folder``'s store (the file ``journal`` in it) and rebuild its journal and core. The caller closes
    ``.store``."""
    store, meta, experiment = open_store(folder, journal)
    try:
        journal = Journal(experiment)
        core = make_core(experiment, meta["seed"])
        for kind, args in store.events():
            if kind == "core":
                method, now, margs = args
                if method not in CORE_INPUTS:
                    raise StoreError(f"{store.path}: unknown core input {method!r}")
                call_core(core, method, now, margs)
            elif not journal.apply(kind, args):
                raise StoreError(f"{store.path}: unknown event {kind!r}")
        journal.store = store
    except BaseException:
        store.close()
        raise
    return Replayed(experiment, meta, store, journal, core, core.now)
