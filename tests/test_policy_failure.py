"""A policy that fails during a testbed run (its code raises, or it breaks a rule of the core): the run stops at
once, says which policy failed where, with the policy's own traceback, writes what it did (each job once), exits 3;
its journal exports, and a resume says it is over. Real pullers, loopback."""

from __future__ import annotations

import csv
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DURATION_S = 30.0  # of job generation: the run stops long before

# Two policies a researcher might write, each failing after a few jobs: one raises in a hook when a replica ends
# (the core is fed a puller's message), one assigns to a machine that is not asking (the core is fed an arrival).
POLICIES = '''
from mgst.core import Assign
from mgst.policies import register
from mgst.policies.base import Policy


@register
class RaisesInAHook(Policy):
    """FCFS, then a KeyError in on_replica_end at the fifth replica that ends."""
    name = "raises_in_a_hook"
    hooks = frozenset({"choose", "on_replica_end"})

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.ended = 0

    def choose(self, view, machine):
        for queue in view.queues.values():
            if queue.head is not None:
                return queue.head
        return None

    def on_replica_end(self, view, replica):
        self.ended += 1
        if self.ended == 5:
            return {}["a key the policy forgot"]  # the researcher's bug
        return None


@register
class AssignsToABusyMachine(Policy):
    """Sends every new job to machine 0, asking or not."""
    name = "assigns_to_a_busy_machine"
    hooks = frozenset({"dispatch"})

    def dispatch(self, view, new_job, asking):
        if new_job is not None:
            yield Assign(new_job.job, 0)
'''

EXPERIMENT = """[experiment]
name = "failing-policy"
[workload]
arrival_rates = [1.0]
[machines]
rates = [[1.0, 1.0]]
[policy]
name = "{policy}"
[simulation]
replications = 1
[testbed]
time_unit = 0.2
duration = {duration}
"""


def _mgst(tmp_path: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "mgst", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


@pytest.mark.parametrize(("policy", "event", "error", "line"), [
    ("raises_in_a_hook", "ReplicaDone", "KeyError: 'a key the policy forgot'", "# the researcher's bug"),
    ("assigns_to_a_busy_machine", "JobArrived", "PolicyError: assign to machine M1, which is not asking for work",
     "yield Assign(new_job.job, 0)"),
])
def test_a_policy_that_fails_stops_the_run_which_writes_what_it_did_and_exits_3(
        tmp_path: Path, no_children_left, policy: str, event: str, error: str, line: str) -> None:
    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy=policy, duration=DURATION_S))
    out = tmp_path / "run"
    p = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--out", str(out), "--no-live", "--quiet",
              "--json")
    assert p.returncode == 3, p.stderr[-3000:]
    said = f"the policy '{policy}' failed at model time"
    assert said in p.stderr and f"handling {event}: {error}" in p.stderr, p.stderr[-3000:]
    assert line in p.stderr, p.stderr[-3000:]  # the policy's own traceback, down to its line
    assert "the run was stopped there, and what it did is written in" in p.stderr
    summary = json.loads(p.stdout)
    assert summary["policy_failure"].startswith(said) and error in summary["policy_failure"]
    assert summary["duration_s"] < DURATION_S / 2, summary["duration_s"]  # stopped, not generating on to the end
    assert "it is not simulated beside" in " ".join(summary["warnings"]) and summary.get("simulation") is None
    with open(out / "jobs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    ids = [int(r["ID"]) for r in rows]
    assert len(ids) == len(set(ids)) == summary["jobs_generated"] >= 1  # every job once, none lost
    assert sum(r["Status"] == "Done" for r in rows) == summary["jobs_done"]

    # the journal alone gives the same run (its replay stops where the policy failed), and it is over
    before = (out / "jobs.csv").read_text()
    e = _mgst(tmp_path, "export", str(out), "--json")
    assert e.returncode == 0, e.stderr[-3000:]
    assert json.loads(e.stdout)["policy_failure"] == summary["policy_failure"]
    assert (out / "jobs.csv").read_text() == before
    r = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--resume", str(out))
    assert r.returncode == 0 and "is already finished" in r.stderr, r.stderr[-3000:]


def test_a_journal_that_goes_on_after_its_policy_failed_replays_up_to_the_failure(
        tmp_path: Path, no_children_left) -> None:
    """A journal with inputs after the one where its policy failed (a mapper of before this stop went on, its core
    half-way through that input): export rebuilds the run up to the failure and says how many inputs it left out; a
    resume of it, had its mapper died before ending it, is refused saying why."""
    (tmp_path / "failing_policies.py").write_text(POLICIES)
    exp = tmp_path / "exp.toml"
    exp.write_text(EXPERIMENT.format(policy="raises_in_a_hook", duration=DURATION_S))
    out = tmp_path / "run"
    p = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--out", str(out), "--no-live", "--quiet",
              "--json")
    assert p.returncode == 3, p.stderr[-3000:]
    with sqlite3.connect(out / "journal.sqlite") as db:  # two more inputs after the failure, and no end of the run
        last = db.execute("SELECT max(seq) FROM events WHERE kind = 'event'").fetchone()[0]
        columns = [c[1] for c in db.execute("PRAGMA table_info(events)")]
        row = dict(zip(columns, db.execute("SELECT * FROM events WHERE seq = ?", (last,)).fetchone()))
        top = db.execute("SELECT max(seq) FROM events").fetchone()[0]
        for k in (1, 2):
            db.execute(f"INSERT INTO events ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                       [top + k if c == "seq" else row[c] for c in columns])
        db.execute("DELETE FROM meta WHERE key IN ('ended', 'drops', 'policy_failure')")
    e = _mgst(tmp_path, "export", str(out), "--json")
    assert e.returncode == 0, e.stderr[-3000:]
    assert "the run is rebuilt up to there (2 later inputs left out)" in e.stderr, e.stderr[-3000:]
    assert "KeyError: 'a key the policy forgot'" in json.loads(e.stdout)["policy_failure"]
    r = _mgst(tmp_path, "run", str(exp), "--import", "failing_policies", "--resume", str(out))
    assert r.returncode == 2, r.stderr[-3000:]
    assert "a run cannot go on from there" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
