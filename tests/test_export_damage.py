"""`mgst export` of a run whose journal settings were edited or damaged, or into a folder where an output file
cannot go: one error line naming what is wrong, exit 2; never a traceback (it was JSONDecodeError,
ZeroDivisionError, IsADirectoryError)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ('[workload]\narrival_rates = [6.0]\n[machines]\nrates = [[4.0, 4.0]]\n[policy]\nname = "fcfs"\n'
              "[testbed]\ntime_unit = 0.1\nduration = 1.0\n")


def mgst(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=180,
                          cwd=ROOT, env={**os.environ, "MGST_PURE": "1"})


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """A finished local run of a second (its journal and files)."""
    where = tmp_path_factory.mktemp("export")
    (where / "exp.toml").write_text(EXPERIMENT)
    out = where / "run"
    p = mgst("run", str(where / "exp.toml"), "--out", str(out), "--insecure", "--quiet", "--json", "--no-live")
    assert p.returncode == 0, p.stderr[-2000:]
    return out


def copy_with(run: Path, to: Path, **settings: str) -> Path:
    """A copy of the run's journal, each named setting's stored text replaced (as an edit or damage would)."""
    to.mkdir()
    shutil.copy(run / "journal.sqlite", to / "journal.sqlite")
    db = sqlite3.connect(to / "journal.sqlite")
    with db:
        for key, text in settings.items():
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, text))
    db.close()
    return to


def one_error_line(p: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert "Traceback" not in p.stderr, p.stderr[-3000:]
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mgst: error: "), p.stderr
    assert all(f in lines[0] for f in fragments), (fragments, lines[0])


def test_the_run_exports(finished_run: Path, tmp_path: Path) -> None:
    p = mgst("export", str(copy_with(finished_run, tmp_path / "same")), "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["mode"] == "testbed"


def _instants(folder: Path) -> list[float]:
    """jobs.csv's Date Submitted and machine_periods.csv's Up From, as instants: read at summary.json's UTC offset."""
    import csv  # noqa: PLC0415
    import datetime as dt  # noqa: PLC0415

    offset = json.loads((folder / "summary.json").read_text())["local_time_utc_offset"]
    stamps = []
    for name, column in (("jobs.csv", "Date Submitted"), ("machine_periods.csv", "Up From")):
        with open(folder / name, newline="") as f:
            stamps += [row[column] for row in csv.DictReader(f)]
    assert stamps
    return [dt.datetime.fromisoformat(t + offset).timestamp() for t in stamps]


def test_local_times_keep_the_run_s_utc_offset_wherever_and_whenever_it_is_exported(finished_run: Path,
                                                                                     tmp_path: Path) -> None:
    """A run's local times are at one UTC offset, its head node's at its start, recorded in its journal: an export
    under another time zone wrote them in its own (and a run through a change of daylight saving had two offsets
    under the one summary.json gave: responses an hour long)."""
    written = _instants(finished_run)
    run = copy_with(finished_run, tmp_path / "kolkata", utc_offset_s="19800")  # (as a head node at +05:30 records)
    files = {}
    for tz in ("UTC", "America/Sao_Paulo", "XST-5XDT,M3.2.0,M11.1.0"):
        p = subprocess.run([sys.executable, "-m", "mgst", "export", str(run), "--json"], capture_output=True,
                           text=True, timeout=180, cwd=ROOT, env={**os.environ, "MGST_PURE": "1", "TZ": tz})
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads((run / "summary.json").read_text())["local_time_utc_offset"] == "+05:30"
        assert _instants(run) == pytest.approx(written, abs=1e-6)  # the same instants as the run wrote
        files[tz] = [(run / name).read_bytes() for name in ("jobs.csv", "machine_periods.csv", "machines.csv")]
    assert files["UTC"] == files["America/Sao_Paulo"] == files["XST-5XDT,M3.2.0,M11.1.0"]


@pytest.mark.parametrize(("setting", "text", "said"), [
    ("network", "{not json", "the run's setting 'network' is not JSON"),
    ("time_unit", "0", "the run's setting 'time_unit' is '0', not a number of seconds in [0.001, 86400]"),
    ("time_unit", "-1e308", "'time_unit' is '-1e+308'"),
    ("time_unit", '"fast"', "'time_unit' is 'fast'"),
    ("duration", "0", "the run's setting 'duration' is '0'"),
    ("seed", "1.5", "the run's setting 'seed' is '1.5', not a whole number >= 0"),
    ("network", "[1, 2]", "the run's setting 'network' is '[1, 2]', not a table"),
    ("drops", '{"a": "x"}', "the run's setting 'drops'"),
    ("imports", "[1]", "the run's setting 'imports'"),
    ("inputs", '["a"]', "the run's setting 'inputs'"),
    ("decision_time", '{"inputs": 3, "total_s": -1, "longest_s": 0}', "the run's setting 'decision_time'"),
    ("decision_time", '{"inputs": 3}', "the run's setting 'decision_time'"),
    ("utc_offset_s", "90000", "the run's setting 'utc_offset_s' is '90000', not a UTC offset in seconds"),
    ("utc_offset_s", "\"+05:30\"", "the run's setting 'utc_offset_s'"),
])
def test_a_damaged_setting_is_one_error_line_naming_it(finished_run: Path, tmp_path: Path, setting, text, said):
    folder = copy_with(finished_run, tmp_path / "damaged", **{setting: text})
    one_error_line(mgst("export", str(folder)), str(folder / "journal.sqlite"), said, "edited or damaged")
    assert not (folder / "summary.json").exists()


def test_an_output_file_that_is_a_folder_is_one_error_line(finished_run: Path, tmp_path: Path) -> None:
    folder = copy_with(finished_run, tmp_path / "blocked")
    (folder / "summary.json").mkdir()
    one_error_line(mgst("export", str(folder)), f"cannot write {folder / 'summary.json'}: Is a directory",
                   f"'mgst export {folder}' writes its files again")


def test_a_report_page_that_cannot_be_written_is_one_line_and_the_results_are_written(finished_run: Path,
                                                                                     tmp_path: Path) -> None:
    """report.html a folder: the results are written (exit 0), the page's failure is one line saying why (it was a
    traceback), and no part-written file is left behind."""
    folder = copy_with(finished_run, tmp_path / "page")
    (folder / "report.html").mkdir()
    p = mgst("export", str(folder), "--json")
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    said = [line for line in p.stderr.splitlines() if "report.html could not be written" in line]
    assert len(said) == 1 and "directory" in said[0], p.stderr
    assert (folder / "summary.json").is_file() and not list(folder.glob("*.part*"))


OVERLAY = {"tech": {"max_hosts": 4, "testbed": {"requests": 6, "most_up": 4, "started": 6, "lapsed": 0},
                    "simulation": {"requests": 5, "most_up": 4}}}


@pytest.mark.parametrize("written, kept", [
    ({"overlay": OVERLAY}, OVERLAY),
    ({"overlay": None}, None),
    ({}, None),
    ({"overlay": {"tech": {**OVERLAY["tech"], "max_hosts": -1}}}, None),
    ({"overlay": {"tech": {"max_hosts": 4, "testbed": {"requests": 6}, "simulation": {}}}}, None),
    ({"overlay": ["tech"]}, None),
    ([1, 2], None),
])
def test_an_export_keeps_the_overlay_section_the_run_wrote_if_it_is_one(tmp_path: Path, written, kept, caplog):
    from mgst.testbed.export import recorded_overlay

    path = tmp_path / "summary.json"
    path.write_text(json.dumps(written))
    assert recorded_overlay(path) == kept
    assert recorded_overlay(tmp_path / "absent.json") is None
    path.write_text("{not json")
    assert recorded_overlay(path) is None and "not read" in caplog.text


@pytest.mark.parametrize(("edit", "said"), [
    (lambda e: {}, "the run's setting 'experiment' is not an experiment (no 'testbed')"),
    (lambda e: {**e, "machines": [m[:2] for m in e["machines"]]}, "'experiment' is not an experiment"),
    (lambda e: {**e, "classes": []}, "does not make a core (ValueError: machine 'M1' has 1 rates"),
    (lambda e: {**e, "policy": {"name": "nope", "options": {}}}, "(KeyError: unknown policy 'nope'"),
    (lambda e: {**e, "policy": {"name": "fcfs", "options": {"x": 1}}}, "the run's experiment does not make a core"),
    (lambda e: {**e, "failures": {"kind": "zzz"}}, "is not an experiment (ValueError: unknown availability kind"),
])
def test_an_experiment_that_is_not_one_is_one_error_line(finished_run: Path, tmp_path: Path, edit, said):
    """The experiment stored in the journal was decoded, and its core made, unchecked: a KeyError or ValueError with
    its traceback, in `mgst export` and `mgst simulate --overheads` alike."""
    db = sqlite3.connect(finished_run / "journal.sqlite")
    stored = json.loads(db.execute("SELECT value FROM meta WHERE key = 'experiment'").fetchone()[0])
    db.close()
    folder = copy_with(finished_run, tmp_path / "damaged", experiment=json.dumps(edit(stored)))
    one_error_line(mgst("export", str(folder)), str(folder / "journal.sqlite"), said, "edited or damaged")
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    one_error_line(mgst("simulate", str(exp), "--overheads", str(folder), "--horizon", "2", "--warmup", "0",
                        "--replications", "1"), "--overheads", said, "edited or damaged")


CHANGED_UNDER_THE_RUN = """
import sys
import mgst.testbed.beside as beside
from mgst.cli import main

def changed_under_the_run(*args):
    raise ImportError("cannot import name 'Widget' from 'mgst.testbed.gone'")

setattr(beside, sys.argv[1], changed_under_the_run)
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("where", ["summarize_testbed", "write_testbed_outputs"])
def test_results_that_fail_to_be_written_are_one_line_and_the_journal_writes_them_later(
        finished_run: Path, tmp_path: Path, where: str) -> None:
    """Writing a run's results fails with something other than an OSError (a bug, or the installed mgst changed
    under a long run: a module imported only at its end is not the one it started with): one error line naming
    the failure and the way back (`mgst export`), exit 2, not a traceback; `-vv` shows where it failed; the journal
    is untouched and writes the results once the failure is gone."""
    folder = copy_with(finished_run, tmp_path / "changed")
    journal = (folder / "journal.sqlite").read_bytes()

    def failing(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", CHANGED_UNDER_THE_RUN, where, *args], capture_output=True,
                              text=True, timeout=180, cwd=ROOT, env={**os.environ, "MGST_PURE": "1"})

    p = failing("export", str(folder))
    one_error_line(p, f"mgst: error: the results of {folder} could not be written (ImportError: cannot import name "
                      f"'Widget' from 'mgst.testbed.gone'); the journal keeps the run: 'mgst export {folder}' writes "
                      "its files again")
    p = failing("-vv", "export", str(folder))
    assert p.returncode == 2 and "Traceback" in p.stderr and "changed_under_the_run" in p.stderr, p.stderr[-2000:]
    assert (folder / "journal.sqlite").read_bytes() == journal and not (folder / "summary.json").exists()
    p = mgst("export", str(folder), "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["mode"] == "testbed", p.stderr[-2000:]
