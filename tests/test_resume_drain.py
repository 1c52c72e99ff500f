"""A mapper killed in its drain resumes and drains what was left of it, in model time (real pullers, loopback)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

from test_failure_rebase import clock_starts
from test_resume import count_events, free_port, reap, start_mapper, wait_for

from mgst.config import load_experiment
from mgst.core.state import JobStatus
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.mapper import Mapper
from mgst.wire import protocol as P
from mgst.wire import security

TIME_UNIT = 0.2
GENERATION_S = 3.0  # 15 model time units of arrivals at twice what the two machines can do: work left to drain
# Arrivals far beyond what the two machines can do: work is left to drain at the end of generation.
OVERLOADED = f"""[workload]
arrival_rates = [6.0]
[machines]
rates = [[0.2, 0.2]]
names = ["M1", "M2"]
[policy]
name = "fcfs"
[testbed]
time_unit = {TIME_UNIT}
duration = {GENERATION_S}
"""
DRAIN_S = 2.0  # the resumed mapper's drain time-out (wall seconds: 10 model time units)
KILLED_AFTER_S = 1.0  # into the drain (5 model time units)


def test_a_run_killed_in_its_drain_drains_what_was_left_of_it(tmp_path: Path, no_children_left) -> None:
    """Killed 1 s into its drain and resumed with a 2 s drain: the run ends 2 s of model time after its generation
    (10 time units), not 2 s after the resume (15); every job is done once, or cut off; what the pullers sent
    before their hellos to the resumed mapper is counted as theirs (superseded), not a stranger's."""
    exp_file = tmp_path / "exp.toml"
    exp_file.write_text(OVERLOADED)
    keys, out = tmp_path / "keys", tmp_path / "run"
    security.create_keys(keys, ["M1", "M2"])
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    journal = out / "journal.sqlite"
    first = start_mapper([str(exp_file), "--bind", endpoint, "--keys", str(keys), "--out", str(out)])
    pullers: list[subprocess.Popen] = []
    try:
        pullers = start_pullers(endpoint, ["M1", "M2"], tmp_path / "pullers.log", keys=keys)
        wait_for(lambda: count_events(journal, "begin") >= 1, 60, "the run's start", first)
        start = clock_starts(journal)[0]
        time.sleep(max(0.0, start + GENERATION_S + KILLED_AFTER_S - time.time()))
        assert count_events(journal, "genend") == 1  # in its drain (30 s at least: mgst.testbed.run_result)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        resumed = Mapper(load_experiment(exp_file), endpoint, keys=security.server_keys(keys), out=out, resume=True,
                         drain_timeout=DRAIN_S)
        run = resumed.run()
        assert [p.wait(timeout=30) for p in pullers] == [0, 0]
    finally:
        reap([first, *pullers])
        stop_pullers(pullers)
    generation_end = run.journal.generation_end
    assert generation_end is not None and abs(generation_end - GENERATION_S / TIME_UNIT) < 1.0
    drained = (run.end - run.t0) / TIME_UNIT - generation_end
    assert abs(drained - DRAIN_S / TIME_UNIT) < 2.5, drained  # (a new drain after the resume: 15)
    assert run.cut_off  # (work was left: the drain ended it)
    done = [jid for jid, rec in run.core.jobs.items() if rec.status is JobStatus.DONE]
    assert len(done) + len(run.cut_off) == len(run.core.jobs) == len(run.journal.jobs)
    assert count_events(journal, "complete") == len(done)  # each done job completed once
    # what the pullers sent the dead mapper's successor before their hellos (their keys are the machines'): theirs,
    # superseded, not an unregistered (hostile) sender's
    assert run.malformed[P.Drop.SUPERSEDED] > 0 and P.Drop.UNREGISTERED not in run.malformed, run.malformed
