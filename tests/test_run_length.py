"""Warnings before a testbed run: one too short to generate the jobs its figures need, and one whose drain may last
far longer than the run (a CPU share of 0.001 drained for up to 50,000 s after a 10 s run, without a word)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mgst.config import load_experiment
from mgst.testbed.run_length import few_jobs_warning, long_drain_warning

ROOT = Path(__file__).resolve().parents[1]
SLOW = ('[workload]\narrival_rates = [0.5]\n[machines]\nnames = ["fast", "crawling"]\nrates = [[1.0, 2.0]]\n'
        'availability = [1.0, 0.001]\n[policy]\nname = "fcfs"\n')


def test_a_run_expecting_few_jobs_is_warned_of(tmp_path):
    (tmp_path / "slow.toml").write_text(SLOW)
    exp = load_experiment(tmp_path / "slow.toml")
    # 0.5 jobs a time unit over 10 s of 1 s units: 5 jobs; over 100 s, 50 (enough)
    assert "about 5 jobs" in few_jobs_warning(exp, 10.0, 1.0)
    assert few_jobs_warning(exp, 100.0, 1.0) is None
    assert "about 0.0005 jobs" in few_jobs_warning(exp, 100.0, 1e5)  # (100 s of day-long units)


def test_a_drain_far_longer_than_the_run_is_warned_of(tmp_path):
    (tmp_path / "slow.toml").write_text(SLOW)
    exp = load_experiment(tmp_path / "slow.toml")
    # the crawling machine: a job of 1 unit at rate 2 and share 0.001 takes 500 units: 50 of them, 25,000 s
    said = long_drain_warning(exp, 10.0, 1.0)
    assert "up to 25,000 s" in said and "crawling" in said
    assert long_drain_warning(exp, 10.0, 0.01) is None  # 250 s: under 600
    assert long_drain_warning(exp, 30_000.0, 1.0) is None  # no longer than the run itself


def test_the_mapper_says_both_before_it_waits_for_pullers(tmp_path):
    (tmp_path / "slow.toml").write_text(SLOW)
    p = subprocess.run([sys.executable, "-m", "mgst", "mapper", str(tmp_path / "slow.toml"), "--duration", "10",
                        "--bind", "tcp://127.0.0.1:0", "--register-timeout", "0.5", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "the run generates about 5 jobs" in p.stderr and "may drain for up to 25,000 s" in p.stderr, p.stderr
