"""A run directory's results from its journal alone: the CSVs and summary, for `mgst export` and after a crash."""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from mgst.bounded_read import read_text
from mgst.testbed.beside import Beside, finish_outputs
from mgst.testbed.decision_time import DecisionTime
from mgst.testbed.replay import replay
from mgst.testbed.resume import run_is_over
from mgst.testbed.run_lock import run_locked
from mgst.testbed.run_result import TestbedRun, finish_run
from mgst.testbed.store import FILENAME, StoreError


class RunNeverStarted(StoreError):
    """A journal whose run never began (its pullers never all registered): no job, nothing to export."""


log = logging.getLogger(__name__)

# A summary.json larger than this is not read for its overlay section (a run's is a few KiB).
SUMMARY_MAX_BYTES = 16 << 20
# The overlay section's fields (mgst.testbed.overlay.side_by_side): per grid, its maximum and each side's counts.
OVERLAY_FIELDS = {"testbed": ("requests", "most_up", "started", "lapsed"), "simulation": ("requests", "most_up")}

# A journal written to within this many seconds, and not closed, is taken for a run still going (its mapper
# notes every mapper.TICK = 0.5 s that it is alive): older, its mapper died or was killed.
LIVE_WITHIN_S = 10.0


def load_run(folder: Path, journal: str = FILENAME) -> TestbedRun:
    """The run recorded in ``folder``'s journal (the file ``journal`` in it), as far as it was committed."""
    rp = replay(folder, journal)
    try:
        meta, j = rp.meta, rp.journal
        if rp.policy_failure is not None and run_is_over(meta) and "policy_failure" not in meta:
            raise StoreError(f"{rp.store.path}: the journal does not replay as the run went: {rp.policy_failure}, "
                             "where the run, which ended, had no such failure: the policy's code (or mgst's) changed "
                             "since, or it does not decide the same from the same inputs; what the run wrote is left "
                             "as it is")
        if rp.diverged is not None:
            raise StoreError(f"{rp.store.path}: the journal does not replay as the run went: {rp.diverged}; what "
                             "the run wrote is left as it is")
        tu = meta["time_unit"]
        end = j.last_wall if j.last_wall is not None else meta.get("created", 0.0)
        t0 = j.start if j.start is not None else end
        generation_end = t0 + j.generation_end * tu if j.generation_end is not None else end
        run = finish_run(rp.experiment, rp.core, j, tu, t0, generation_end, end, Counter(meta.get("drops", {})),
                         meta["duration"] / tu, meta["seed"], meta.get("security", "?"), meta.get("aborted", False),
                         meta.get("utc_offset_s"))
        run.resumes = meta.get("resumes", [])
        run.policy_failure = meta.get("policy_failure", rp.policy_failure)
        run.imports = tuple(meta.get("imports", []))
        run.network = meta.get("network")
        run.decision_time = DecisionTime.from_plain(meta.get("decision_time"))
        run.closed = "drops" in meta  # the mapper's last words (Mapper._run): a journal without them was not closed
        return run
    finally:
        rp.store.close()
        rp.journal.store = None


def not_closed(run: TestbedRun, now: float | None = None, folder: Path | None = None, salvaged: bool = False) -> str:
    """What a run whose journal has no end is: going on, or left by a mapper that died. Its folder's lock says
    which (mgst.testbed.run_lock); a run of before locks is taken for going on if written to LIVE_WITHIN_S ago.
    ``salvaged``: the journal read is a salvage's copy (mgst.testbed.salvage), whose damage cost the run's end."""
    if salvaged:
        return ("the salvaged journal stops at the damage, before the run's end: these results stop there (the "
                "damaged journal itself cannot be resumed)")
    ago = (time.time() if now is None else now) - run.end
    locked = run_locked(folder) if folder is not None else None
    if locked or (locked is None and ago <= LIVE_WITHIN_S):
        return (f"the run is still going (its mapper wrote to the journal {max(ago, 0.0):.0f} s ago): these results "
                "stop where the journal does")
    # (a folder holding the pullers' log is `mgst run`'s, which starts them again; a mapper's pullers reconnect to it)
    local = folder is not None and (folder / "pullers.log").is_file()
    again = "'mgst run FILE --resume DIR'" if local else "'mgst mapper FILE --resume DIR' (with its --keys)"
    return (f"the run was not closed: its mapper stopped writing {ago:.0f} s ago without ending it (killed, or its "
            f"machine went down?); these results stop where the journal does, and {again} continues it")


def export_run(folder: Path, journal: str = FILENAME) -> Beside:
    """Write ``folder``'s outputs (mgst.testbed.beside.finish_outputs: the CSVs, the summary and, for a closed run,
    the simulation beside it) from its journal (the file ``journal`` in it); RunNeverStarted if its run never began."""
    run = load_run(folder, journal)
    if run.journal.start is None:
        if journal != FILENAME:  # (a salvaged copy: the damage may have taken the run's start with it)
            raise RunNeverStarted(f"{folder / journal}: the events recovered do not reach the run's start (all its "
                                  "pullers registered): there is nothing to export")
        raise RunNeverStarted(f"{folder / journal}: the run never started (its pullers did not all register, so no "
                              "job was generated): there is nothing to export")
    run.overlay = recorded_overlay(folder / "summary.json")
    # (a run not closed is not simulated: its jobs in flight have no counterpart in a simulation, which drains)
    return finish_outputs(run, folder, simulate=run.closed)


def recorded_overlay(path: Path) -> dict[str, Any] | None:
    """The overlay section (grids that grew with GridBot's overlay, testbed and simulation) of the summary the run
    wrote at ``path``, to be written again: the overlay's requests and grants are not in the journal, so an export
    keeps what the run recorded. None where there is no such file or section, or it is not one (logged)."""
    if not path.is_file():  # (none, or not a file: writing the new summary there says what is wrong)
        return None
    try:
        data = json.loads(read_text(path, SUMMARY_MAX_BYTES))
    except (OSError, ValueError) as e:
        log.warning("%s: not read (%s): the exported summary has no overlay section", path, e)
        return None
    overlay = data.get("overlay") if isinstance(data, dict) else None
    if overlay is None:
        return None
    if not _is_overlay(overlay):
        log.warning("%s: its overlay section is not one mgst writes: the exported summary has none", path)
        return None
    return overlay


def _is_overlay(overlay: object) -> bool:
    def count(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    return isinstance(overlay, dict) and all(
        isinstance(name, str) and isinstance(grid, dict) and count(grid.get("max_hosts"))
        and all(isinstance(grid.get(side), dict) and all(count(grid[side].get(k)) for k in keys)
                for side, keys in OVERLAY_FIELDS.items())
        for name, grid in overlay.items())
