"""A mapper whose loop stalls (here: SIGSTOPped for a while) has the stall in its summary (real mapper and pullers,
loopback); tests/test_beside.py has the stalls named as a gap's cause."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

from test_failure_rebase import clock_starts
from test_resume import count_events, free_port, reap, start_mapper, wait_for

from mgst.testbed.journal import STALL
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.wire import security

STOPPED_S = STALL + 1.5
EXPERIMENT = """[workload]
arrival_rates = [2.0]
[machines]
rates = [[1.0, 1.0]]
names = ["M1", "M2"]
[policy]
name = "fcfs"
[testbed]
time_unit = 0.2
duration = 6.0
"""


def test_a_mapper_stopped_for_a_while_has_the_stall_in_its_summary(tmp_path: Path, no_children_left) -> None:
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(EXPERIMENT)
    keys, out = tmp_path / "keys", tmp_path / "run"
    security.create_keys(keys, ["M1", "M2"])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    mapper = start_mapper([str(exp_file), "--bind", endpoint, "--keys", str(keys), "--out", str(out)])
    pullers: list[subprocess.Popen] = []
    try:
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log", keys=keys)
        wait_for(lambda: count_events(out / "journal.sqlite", "begin") >= 1, 60, "the run's start", mapper)
        time.sleep(1.0)
        stopped = time.time()
        mapper.send_signal(signal.SIGSTOP)
        try:
            time.sleep(STOPPED_S)
        finally:
            mapper.send_signal(signal.SIGCONT)
        _, stderr = mapper.communicate(timeout=60)
        assert mapper.returncode == 0, stderr[-2000:]
    finally:
        reap([mapper, *pullers])
        stop_pullers(pullers)
    summary = json.loads((out / "summary.json").read_text())
    stalls = summary["mapper_stalls"]
    into_run = stopped - clock_starts(out / "journal.sqlite")[0]  # when it was stopped, on the run's clock
    # its last note before the stop came at most a half-second note (and a busy machine's lateness) before it
    ours = [st for st in stalls["longest"] if into_run - 1.5 <= st["at_s"] <= into_run + 0.05]
    assert len(ours) == 1, (into_run, stalls)
    assert STOPPED_S - 0.05 <= ours[0]["seconds"] <= STOPPED_S + 2.0, stalls
