"""Rebuilds a testbed run from its journal store: the journal, and the scheduling core by replaying its inputs.

The core is a deterministic state machine and its policy draws from a seeded
stream, so feeding a fresh core the inputs the mapper recorded, in order, at
the model times recorded, rebuilds exactly the state the dead mapper had:
the same queues, replicas, replica ids and timers. ``mgst export`` and
``mgst mapper --resume`` both start here.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgst import policies
from mgst.core.decisions import InputError
from mgst.core.scheduler import Scheduler
from mgst.model import Experiment
from mgst.policies.failure import PolicyFailed, PolicyStuck
from mgst.streams import Purpose, python_random
from mgst.testbed.core_events import UnknownEvent, from_legacy, from_plain
from mgst.testbed.departures import Departures
from mgst.testbed.experiment_codec import from_plain as experiment_from_plain
from mgst.testbed.journal import Journal
from mgst.testbed.policy_failure import handled
from mgst.testbed.run_settings import check_settings
from mgst.testbed.store import FILENAME, RunStore, StoreError

log = logging.getLogger(__name__)


def make_core(experiment: Experiment, seed: int) -> Scheduler:
    """The core and policy of a testbed run, as the mapper makes them (replication 0's policy stream)."""
    policy = policies.build_policy(experiment, python_random(seed, 0, Purpose.POLICY))
    return Scheduler(experiment.classes, experiment.machines, policy, experiment.staging)


@dataclass(slots=True)
class Replayed:
    """A run as its store has it."""

    experiment: Experiment
    meta: dict[str, Any]
    store: RunStore
    journal: Journal
    core: Scheduler
    model_time: float  # the core's clock when the log ends
    # What the core raised at the input where the run's policy failed (the replay stops feeding it there: the mapper
    # stopped the run), None if it did not fail.
    policy_failure: str | None = None
    # Where the replayed core first decided otherwise than the run's (mgst.testbed.departures), said; None if every
    # decision the run recorded is the replay's, and every one of the replay's was recorded.
    diverged: str | None = None


def open_store(folder: Path, journal: str = FILENAME) -> tuple[RunStore, dict[str, Any], Experiment]:
    """The store of a run directory (the file ``journal`` in it), its settings and its experiment (from the copy
    kept in the store)."""
    store, meta, experiment, _ = _open(folder, journal)
    return store, meta, experiment


def _open(folder: Path, journal: str) -> tuple[RunStore, dict[str, Any], Experiment, Scheduler]:
    """open_store, and the fresh core its experiment makes (checked so: one that makes none was not a mapper's)."""
    store = RunStore(folder / journal, create=False)
    try:
        meta = store.meta()
        missing = {"experiment", "seed", "time_unit", "duration"} - meta.keys()
        if missing:
            raise StoreError(f"{store.path}: the run's settings are incomplete (no {', '.join(sorted(missing))})")
        check_settings(meta, str(store.path))
        experiment = _experiment(meta["experiment"], store.path)
        _import_policies(meta.get("imports", []), store.path)
        try:  # (the experiment a mapper wrote makes a core: one that does not was written by someone else)
            core = make_core(experiment, meta["seed"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise StoreError(f"{store.path}: the run's experiment does not make a core ({_said(e)}): the journal was "
                             "edited or damaged, or the policy's code changed since the run") from None
    except BaseException:
        store.close()
        raise
    return store, meta, experiment, core


def _import_policies(modules: list[str], path: Path) -> None:
    """The modules the run imported for its policies (``--import``), imported again; StoreError saying which and
    how if one is not importable here (a replay needs the policy's code, from Python's path, as the run did)."""
    for module in modules:
        try:
            policies.import_modules([module])
        except Exception as e:  # noqa: BLE001 (the module's own error, said in one line)
            raise StoreError(f"{path}: the run imported the module {module!r} for its policy, which does not import "
                             f"here ({type(e).__name__}: {e}): run this with the module's folder on Python's path "
                             f"(PYTHONPATH=FOLDER), as the run was") from None


def _experiment(plain: Any, where: Path) -> Experiment:
    """The experiment of a run's settings; StoreError if they are not one (the journal was edited or damaged)."""
    try:
        return experiment_from_plain(plain)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        said = _said(e, decoding=True)
        raise StoreError(f"{where}: the run's setting 'experiment' is not an experiment ({said}): the journal was "
                         "edited or damaged") from None


def _said(e: BaseException, decoding: bool = False) -> str:
    """An exception in one short line (decoding, a KeyError's argument is a key that is not there)."""
    if decoding and type(e) is KeyError and e.args:
        text = f"no {e.args[0]!r}"
    else:
        text = f"{type(e).__name__}: {e.args[0] if type(e) is KeyError and e.args else e}"
    return " ".join(text.split())[:200]


def _stuck(meta: dict[str, Any]) -> tuple[int | None, float]:
    """The seq of the input whose decision did not return in the run (its mapper's ``policy_stuck``: ended by a
    third interrupt), and how long it held the run; (None, nan) if none, or if the journal's note is not one."""
    stuck = meta.get("policy_stuck")
    if not isinstance(stuck, dict):
        return None, math.nan
    seq, held = stuck.get("seq"), stuck.get("held_s")
    if type(seq) is not int or seq < 1:
        return None, math.nan
    return seq, float(held) if type(held) in (int, float) else math.nan


def replay(folder: Path, journal: str = FILENAME) -> Replayed:
    """Open ``folder``'s store (the file ``journal`` in it) and rebuild its journal and core. The caller closes
    ``.store``."""
    store, meta, experiment, core = _open(folder, journal)
    try:
        journal = Journal(experiment)
        failure: PolicyFailed | None = None
        after_failure = 0  # inputs journalled after the failure (a mapper of before PolicyFailed went on), not fed
        departures = Departures(experiment, core.policy.name)  # (the replay's decisions against the run's records)
        stuck_seq, held = _stuck(meta)
        for seq, (kind, args) in enumerate(store.events(), 1):  # (seqs run 1, 2, ... without a gap: events() checks)
            if kind == "event" or kind == "core":  # a typed core event (an older journal: a method's name)
                name, now, fields = args
                try:
                    event = from_plain(name, fields) if kind == "event" else from_legacy(name, fields)
                except UnknownEvent as e:
                    raise StoreError(f"{store.path}: {e}") from None
                if failure is not None:
                    after_failure += 1
                    continue
                if seq == stuck_seq:  # the policy did not return from it in the run: not fed again, to hang again
                    failure = PolicyFailed(core.policy.name, type(event).__name__, now, PolicyStuck(
                        f"it did not return in {held:.0f} s, and the run was ended inside it (a third interrupt)"))
                    continue
                try:
                    outputs = handled(core, now, event)
                except InputError:  # (refused then as now, before it changed anything: the mapper went on too)
                    outputs = []
                except PolicyFailed as e:
                    failure = e
                    continue
                departures.fed(event, now, outputs)
            else:
                if failure is None:
                    departures.recorded(kind, args)
                if not journal.apply(kind, args):
                    raise StoreError(f"{store.path}: unknown event {kind!r}")
        if failure is None:
            departures.finish()
        if failure is not None:
            log.warning("%s: %s; the run is rebuilt up to there%s", store.path, failure,
                        f" ({after_failure} later inputs left out)" if after_failure else "")
        journal.store = store
    except BaseException:
        store.close()
        raise
    return Replayed(experiment, meta, store, journal, core, core.now, None if failure is None else str(failure),
                    departures.found)
