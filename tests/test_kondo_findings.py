"""The slides' findings 1 and 3 at a small scale (docs/reproduction-kondo.md): 40-host platforms, paired start points.

Every comparison is paired: the policies run the same applications from the same start points of the same trace,
and the test compares the per-start ratio of their makespans (the optimum cancels out), so that what differs is
the policy, not the start point. The platforms and start points are seeded: the figures are fixed, and the margins
say how far they may move (a change of the generator or of a policy) before the finding is read otherwise.
"""

from __future__ import annotations

import math
import statistics

import pytest

from mgst.papers.kondo.experiment import kondo_experiment
from mgst.papers.kondo.metrics import simulate_run
from mgst.traces.calendar import business_starts
from mgst.traces.platform import generate_platform, write_platform

HOSTS = 40  # N
DAYS = 8  # Monday to the next Monday: five business days of start points, a day of margin
STARTS = 12  # paired start points per comparison
HISTORY = 3600.0  # no policy compared here reads the history: an hour keeps the runs short
MINUTES = 15
# |PRI-CR / FCFS - 1| below which prioritisation "brings little": a tenth, a quarter of what it brings when T < N
# (PRI-CR is about 0.6 x FCFS there, on this platform and the full-size one: docs/reproduction-kondo.md).
LITTLE = 0.10


@pytest.fixture(scope="module")
def platforms(tmp_path_factory):
    root = tmp_path_factory.mktemp("kondo-platforms")
    for kind in ("sdsc", "lri-wisc"):
        write_platform(generate_platform(kind, hosts=HOSTS, days=DAYS, seed=1), root / kind)
    starts = [s for s in business_starts(DAYS * 86_400.0, 3 * STARTS, 7, margin=86_400.0) if s >= HISTORY]
    return root, starts[:STARTS]


def makespans(platforms, kind: str, policy: str, tasks: int) -> list[float]:
    root, starts = platforms
    return [simulate_run(kondo_experiment(root / kind, policy, tasks, MINUTES, s, history=HISTORY)).makespan
            for s in starts]


def paired(a: list[float], b: list[float]) -> tuple[float, float]:
    """Mean of b / a over the start points, and the half-width of its 95 % t-interval."""
    r = [y / x for x, y in zip(a, b)]
    return statistics.mean(r), 2.2 * statistics.stdev(r) / math.sqrt(len(r))  # t(0.975, 11) = 2.20


def test_finding_1_with_more_tasks_than_hosts_prioritisation_brings_little_and_waiting_hurts(platforms):
    fcfs = makespans(platforms, "sdsc", "FCFS", 2 * HOSTS)
    pri = makespans(platforms, "sdsc", "PRI-CR", 2 * HOSTS)
    wait = makespans(platforms, "sdsc", "PRI-CR-WAIT", 2 * HOSTS)
    gain, _ = paired(fcfs, pri)
    assert abs(gain - 1.0) < LITTLE, f"PRI-CR / FCFS = {gain:.3f} with T = 2N"
    loss, half = paired(pri, wait)
    assert loss - half > 1.0, f"PRI-CR-WAIT / PRI-CR = {loss:.3f} +- {half:.3f}: waiting does not hurt"
    # ... while with fewer tasks than hosts prioritisation does bring much (the contrast that makes T >= N "little").
    few, half = paired(makespans(platforms, "sdsc", "FCFS", HOSTS // 2), makespans(platforms, "sdsc", "PRI-CR",
                                                                                     HOSTS // 2))
    assert few + half < 1.0 - 2 * LITTLE, f"PRI-CR / FCFS = {few:.3f} with T = N/2"


def test_finding_3_excluding_slow_hosts_helps_on_sdsc_and_a_fixed_threshold_can_exclude_useful_ones(platforms):
    # SDSC-like, T < N: EXCL-S.5 beats FCFS.
    gain, half = paired(makespans(platforms, "sdsc", "FCFS", HOSTS // 2),
                        makespans(platforms, "sdsc", "EXCL-S.5", HOSTS // 2))
    assert gain + half < 1.0, f"EXCL-S.5 / FCFS = {gain:.3f} +- {half:.3f} on sdsc, T = N/2"
    # LRI-WISC-like (clusters of 0.5, 0.8, 1.7 and 2.4 GHz), T = 2N. The slides' "about 10 % worse than FCFS"
    # does not hold here: EXCL-S.5's threshold (0.7 GHz) excludes only the 0.5 GHz cluster, which is too slow to
    # help. The slides' reason does: a stricter threshold, EXCL-S.25's (0.85 GHz), also excludes the 0.8 GHz
    # cluster, the useful hosts, and is worse than EXCL-S.5.
    s5 = makespans(platforms, "lri-wisc", "EXCL-S.5", 2 * HOSTS)
    s25 = makespans(platforms, "lri-wisc", "EXCL-S.25", 2 * HOSTS)
    loss, half = paired(s5, s25)
    assert loss - half > 1.0, f"EXCL-S.25 / EXCL-S.5 = {loss:.3f} +- {half:.3f} on lri-wisc, T = 2N"


def test_unfinished_applications_are_counted_not_dropped_unsaid(tmp_path):
    from mgst.papers.kondo.findings import claims, read_runs

    path = tmp_path / "runs.csv"
    rows = ["platform,policy,tasks,task_minutes,seed,replication,ratio,makespan,optimal,waste,prediction_error,error"]
    for rep, makespan in enumerate(("120", "", "130")):  # EXCL-PRED's second application never finished
        rows.append(f"sdsc,FCFS,100,5,1,{rep},1.5,150,100,0,,")
        rows.append(f"sdsc,EXCL-PRED,100,5,1,{rep},{makespan and float(makespan) / 100},{makespan},100,0,0.1,")
    path.write_text("\n".join(rows) + "\n")
    text = "\n".join(claims(read_runs([path])))
    assert "did not finish (no makespan: out of every paired figure above): 1 of 6" in text
    assert "   - sdsc EXCL-PRED: 1" in text
