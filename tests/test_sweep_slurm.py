"""`mgst sweep --slurm` on a real Slurm (tests/slurm_cluster.py): a slice of the Anglano & Canonico grid on Dask
workers that are Slurm jobs (dask-jobqueue's SLURMCluster) gives the local pool's rows; its jobs cancelled
mid-sweep stop it with one line, finished cells kept; the same command again finishes the rest."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import once_across_builds
from slurm_cluster import PARTITION, SlurmCluster

from mgst.cli import main

ROOT = Path(__file__).resolve().parents[1]
FILE = ROOT / "experiments" / "bot" / "anglano-sweep.toml"  # the grid of Anglano & Canonico's paper
SLICE = ["--quick", "--only", "heterogeneity=homogeneous", "--no-plots"]  # 12 cells of about 0.1 to 1 s
pytestmark = [pytest.mark.xdist_group("slurm"), once_across_builds]


def rows(out: Path) -> list[dict[str, str]]:
    with open(out / "sweep.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


def sweep_on_slurm(out: Path, jobs: int, gate: Path) -> subprocess.Popen:
    """The sweep on ``jobs`` Slurm worker jobs, its cells held after the first until ``gate`` exists
    (tests/sweep_gate.py: the workers, Slurm jobs of this machine, inherit the environment)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mgst", "sweep", str(FILE), *SLICE, "--out", str(out), "--slurm", str(jobs),
         "--slurm-partition", PARTITION, "--slurm-time", "10", "--slurm-memory", "500MB",
         "--cell", "tests.sweep_gate:cell"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "MGST_TEST_GATE": str(gate)})


def test_a_sweep_on_slurm_workers_gives_the_local_rows_and_resumes_after_its_jobs_are_cancelled(
        slurm: SlurmCluster, tmp_path, capsys):
    pytest.importorskip("dask_jobqueue")
    assert main(["sweep", str(FILE), *SLICE, "--out", str(tmp_path / "local"), "--workers", "2", "--quiet"]) == 0
    local = rows(tmp_path / "local")
    assert len(local) == 12
    out = tmp_path / "slurm"
    gate = tmp_path / "gate"
    sweep = sweep_on_slurm(out, 1, gate)
    try:
        # once a cell is written (the others wait at the gate: however fast the cells, some are left), the
        # cluster's one worker job is cancelled (scancel, as a user or an admin would)
        slurm.wait_for(lambda: (out / "sweep.csv").is_file() and len(rows(out)) >= 1 or sweep.poll() is not None,
                       120, "a first cell written")
        slurm.run("scancel", "--name=mgst-sweep")
        _, stderr = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 1, stderr
    assert "mgst: error: the sweep's Slurm jobs (" in stderr and "are gone (cancelled" in stderr, stderr
    assert "Traceback" not in stderr, stderr
    first = rows(out)
    assert len(first) == 1
    gate.touch()  # the run again: every cell goes through
    sweep = sweep_on_slurm(out, 2, gate)
    try:
        stdout, stderr = sweep.communicate(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 0, stderr
    assert f"12 cells, {len(first)} done before, {12 - len(first)} run now (0 failed)" in stdout, stdout
    assert rows(out) == local  # every column but the cells' wall time
    slurm.wait_for(lambda: not slurm.jobs(), 60, "the worker jobs end with the sweep")


def test_bad_slurm_sweep_options_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    for args, said in ((["--slurm", "0"], "--slurm: give 1 to"), (["--slurm", "1", "--workers", "2"], "--slurm:"),
                       (["--slurm-partition", "x"], "need --slurm JOBS"),
                       (["--slurm", "1", "--slurm-time", "soon"], "--slurm-time:")):
        capsys.readouterr()
        assert main(["sweep", str(FILE), *SLICE, "--out", str(tmp_path / "out"), *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err, err
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    pytest.importorskip("dask_jobqueue")
    assert main(["sweep", str(FILE), *SLICE, "--out", str(tmp_path / "out"), "--slurm", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no sbatch, squeue, scancel on the PATH" in err, err
