"""A simulation whose response times grow through the run under its policy says it has no steady state, though the
allocation LP finds the workload within the grid's capacity (FCFS on hihi-mpd-fe: 7.2 at horizon 60, 24.7 at 200,
with steady-looking intervals and ``Overloaded No``); a steady one says nothing."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
from pathlib import Path

from mgst.intervals import BATCHES
from mgst.results import ReplicationResult
from mgst.steady_state import growth_warning

ROOT = Path(__file__).resolve().parent.parent


def replication(window_means: list[float], jobs: int = 50, replication: int = 0) -> ReplicationResult:
    """A replication of one class whose k-th window's jobs have mean response ``window_means[k]``."""
    counts = [[jobs] * BATCHES]
    sums = [[m * jobs for m in window_means]]
    return ReplicationResult(replication=replication, counts=[jobs * BATCHES], sums=[sum(sums[0])], wait_sums=[0.0],
                             end_time=100.0, busy=[0.0], up=[100.0], completed=[0], failures=[0],
                             jobs_total=jobs * BATCHES, unfinished=0, batches=(counts, sums))


def noisy(rng: random.Random, growth: float) -> list[float]:
    """Window means rising geometrically from 1 to ``growth`` (1: flat), each times a noise of +-30 %."""
    return [growth ** (k / (BATCHES - 1)) * rng.uniform(0.7, 1.3) for k in range(BATCHES)]


def test_replications_whose_means_grow_say_so_and_steady_ones_do_not():
    rng = random.Random(7)
    steady = [replication(noisy(rng, 1.0), replication=r) for r in range(10)]
    assert growth_warning(steady) is None
    # a small drift (the warm-up's tail, say) is no loss of the steady state: below 1.5 times, nothing said
    assert growth_warning([replication(noisy(rng, 1.2), replication=r) for r in range(10)]) is None
    growing = [replication(noisy(rng, 4.0), replication=r) for r in range(10)]
    text = growth_warning(growing)
    assert text is not None and text.startswith("response times grow through the run under this policy")
    assert "larger in 10 of 10 replications" in text
    # large but not beyond chance: two replications that grew a lot and one that shrank as much
    mixed = [replication(noisy(rng, 4.0)), replication(noisy(rng, 4.0)), replication(noisy(rng, 0.25))]
    assert growth_warning(mixed) is None


def test_one_replication_is_judged_by_its_windows():
    rng = random.Random(3)
    assert growth_warning([replication(noisy(rng, 1.0))]) is None
    assert growth_warning([replication([1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.1, 3.9, 4.8, 6.0])]) is not None
    # a late burst, not a rise window by window: the edges' ratio alone is no trend
    assert growth_warning([replication([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 9.0])]) is None


def test_without_batches_nothing_is_said():
    r = dataclasses.replace(replication([1.0] * 5 + [9.0] * 5), batches=None)
    assert growth_warning([r] * 3) is None
    assert growth_warning([]) is None


def simulate(policy: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "mgst", "simulate", "experiments/hihi-mpd-fe.toml", "--policy", policy,
                          "--horizon", "60", "--warmup", "6", "--replications", "10", "--workers", "1", "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    return json.loads(out.stdout)


def test_fcfs_that_falls_behind_is_said_overloaded_where_lpas_dg_is_not():
    """hihi-mpd-fe's LP load is 67 %: LPAS_DG keeps up, FCFS, sending jobs to machines too slow for them, does not."""
    fcfs = simulate("fcfs")
    assert fcfs["overloaded"].startswith("response times grow through the run under this policy"), fcfs
    assert "overloaded" not in simulate("lpas_dg")
