"""`mgst simulate`'s files: summary.csv always with --out, the per-job file only with --jobs, the same rows in
every format (csv, csv.gz, parquet), streamed from each replication rather than held in memory."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mgst import cli
from mgst.cli import main
from mgst.model import Experiment, FailureModel, JobClass, Machine, PolicySpec, SimulationSettings
from mgst.results import JOB_COLUMNS, JOB_EXTRA_COLUMNS, JOB_FORMATS, jobs_csv_size, write_jobs
from mgst.sim.replications import jobs_part, run_simulation

ROOT = Path(__file__).resolve().parents[1]
HIHI = ROOT / "experiments" / "hihi-mfd-fd.toml"
HEADER = list(JOB_COLUMNS + JOB_EXTRA_COLUMNS)


def awkward_experiment() -> Experiment:
    """Overloaded, with failures, and machine names CSV must quote: rows with every kind of field, empty
    ones (jobs unfinished at the drain limit) included."""
    names = ['fast, "M1"', "M2", "3"]
    return Experiment(
        name="awkward",
        classes=(JobClass("a", 2.0), JobClass("b", 1.5)),
        machines=tuple(Machine(n, (1.0, 0.7), a) for n, a in zip(names, (1.0, 0.5, 1.0))),
        policy=PolicySpec("fcfs"),
        failures=FailureModel(mean_up=8.0, mean_down=2.0),
        simulation=SimulationSettings(horizon=60.0, warmup=5.0, replications=2, seed=3),
    )


def text(row: tuple) -> list[str]:
    """A kept row as csv.writer writes it."""
    return ["" if v is None else str(v) for v in row]


def parquet_text(v) -> str:
    """A parquet value as the CSV has it."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6f}"
    return str(v)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """Rows kept in memory, and the same run's rows streamed to parts: (kept rows, parts, summary)."""
    exp = awkward_experiment()
    parts = tmp_path_factory.mktemp("parts")
    summary, results = run_simulation(exp, workers=1, keep_rows=True, jobs_dir=parts)
    kept = [row for r in results for row in r.rows]
    return kept, [jobs_part(parts, r) for r in range(summary.replications)], summary


def test_streamed_rows_are_the_kept_rows(simulated, tmp_path):
    kept, parts, summary = simulated
    assert summary.unfinished > 0 and len(kept) == summary.jobs_simulated  # empty fields are exercised
    path = tmp_path / "jobs.csv"
    size = write_jobs(path, "csv", parts)
    assert size == path.stat().st_size == jobs_csv_size(parts)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == HEADER
    assert rows[1:] == [text(r) for r in kept]
    assert any(r[HEADER.index("Server")] == 'fast, "M1"' for r in rows[1:])
    assert any(r[HEADER.index("Date Done")] == "" for r in rows[1:])
    assert not list(tmp_path.glob("*.partial"))


def test_every_format_holds_the_same_rows(simulated, tmp_path):
    _, parts, _ = simulated
    write_jobs(tmp_path / "jobs.csv", "csv", parts)
    plain = (tmp_path / "jobs.csv").read_bytes()
    write_jobs(tmp_path / "jobs.csv.gz", "csv.gz", parts)
    packed = (tmp_path / "jobs.csv.gz").read_bytes()
    assert gzip.decompress(packed) == plain
    write_jobs(tmp_path / "again.csv.gz", "csv.gz", parts)
    assert (tmp_path / "again.csv.gz").read_bytes() == packed  # no time stamp: same rows, same bytes
    csv_rows = list(csv.reader(io.StringIO(plain.decode("utf-8"), newline="")))

    pq = pytest.importorskip("pyarrow.parquet")
    write_jobs(tmp_path / "jobs.parquet", "parquet", parts)
    table = pq.read_table(tmp_path / "jobs.parquet")
    assert table.column_names == HEADER
    types = {f.name: str(f.type) for f in table.schema}
    assert types["ID"] == types["Attempts"] == "int64" and types["Date Done"] == types["Size"] == "double"
    assert types["Server"] == types["Counted"] == "string"
    columns = [table.column(c).to_pylist() for c in HEADER]
    parquet_rows = [[parquet_text(v) for v in row] for row in zip(*columns)]
    assert parquet_rows == csv_rows[1:]


def test_parallel_replications_write_the_same_file(simulated, tmp_path):
    _, parts, _ = simulated
    exp = awkward_experiment()
    parallel = tmp_path / "parts"
    parallel.mkdir()
    summary, results = run_simulation(exp, workers=2, jobs_dir=parallel)
    assert all(not r.rows for r in results)  # streamed, not kept
    write_jobs(tmp_path / "one.csv", "csv", parts)
    write_jobs(tmp_path / "two.csv", "csv", [jobs_part(parallel, r) for r in range(summary.replications)])
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_parts_removed_as_they_are_copied(simulated, tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    _, parts, _ = simulated
    copies = []
    for part in parts:
        copies.append(tmp_path / part.name)
        copies[-1].write_bytes(part.read_bytes())
    write_jobs(tmp_path / "kept", fmt, parts)
    write_jobs(tmp_path / "removed", fmt, copies, remove_parts=True)
    assert not any(c.exists() for c in copies)
    assert (tmp_path / "removed").read_bytes() == (tmp_path / "kept").read_bytes()


def test_no_rows_still_make_a_file(tmp_path):
    empty = tmp_path / "empty.part"
    empty.write_text("")
    write_jobs(tmp_path / "jobs.csv", "csv", [empty])
    assert (tmp_path / "jobs.csv").read_text(encoding="utf-8").splitlines() == [",".join(HEADER)]
    pq = pytest.importorskip("pyarrow.parquet")
    write_jobs(tmp_path / "jobs.parquet", "parquet", [empty])
    table = pq.read_table(tmp_path / "jobs.parquet")
    assert table.num_rows == 0 and table.column_names == HEADER


def test_cli_formats_are_the_writers_formats():
    assert cli.SIMULATE_JOB_FORMATS == tuple(JOB_FORMATS)


def mgst(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


SHORT = ("--horizon", "60", "--warmup", "5", "--replications", "2")


def test_out_alone_writes_no_jobs_file_and_says_how(tmp_path):
    p = mgst("simulate", str(HIHI), *SHORT, "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in tmp_path.iterdir()) == ["summary.csv"]
    assert "per-job records not written" in p.stderr and "--jobs" in p.stderr and "B as CSV" in p.stderr
    assert f"wrote summary.csv in {tmp_path}" in p.stdout


@pytest.mark.parametrize("fmt", ["csv", "csv.gz", "parquet"])
def test_jobs_option_writes_the_chosen_format(tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    p = mgst("simulate", str(HIHI), *SHORT, "--out", str(tmp_path), "--jobs", fmt, "--json")
    assert p.returncode == 0, p.stderr
    name = JOB_FORMATS[fmt]
    # nothing else left behind: no parts folder, no partial file
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted([name, "summary.csv"])
    rows = json.loads(p.stdout)["jobs_simulated"]
    assert f"{name}: about " in p.stderr and " rows expected" in p.stderr  # said before simulating
    assert f"{name}: {rows:,} rows, " in p.stderr  # and before writing
    if fmt != "csv":
        assert f"{name}: " in p.stderr and " written (" in p.stderr  # the compressed size, after
    assert "not written" not in p.stderr


def test_jobs_alone_means_csv_and_earlier_files_are_pointed_out(tmp_path):
    (tmp_path / "jobs.parquet").write_bytes(b"old")
    p = mgst("simulate", str(HIHI), *SHORT, "--out", str(tmp_path), "--jobs")
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "jobs.csv", newline="") as f:
        assert next(csv.reader(f)) == HEADER
    assert "jobs.parquet" in p.stderr and "earlier run" in p.stderr
    assert f"wrote jobs.csv and summary.csv in {tmp_path}" in p.stdout


def test_jobs_needs_out(capsys):
    assert main(["simulate", str(HIHI), *SHORT, "--jobs"]) == 2
    assert "--jobs needs --out" in capsys.readouterr().err


def test_parquet_without_pyarrow_names_the_extra(monkeypatch, capsys, tmp_path):
    import mgst.results  # noqa: PLC0415

    monkeypatch.setattr(mgst.results, "parquet_available", lambda: False)
    assert main(["simulate", str(HIHI), *SHORT, "--out", str(tmp_path), "--jobs", "parquet"]) == 2
    err = capsys.readouterr().err
    assert "pyarrow" in err and "mgst[parquet]" in err
    assert not list(tmp_path.iterdir())  # refused before anything ran


def test_a_killed_runs_parts_folder_is_removed_by_the_next_run_and_a_live_ones_kept(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=60)  # reaped: its pid names no process (until the system reuses it)
    dead = tmp_path / f".jobs-{child.pid}-k1ll3d"
    live = tmp_path / f".jobs-{os.getpid()}-wr1t1ng"  # this test process: alive
    other = tmp_path / ".jobs-notes-x"  # not a parts folder of ours
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "part-0.csv").write_text("id\n")
    p = mgst("simulate", str(HIHI), *SHORT, "--out", str(tmp_path), "--jobs")
    assert p.returncode == 0, p.stderr
    assert not dead.exists()
    assert f"removed {dead.name}" in p.stderr and f"pid {child.pid}" in p.stderr
    assert live.exists() and other.exists()
    assert (tmp_path / "jobs.csv").exists()


def test_jobs_right_before_the_file_means_csv_and_a_mistyped_format_still_fails(tmp_path, capsys):
    p = mgst("simulate", "--jobs", str(HIHI), *SHORT, "--out", str(tmp_path))
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "jobs.csv", newline="") as f:
        assert next(csv.reader(f)) == HEADER
    with pytest.raises(SystemExit):
        main(["simulate", "--jobs", "csvv", str(HIHI), "--out", str(tmp_path)])
    assert "invalid choice: 'csvv'" in capsys.readouterr().err


def test_a_run_too_short_for_any_job_says_so_instead_of_printing_nan(capsys):
    assert main(["simulate", str(HIHI), "--horizon", "1e-9", "--warmup", "0", "--replications", "2"]) == 0
    out = capsys.readouterr().out
    assert "nan" not in out.lower()
    overall = next(line for line in out.splitlines() if line.startswith("Overall"))
    assert overall.split()[1:3] == ["0", "n/a"]
    assert "no job completed after the warm-up" in out and "lengthen --horizon" in out
    assert main(["simulate", str(HIHI), "--horizon", "1e-9", "--warmup", "0", "--replications", "2", "--json"]) == 0
    classes = json.loads(capsys.readouterr().out)["classes"]
    assert [(c["jobs"], c["mean_response"], c["mean_wait"]) for c in classes] == [(0, None, None)] * 4


def test_no_counted_bag_is_said_n_a_in_the_table_and_null_in_json(tmp_path, capsys):
    # The only bag arrives before the warm-up: none is counted, so AVT ... RWT have no value. The table said
    # "RWT nan%"; it says n/a, and the JSON (strict: no NaN) has null.
    path = tmp_path / "early.toml"
    path.write_text('[workload]\nkind = "bag_list"\nbags = [{at = 0.0, tasks = [[0, 1.0]]}]\n[machines]\n'
                    'power = [1.0]\n[policy]\nname = "fcfs"\n[simulation]\nhorizon = 300.0\nwarmup = 100.0\n')
    for replications in ("1", "2"):
        assert main(["simulate", str(path), "--replications", replications]) == 0
        out = capsys.readouterr().out
        assert "nan" not in out.lower(), out
        assert "RWT              n/a (no counted bag completed)" in out, out
        assert main(["simulate", str(path), "--replications", replications, "--json"]) == 0
        bags = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))["bags"]
        assert bags["bags"] == 0 and bags["rwt"] == {"mean": None, "ci95": [None, None]}, bags


def test_tiny_times_keep_their_digits_in_every_output(tmp_path, capsys):
    """Jobs of a billionth of a unit (granularity 1e-9): their mean, about 1e-9, was 0.0 in --json and 0.000000 in
    summary.csv and jobs.csv (six decimals), and the table ran the job count into the mean (4 jobs of 1e-13 read
    40.0000000000001)."""
    f = tmp_path / "tiny.toml"
    f.write_text("[workload]\narrival_rates = [0.5]\ngranularity = [1e-9]\n[machines]\nrates = [[1.0]]\n"
                 "[policy]\nname = \"fcfs\"\n[simulation]\nhorizon = 400.0\nwarmup = 40.0\nreplications = 2\n"
                 "seed = 1\n")
    assert main(["simulate", str(f), "--json", "--workers", "1", "--out", str(tmp_path / "o"), "--jobs"]) == 0
    overall = json.loads(capsys.readouterr().out)["overall"]
    # a job's size is 1e-9 units on average, served at rate 1 with no queue to speak of: about 1e-9 each
    assert 0.5e-9 < overall["mean_response"] < 2e-9 and 0 < overall["ci95"][0] < overall["ci95"][1], overall
    with open(tmp_path / "o" / "summary.csv", newline="") as fh:
        row = [r for r in csv.DictReader(fh) if r["Class"] == "Overall"][0]
    assert float(row["Mean Response"]) == pytest.approx(overall["mean_response"], rel=1e-5)
    with open(tmp_path / "o" / "jobs.csv", newline="") as fh:
        done = [r for r in csv.DictReader(fh) if r["Response Time"]]
    assert done and all(float(r["Response Time"]) > 0 and float(r["Size"]) > 0 for r in done)
    assert main(["simulate", str(f), "--workers", "1"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Overall"))
    jobs, mean = line.split()[1:3]  # (the count and the mean apart)
    assert int(jobs) == overall["jobs"] and float(mean) == pytest.approx(overall["mean_response"], rel=0.05)


@pytest.mark.parametrize("every_s", [0.0, 3600.0])
def test_off_a_terminal_progress_is_a_line_now_and_then_and_none_for_a_short_run(
        every_s: float, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A batch job's log (stderr not a terminal) said nothing until the run's end: a line every OFF_TERMINAL_EVERY_S
    at most, with the replications done and the time so far, and the last one (here every replication, at 0 s); a
    run shorter than that says nothing (here 1 hour)."""
    from mgst.cli import simulate_command  # noqa: PLC0415

    monkeypatch.setattr(simulate_command, "OFF_TERMINAL_EVERY_S", every_s)
    assert main(["simulate", str(HIHI), "--horizon", "200", "--warmup", "20", "--replications", "3",
                 "--workers", "1"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("simulating ")]
    if every_s:
        assert lines == []
    else:
        assert [line.split(", ")[0] for line in lines] == [
            f"simulating hihi-mfd-fd (lpas_dg): replication {k}/3" for k in (1, 2, 3)], lines
        assert all(line.endswith(" s") for line in lines)
