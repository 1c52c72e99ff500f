"""Tests for the puller clock offsets (mgst.clock) and the journal's causal correction of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from mgst.clock import OffsetEstimator
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


def test_an_estimate_outside_the_bounds_moves_to_the_nearest_one():
    clock = skewed_estimator()
    assert clock.to_local(101.0) == pytest.approx(100.998)  # no bounds: the heartbeat's estimate
    assert clock.to_local(101.0, high=0.0005) == pytest.approx(100.9995)  # above high
    assert clock.to_local(101.0, low=0.003) == pytest.approx(100.997)  # below low
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


def test_a_drifting_clock_is_corrected_at_each_instant_by_the_message_of_that_time():
    """A peer whose clock loses 50 us a second, and a 600 s job: its result is stamped 30 ms behind.

    The heartbeats (every 40 s, both legs 0.2 ms: one in each instant's 30 s window) follow the
    drift exactly. Events are recorded in the order the mapper sees them (each instant is corrected
    as it is recorded). The request's bound, set at the start (offset >= -0.2 ms), must not hold the
    result's instant, 600 s later, where the offset is -30 ms: that would put the end 29.8 ms early."""
    journal = Journal(load_experiment(EXPERIMENT))
    journal.began(0.0)

    def peer(t: float) -> float:  # the peer's clock at our time t
        return t - 50e-6 * t

    def heartbeat(k: int) -> None:
        t1 = 40.0 * k
        journal.clock_sample(0, t1, peer(t1 + 0.0002), peer(t1 + 0.0002), t1 + 0.0004)

    heartbeat(0)
    journal.job_arrived(Job(1, 0, 0.0, 1.0), 0.0)
    journal.sent(7, 1, 0, peer(0.1), 0.1002, 0.2)  # requested at 0.1, sent at 0.2
    journal.started(7, peer(0.2005), peer(0.2006))
    for k in range(1, 16):
        heartbeat(k)
    journal.reported_done(7, peer(0.2005), peer(0.2006), peer(600.0), 600.0005, 1.0)
    journal.completed(1, 7, 0)
    journal.correct()
    r = journal.replicas[7]
    assert r.t1 == pytest.approx(0.1, abs=2e-5)  # the drift since the heartbeat at 0: 5 and 10 us
    assert r.t4r == pytest.approx(0.2005, abs=2e-5)
    assert r.t5 == pytest.approx(600.0, abs=1e-6)
    assert r.t1 <= r.t2 and r.t3 <= r.t4r <= r.t4 <= r.t5 <= r.t6
