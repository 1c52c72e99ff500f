"""A new run's directory: the journal a mapper creates there, removed again if the run never began."""

from __future__ import annotations

import logging
from pathlib import Path

from mgst.testbed.run_lock import LOCK_FILE
from mgst.testbed.store import FILENAME

log = logging.getLogger("mgst.testbed.mapper")

# SQLite's companions of a journal in WAL mode (and of a rollback journal).
JOURNAL_SUFFIXES = ("", "-wal", "-shm", "-journal")
# The results a run writes beside its journal (mgst.testbed.beside.finish_outputs): a new run in a folder that holds
# any of them (a simulation's, or a run's whose journal was moved away) would overwrite them. (Not pullers.log: a
# start that failed leaves it, and must not refuse the retry.) TABLE_FILES are written by every run; the others by
# some: bags.csv (bags), comparison.png and simulation_jobs.csv (with the simulation beside), report.html,
# grid_sizes.csv (GridBot's overlay).
TABLE_FILES = ("jobs.csv", "machines.csv", "machine_periods.csv", "summary.csv", "summary.json")
SIMULATION_JOBS = "simulation_jobs.csv"  # the simulation's replication 0, the run's jobs, as `mgst simulate --jobs`
RESULT_FILES = (*TABLE_FILES, "bags.csv", "comparison.png", SIMULATION_JOBS, "report.html", "grid_sizes.csv")


def results_there(out: Path) -> list[str]:
    """The names of RESULT_FILES that ``out`` holds."""
    return [name for name in RESULT_FILES if (out / name).exists()]


class NewRunDir:
    """The directory ``out`` of a run about to be created: which of its folders do not exist yet (the mapper makes
    them), so that :meth:`discard` removes only what this run made, and only what holds no job: a start that failed
    (a bind refused, pullers that never came, Ctrl-C while waiting) leaves nothing that would refuse the retry."""

    def __init__(self, out: Path):
        self.out = out
        self.journal = out / FILENAME
        self.made: list[Path] = []  # the folders this run creates, deepest first
        for folder in (out, *out.parents):
            if folder.exists():
                break
            self.made.append(folder)

    def discard(self) -> None:
        """Remove the journal (a run that never began: no job in it) and the folders made for it, if empty."""
        for suffix in JOURNAL_SUFFIXES:
            Path(f"{self.journal}{suffix}").unlink(missing_ok=True)
        (self.out / LOCK_FILE).unlink(missing_ok=True)  # (its lock goes with the store, closed before this)
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:  # not empty (e.g. pullers.log), or gone: kept
                break
        log.info("the run never began: its journal %s is removed", self.journal)

    def discard_empty_log(self, log_file: Path) -> None:
        """Once the pullers of a run that never began have stopped: their log if they wrote nothing to it, then the
        folders made for the run if that left them empty (discard leaves a folder that holds the log)."""
        if self.journal.exists():  # (the run began after all: everything stays)
            return
        if log_file.is_file() and log_file.stat().st_size == 0:
            log_file.unlink()
        for folder in self.made:
            try:
                folder.rmdir()
            except OSError:  # not empty (a log with something in it), or gone: kept
                break
