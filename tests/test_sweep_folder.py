"""A sweep's folder: one sweep at a time in it (two at once each rewrote sweep.csv with its own rows, and one's were
lost), a folder removed while the sweep runs stops it saying so, and a file of it that cannot be written is one error
line, not a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sweep_fake
from test_sweep import FILE, quick

from mgst.cli import main
from mgst.config import ConfigError
from mgst.process_pool import IN_FLIGHT_PER_WORKER
from mgst.sweep import SweepError, run_sweep
from mgst.sweep.folder_lock import one_sweep_at_a_time


def test_a_second_sweep_into_a_folder_in_use_is_refused_and_the_first_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with one_sweep_at_a_time(out):  # (a sweep running into out: another open of the lock file, as another process)
        with pytest.raises(ConfigError) as e:
            run_sweep(quick(), out, workers=1, cell_fn=sweep_fake.cell, plots=False)
        assert e.value.key == "--out" and f"another sweep is running into {out} (pid {os.getpid()})" in str(e.value)
        assert not (out / "sweep.csv").exists()  # (refused before anything was written)
    result = run_sweep(quick(), out, workers=1, cell_fn=sweep_fake.cell, plots=False)
    assert result.computed == len(quick().cells()) and not result.failed


def test_a_folder_removed_while_the_sweep_runs_stops_it_saying_so(tmp_path: Path) -> None:
    """It stops at the first row written after (the rows go to a file no longer there), not at its end."""
    out, calls = tmp_path / "out", tmp_path / "calls"
    calls.mkdir()
    with pytest.raises(SweepError, match=r"was removed while the sweep ran: .*run it again to start over"):
        run_sweep(quick(), out, workers=1, cell_fn=sweep_fake.RemovingFolder(str(out), str(calls)), plots=False)
    # (one worker, a few cells submitted to it ahead: those may have run too, none after)
    assert len(list(calls.iterdir())) <= 1 + IN_FLIGHT_PER_WORKER < len(quick().cells())


def test_a_file_of_the_folder_that_cannot_be_written_is_one_line(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """plots/ a file, where the sweep makes a folder: every cell is run and kept, then one error line naming it, exit
    1; the command again (plots/ a folder now) goes on from there, running nothing twice."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "plots").write_text("not a folder")
    assert main(["sweep", str(FILE), "--quick", "--out", str(out), "--cell", "sweep_fake:cell", "--workers", "1",
                 "--quiet"]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line.lower()]  # (an earlier test's -v may log INFO)
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith(f"mgst: error: cannot write {out / 'plots'}") and \
        f"the cells finished are kept in {out}/sweep.csv" in lines[0], lines[0]
    (out / "plots").unlink()
    assert main(["sweep", str(FILE), "--quick", "--out", str(out), "--cell", "sweep_fake:cell", "--workers", "1",
                 "--quiet"]) == 0
    assert f"{len(quick().cells())} done before, 0 run now" in capsys.readouterr().out


def test_each_command_that_runs_cells_is_recorded_and_a_new_mgst_is_warned_of(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    """sweep.json's 'runs': one entry for each command that ran cells in the folder (mgst's version, the sweep file's
    SHA-256, --quick), not compared when the sweep is resumed; a resume by another mgst version says so; a command
    with nothing left to run adds nothing."""
    import hashlib
    import json

    out = tmp_path / "out"
    args = ["sweep", str(FILE), "--quick", "--out", str(out), "--cell", "sweep_fake:cell", "--workers", "1", "--quiet",
            "--no-plots"]
    assert main([*args, "--only", "policy=rr"]) == 0
    runs = json.loads((out / "sweep.json").read_text())["runs"]
    assert len(runs) == 1 and runs[0]["quick"] is True
    assert runs[0]["sweep_sha256"] == hashlib.sha256(FILE.read_bytes()).hexdigest()
    assert runs[0]["mgst_version"] and runs[0]["started"].endswith("+00:00")
    made_by = {**runs[0], "mgst_version": "0.0.1-other"}  # the rest, as another mgst would resume it
    with caplog.at_level("WARNING", logger="mgst"):
        result = run_sweep(quick(), out, workers=1, cell_fn=sweep_fake.cell, plots=False, made_by=made_by,
                           cell_name="sweep_fake:cell")
    assert result.computed > 0 and result.skipped > 0
    warned = [r.getMessage() for r in caplog.records if "0.0.1-other" in r.getMessage()]
    assert len(warned) == 1 and f"computed by mgst {runs[0]['mgst_version']}, these by mgst 0.0.1-other" in warned[0]
    assert [r["mgst_version"] for r in json.loads((out / "sweep.json").read_text())["runs"]] == \
        [runs[0]["mgst_version"], "0.0.1-other"]
    assert main(args) == 0  # nothing left to run: no entry
    assert len(json.loads((out / "sweep.json").read_text())["runs"]) == 2
    capsys.readouterr()
