"""The journal store: events come back in order and as stored; a crash loses only what was not committed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mgst.testbed.store import RunStore, StoreError


def test_events_round_trip_in_order_with_tuples(tmp_path):
    s = RunStore(tmp_path / "j.sqlite", create=True)
    s.set_meta(seed=3, experiment={"name": "x"})
    s.append("core", ("timer_fired", 1.5, (("resolve", 2),)))
    s.append("arrive", (0, 1, 0.25, 1.0, None, 1e9))
    s.commit()
    s.close()
    s = RunStore(tmp_path / "j.sqlite", create=False)
    assert s.meta()["seed"] == 3
    assert list(s.events()) == [("core", ("timer_fired", 1.5, (("resolve", 2),))),
                                ("arrive", (0, 1, 0.25, 1.0, None, 1e9))]
    s.close()


def test_a_run_directory_is_not_overwritten_and_a_foreign_file_is_refused(tmp_path):
    RunStore(tmp_path / "j.sqlite", create=True).close()
    with pytest.raises(StoreError, match="exists"):
        RunStore(tmp_path / "j.sqlite", create=True)
    (tmp_path / "other").write_text("not a database, just text " * 100)
    with pytest.raises(StoreError, match="not a journal"):
        RunStore(tmp_path / "other", create=False)


def test_an_unstorable_event_is_a_clear_error(tmp_path):
    s = RunStore(tmp_path / "j.sqlite", create=True)
    with pytest.raises(StoreError, match="timer keys"):
        s.append("core", ("timer_fired", 1.0, (frozenset({1}),)))
    s.close()


def test_committed_events_survive_sigkill_and_uncommitted_ones_vanish_whole(tmp_path):
    """A child commits 1,000 events, appends 500 more without committing, then is SIGKILLed."""
    path = tmp_path / "j.sqlite"
    child = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from mgst.testbed.store import RunStore\n"
        f"s = RunStore(Path({str(path)!r}), create=True)\n"
        "for i in range(1000): s.append('tick', (i,))\n"
        "s.commit()\n"
        "for i in range(500): s.append('tick', (1000 + i,))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    p = subprocess.run([sys.executable, "-c", child], timeout=60)
    assert p.returncode == -9
    s = RunStore(path, create=False)
    assert [args[0] for _, args in s.events()] == list(range(1000))
    s.close()
