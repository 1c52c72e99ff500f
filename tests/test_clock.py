"""Tests for the puller clock offsets (mgst.clock) and the journal's causal correction of them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from mgst.clock import OffsetEstimator, causal_bounds
from mgst.config import load_experiment
from mgst.journal import Journal
from mgst.model import Job

EXPERIMENT = Path(__file__).resolve().parents[1] / "experiments" / "hihi-mfd-fd.toml"


def skewed_estimator() -> OffsetEstimator:
    """Same host (true offset 0), but the one heartbeat's outbound leg took 4 ms and its return 0:
    NTP's midpoint puts the peer's clock 2 ms ahead."""
    clock = OffsetEstimator()
    clock.add(100.0, 100.004, 100.004, 100.004)
    assert clock.offset == pytest.approx(0.002)
    return clock


def test_causal_bounds_take_the_tightest_message_each_way():
    low, high = causal_bounds([(10.0, 10.5), (20.0, 20.3)], [(30.0, 30.1), (40.2, 40.0)])
    assert high == pytest.approx(0.3)  # offset <= received - sent, the smallest
    assert low == pytest.approx(0.2)  # offset >= sent - received, the largest
    assert causal_bounds([], []) == (-math.inf, math.inf)


def test_an_estimate_outside_the_bounds_moves_to_the_nearest_one():
    clock = skewed_estimator()
    assert clock.to_local(101.0) == pytest.approx(100.998)  # no bounds: the heartbeat's estimate
    assert clock.to_local(101.0, -0.001, 0.0005) == pytest.approx(100.9995)  # above high
    assert clock.to_local(101.0, 0.003, 0.01) == pytest.approx(100.997)  # below low
    assert clock.to_local(101.0, 0.0, 0.01) == pytest.approx(100.998)  # within: unchanged
    # Contradicting bounds (a clock step) are not used.
    assert clock.to_local(101.0, 0.01, 0.0) == pytest.approx(100.998)


def test_the_journal_keeps_each_replica_causal_where_the_heartbeats_estimate_is_off():
    journal = Journal(load_experiment(EXPERIMENT))
    journal.began(100.0)
    journal.clock_sample(0, 100.0, 100.004, 100.004, 100.004)  # the skewed heartbeat above
    journal.job_arrived(Job(1, 0, 1.0, 1.0), 100.9)
    # Requested at 100.9 (its clock = ours), learnt at 100.9002; sent at 101.0 and received 0.5 ms
    # later; started at 101.0006, finished at 101.5, learnt at 101.5003.
    journal.sent(7, 1, 0, 100.9, 100.9002, 101.0)
    journal.reported_done(7, 101.0005, 101.0006, 101.5, 101.5003, 1.0)
    journal.completed(1, 7, 0)
    journal.correct()
    r = journal.replicas[7]
    # The estimate (peer 2 ms ahead) would start the job 1.4 ms before it was sent; its own message
    # allows at most 0.5 ms.
    assert r.t4 == pytest.approx(101.0001)
    assert r.t1 <= r.t2 and r.t3 <= r.t4r <= r.t4 <= r.t5 <= r.t6
    assert journal.delays()["communication_delay_s"]["median"] == pytest.approx(0.0001)
