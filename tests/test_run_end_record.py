"""A run's end is recorded last: a journal that says "ended" holds every event, and a write that fails on the way
leaves a run that resumes (exit 75, "paused"), not one taken for finished."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers import SMALL_TOML as SMALL

from mgst.config.experiment import load_experiment
from mgst.testbed import store as store_module
from mgst.testbed.local_run import run_local
from mgst.testbed.resume import run_is_over
from mgst.testbed.store import JournalWriteError, RunStore


def test_the_end_settings_are_written_all_or_none(tmp_path: Path) -> None:
    """The disk fills while the end is recorded (the second setting fails): no setting of it is kept, so the run
    is not taken for finished (run_is_over reads "drops" too, the end mark of older journals)."""
    path = tmp_path / "journal.sqlite"
    store = RunStore(path, create=True)
    with sqlite3.connect(path) as db:  # the write of "aborted" fails, as a full disk would
        db.execute("CREATE TRIGGER full BEFORE INSERT ON meta WHEN NEW.key = 'aborted' "
                   "BEGIN SELECT RAISE(FAIL, 'database or disk is full'); END")
    with pytest.raises(JournalWriteError):
        store.set_meta(drops={}, aborted=False, ended=1.0)
    store.close()
    reopened = RunStore(path, create=False)
    try:
        meta = reopened.meta()
    finally:
        reopened.close()
    assert not run_is_over(meta), meta


def test_the_end_is_recorded_after_every_event_is_committed(tmp_path: Path, monkeypatch, no_children_left) -> None:
    """A real (small) run: when the mapper writes its end mark, nothing is left uncommitted; else a commit that
    fails after it (a full disk: exit 75, "continue it with --resume") leaves a journal that --resume refuses as
    finished."""
    exp = tmp_path / "small.toml"
    exp.write_text(SMALL)
    seen: list[int] = []
    set_meta = RunStore.set_meta

    def recording(self: RunStore, **values) -> None:
        if "ended" in values:
            seen.append(self.uncommitted)
        set_meta(self, **values)

    monkeypatch.setattr(store_module.RunStore, "set_meta", recording)
    result = run_local(load_experiment(exp), tmp_path / "run", insecure=True)
    assert result.run.journal.jobs
    assert seen == [0]
