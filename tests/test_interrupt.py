"""Ctrl-C on `mgst run`, as a terminal sends it (SIGINT to the process group): the run ends within seconds, every
job Done or reported cut off, no process left (issue 21, item 1)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest
from helpers import read_stderr_until, read_until

ROOT = Path(__file__).resolve().parents[1]
# Jobs of 10 s (mean) on 2 machines, arriving every 0.7 s: some run, more wait, when the interrupt comes, and the
# drain cannot empty the queue (the run's own drain time-out would be 500 s: 50 of the slowest jobs).
EXPERIMENT = """[experiment]
name = "interrupt"
[workload]
arrival_rates = [1.5]
[machines]
rates = [[0.1, 0.1]]
[policy]
name = "fcfs"
[simulation]
seed = 3
replications = 2
[testbed]
time_unit = 1.0
duration = 60.0
"""
# Issue 21's acceptance: the run ends within this many seconds of Ctrl-C (the journal's "ended").
END_WITHIN = 10.0
# ... and the command exits within this many: the simulation beside the run and the comparison's plot come after
# the run's end (some 3 s on an idle machine, three times that at a load average of 25).
EXIT_WITHIN = 30.0
PROGRESS = re.compile(r"running (\d+)")


def _await_running_jobs(proc: subprocess.Popen, timeout: float) -> str:
    """stderr up to the first progress line showing a running job (bounded in time)."""
    return read_stderr_until(proc, lambda seen: any(int(n) > 0 for n in PROGRESS.findall(seen)), timeout,
                             "progress line with a running job")


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has ended: its parent has yet to reap it)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def _kill_group_if_running(proc: subprocess.Popen, children: Sequence[psutil.Process] = ()) -> None:
    """SIGKILL the process group of a run the test did not see end (it leads its own session), and reap it; then
    kill any of its ``children`` left running (one that left the group)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for p in children:
        if p.is_running():
            p.kill()


def _as_in_a_terminal() -> None:
    """In the child before exec: SIGINT at its default, as a terminal's foreground job has it. A suite run in the
    background (`pytest &` in a script, as CI may) has SIGINT ignored, which its children inherit; `mgst simulate`
    then rightly takes no Ctrl-C (`mgst run` installs its own handlers, so its tests need none of this)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _await(condition, timeout: float, what: str, state=lambda: "") -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds, saying ``what`` and ``state()``."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"waited {timeout} s for {what} {state()}")
        time.sleep(0.05)


@pytest.mark.parametrize("mode", ["pullers-live", "pullers-die-first", "twice"])
def test_ctrl_c_on_the_process_group_ends_the_run_within_seconds(tmp_path, no_children_left, mode):
    """pullers-die-first: the pullers are sent SIGINT too, before the mapper (the mapper sees only silence and
    goodbyes, and must not wait its whole drain time-out for machines that will not come back). twice: a second
    Ctrl-C once the drain has begun stops at once."""
    pullers_die = mode == "pullers-die-first"
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT)
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mgst", "run", str(exp), "--out", str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "MGST_PURE": "1"})
    children: list[psutil.Process] = []
    try:
        _await_running_jobs(proc, timeout=60)
        children = psutil.Process(proc.pid).children(recursive=True)  # the pullers, their jobs, the live view
        pullers = [p for p in children if p.cmdline()[1:3] == ["-m", "puller"]]
        assert len(pullers) == 2, children
        if pullers_die:
            for p in pullers:
                p.send_signal(signal.SIGINT)
            _await(lambda: not _alive(pullers), 10, "the pullers to end",
                   lambda: f"left: {[(p.pid, p.cmdline()) for p in _alive(pullers)]}")
        interrupted, sent = time.monotonic(), time.time()
        os.killpg(proc.pid, signal.SIGINT)
        if mode == "twice":
            read_until(proc, "draining", timeout=END_WITHIN)
            os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        _kill_group_if_running(proc, children)
    assert proc.returncode == 0, stderr[-2000:]
    assert took < EXIT_WITHIN, (took, stderr[-2000:])
    with sqlite3.connect(f"file:{out / 'journal.sqlite'}?mode=ro", uri=True) as db:
        ended = json.loads(db.execute("SELECT value FROM meta WHERE key = 'ended'").fetchone()[0])
    assert ended - sent < END_WITHIN, (ended - sent, stderr[-2000:])
    assert "Traceback" not in stderr
    assert not _alive(children), f"processes left: {[(p.pid, p.cmdline()) for p in _alive(children)]}"
    # every job Done or cut off, and the journal's jobs.csv and summary.json agree
    summary = json.loads((out / "summary.json").read_text())
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    done = {int(r["ID"]) for r in rows if r["Status"] == "Done"}
    unfinished = {int(r["ID"]) for r in rows if r["Status"] != "Done"}
    assert len(rows) == summary["jobs_generated"] > 0
    assert len(done) == summary["jobs_done"]
    assert unfinished == set(summary["cut_off"])
    assert f"{len(unfinished)} cut off" in stdout
    assert unfinished, "the queue was longer than the drain"
    assert summary["aborted"] is (mode == "twice")


def test_ctrl_c_during_the_simulation_beside_the_run_skips_it_and_writes_the_results(tmp_path, no_children_left):
    """Once the run is over, Ctrl-C stops the simulation beside it (the file asks for 100,000 replications: some
    minutes) instead of being taken for a drain request and ignored; the testbed's results are still written."""
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.replace("replications = 2", "replications = 100000")
                   .replace("duration = 60.0", "duration = 2.0").replace("[[0.1, 0.1]]", "[[4.0, 4.0]]"))
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "mgst", "-v", "run", str(exp), "--out", str(out), "--no-live"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "MGST_PURE": "1"})
    try:
        read_stderr_until(proc, lambda seen: "simulating the run beside it" in seen, 90, "the simulation's start")
        interrupted = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        _kill_group_if_running(proc)
    assert proc.returncode == 0, stderr[-2000:]
    assert took < EXIT_WITHIN, (took, stderr[-2000:])
    assert "Traceback" not in stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulation"] is None and summary["comparison"] is None and summary["gap"] is None
    assert any("simulation beside the run was interrupted" in w for w in summary["warnings"])
    assert summary["jobs_done"] > 0 and (out / "jobs.csv").is_file()
    assert "simulation beside the run was interrupted" in stderr


@pytest.mark.parametrize("when", ["workers-started", "workers-busy"])
def test_ctrl_c_on_a_parallel_simulation_stops_its_workers_at_once(tmp_path, no_children_left, when):
    """`mgst simulate` with 2 worker processes and 100,000 replications: Ctrl-C to the process group ends it within
    seconds, no worker left, whether it comes while the replications are handed out or while they run. (A worker
    that took the SIGINT itself reported KeyboardInterrupt as its replication's result and went on to the next one,
    while the parent's pool shutdown waited for all of them; a KeyboardInterrupt raised inside the executor's
    submit could leave its lock taken, and the shutdown waiting for it forever.)"""
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.replace("replications = 2", "replications = 100000")
                   .replace("[[0.1, 0.1]]", "[[4.0, 4.0]]"))
    err_file = tmp_path / "stderr.txt"  # (a pipe nobody reads until the end would stall the workers' logging)
    with open(err_file, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "mgst", "simulate", str(exp), "--workers", "2", "--horizon",
                                 "400"], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True, env={**os.environ, "MGST_PURE": "1"},
                                preexec_fn=_as_in_a_terminal)
    workers: list[psutil.Process] = []
    try:
        _await(lambda: len(psutil.Process(proc.pid).children()) >= 2, 60, "the pool's 2 workers")
        workers = psutil.Process(proc.pid).children(recursive=True)
        if when == "workers-busy":  # both well into their replications (imports take them some 0.5 s of CPU)
            _await(lambda: all(w.cpu_times().user > 1.5 for w in workers), 60, "the workers to run replications")
        interrupted = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=60)
        took = time.monotonic() - interrupted
    finally:
        _kill_group_if_running(proc, workers)
    stderr = err_file.read_text()
    assert proc.returncode == 130, stderr[-2000:]
    assert "mgst: interrupted" in stderr
    assert took < EXIT_WITHIN, (took, stderr[-2000:])
    assert not _alive(workers), f"workers left: {_alive(workers)}"
