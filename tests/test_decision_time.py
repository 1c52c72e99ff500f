"""The wall time a testbed run's mapper spends in the core (the policy's decisions), which the model takes to be
instant: measured input by input, kept in the journal, in summary.json, and named as a cause of the gap when it
holds the run back. Real pullers, loopback."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

import mgst.testbed.beside as beside_module
from mgst.testbed.beside import ANNOUNCE_SIMULATION_S, finish_outputs
from mgst.testbed.decision_time import DecisionTime
from mgst.testbed.export import export_run
from mgst.testbed.gap import DECISION_SHARE, measured_causes
from mgst.testbed.summary import summarize_testbed

ROOT = Path(__file__).resolve().parents[1]
SLEEP_S = 0.005  # each choice of the policy below: a lower bound of what the mapper measures

POLICY = f'''
import time

from mgst.policies import register
from mgst.policies.fcfs import FCFS


@register
class SlowFcfs(FCFS):
    """FCFS that takes {SLEEP_S} s of wall time to choose, and counts its choices."""
    name = "slow_fcfs"

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.choices = 0

    def choose(self, view, machine):
        self.choices += 1
        time.sleep({SLEEP_S})
        return super().choose(view, machine)

    def report(self):
        return {{"choices": self.choices}}
'''

EXPERIMENT = """[experiment]
name = "slow-policy"
[workload]
arrival_rates = [3.0]
[machines]
rates = [[4.0, 4.0]]
[policy]
name = "slow_fcfs"
[simulation]
replications = 1
[testbed]
time_unit = 0.1
duration = 3.0
"""


def test_the_mapper_measures_its_time_in_the_policy_and_keeps_it(tmp_path: Path, no_children_left) -> None:
    """Every choice sleeps SLEEP_S: the time measured in the core is at least that many sleeps, its longest input at
    least one; summary.json has it and the journal keeps it, so that an export gives the same figures."""
    (tmp_path / "slow_policy.py").write_text(POLICY)
    (tmp_path / "exp.toml").write_text(EXPERIMENT)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    p = subprocess.run([sys.executable, "-m", "mgst", "run", "exp.toml", "--import", "slow_policy", "--out",
                        str(out), "--no-live", "--quiet", "--json"], capture_output=True, text=True, timeout=180,
                       cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    summary = json.loads(p.stdout)
    deciding, choices = summary["decision_time"], summary["policy_counts"]["choices"]
    assert choices >= summary["jobs_done"] > 0, (choices, summary["jobs_done"])
    assert deciding["inputs"] >= summary["jobs_generated"], deciding  # (an arrival is an input, a result another)
    assert deciding["total_s"] >= choices * SLEEP_S and deciding["longest_ms"] >= SLEEP_S * 1e3, deciding
    assert 0 < deciding["share_of_run"] < 1, deciding
    assert deciding["mean_ms"] == pytest.approx(deciding["total_s"] / deciding["inputs"] * 1e3, abs=1e-5), deciding
    sys.path.insert(0, str(tmp_path))  # (the export replays the run: its policy's module is needed)
    try:
        exported = export_run(out)
    finally:
        sys.path.remove(str(tmp_path))
    assert exported.summary["decision_time"] == deciding


def test_time_in_the_policy_is_named_as_a_cause_when_it_holds_the_run_back(tmp_path: Path) -> None:
    """measured_causes: the time in the core is a cause from DECISION_SHARE of the run on, with its figures; below
    it, or not measured (a journal whose mapper died), it is not."""
    run = _a_finished_run(tmp_path)
    testbed, _ = summarize_testbed(run)
    length = run.end - run.t0
    kinds = lambda: [c.kind for c in measured_causes(run, testbed)]  # noqa: E731
    run.decision_time = None
    assert "decisions" not in kinds()
    run.decision_time = DecisionTime(200, 0.99 * DECISION_SHARE * length, 0.001)
    assert "decisions" not in kinds()
    run.decision_time = DecisionTime(200, 0.5 * length, 0.05)
    (cause,) = [c for c in measured_causes(run, testbed) if c.kind == "decisions"]
    assert cause.text.startswith(f"the policy and the core took {0.5 * length:.3g} s of the mapper's time to handle "
                                 f"200 inputs ({0.5 * length / 200 * 1e3:.3g} ms each on average, the longest 50 ms; "
                                 "50% of the run)"), cause.text
    assert cause.figures["inputs"] == 200 and cause.figures["share_of_run"] == 0.5


def test_a_simulation_beside_that_will_take_long_is_announced_with_its_time(tmp_path: Path, caplog,
                                                                           monkeypatch) -> None:
    """Nothing is printed while the simulation beside a run goes on: one whose policy decides slowly is announced
    (a warning) with the time it will take at least, the run's time in the policy once per round of replications
    run side by side; a quick one is not (an info line, as before)."""
    run = _a_finished_run(tmp_path)
    monkeypatch.setattr(beside_module, "default_workers", lambda replications: 1)  # (whatever this machine's cores)
    said = lambda: [r.getMessage() for r in caplog.records  # noqa: E731
                    if r.name == "mgst.testbed.beside" and r.levelno >= logging.WARNING]
    run.decision_time = DecisionTime(200, 0.99 * ANNOUNCE_SIMULATION_S, 0.05)
    with caplog.at_level(logging.INFO, logger="mgst.testbed.beside"):
        finish_outputs(run, tmp_path / "quick", replications=1)
    assert said() == [] and "simulating the run beside it (Ctrl-C" in caplog.text
    caplog.clear()
    run.decision_time = DecisionTime(200, 6.25, 0.05)
    with caplog.at_level(logging.INFO, logger="mgst.testbed.beside"):
        beside = finish_outputs(run, tmp_path / "slow", replications=2)
    assert beside.simulation is not None and beside.simulation.replications == 2
    assert said() == ["simulating the run beside it takes about 12 s or more: its policy took 6.2 s of the run to "
                      "decide, and the simulation decides as much in each of its 2 replications, 1 at a time (Ctrl-C "
                      "skips the simulation; the results are written either way)"]
    # three replications two at a time: two rounds; two replications two at a time: one round, not announced
    caplog.clear()
    monkeypatch.setattr(beside_module, "default_workers", lambda replications: 2)
    with caplog.at_level(logging.INFO, logger="mgst.testbed.beside"):
        finish_outputs(run, tmp_path / "three", replications=3)
    assert said() == ["simulating the run beside it takes about 12 s or more: its policy took 6.2 s of the run to "
                      "decide, and the simulation decides as much in each of its 3 replications, 2 at a time (Ctrl-C "
                      "skips the simulation; the results are written either way)"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mgst.testbed.beside"):
        finish_outputs(run, tmp_path / "two", replications=2)
    assert said() == []


def _a_finished_run(tmp_path: Path):
    """A short real run of FCFS (a second of arrivals), read back from its journal."""
    (tmp_path / "exp.toml").write_text(EXPERIMENT.replace('"slow_fcfs"', '"fcfs"').replace("3.0\n", "1.0\n"))
    out = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "mgst", "run", "exp.toml", "--out", str(out), "--no-live", "--quiet",
                        "--json", "--insecure"], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    return export_run(out).run
