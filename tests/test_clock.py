"""Tests for the puller clock offsets (mgst.testbed.clock_offsets) and the journal's causal correction of them."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from mgst.config import load_experiment
from mgst.model import Job
from mgst.testbed.clock_offsets import KEEP, MAX_KEPT, PERIOD, OffsetEstimator, PeriodBest
from mgst.testbed.journal import Journal

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


@pytest.mark.parametrize("out_s, back_s", [(0.082, 0.004), (0.004, 0.082)], ids=["peer seen ahead", "peer seen behind"])
def test_a_short_job_never_ends_before_it_starts_where_one_bound_corrected_the_estimate(out_s: float, back_s: float):
    """Same host (true offset 0), its first heartbeat slow one way (82 ms) and quick the other (4 ms): NTP's midpoint
    puts the peer 39 ms ahead (or behind). A 10 ms job sent at 101.0 and done at 101.0109. Ahead: the Started message
    holds its start within 0.5 ms of the send, and the same bound, widened by the drift possible in 10 ms, now holds
    its end; held only by the result's own bound, the estimate put the end 39 ms early, 29 ms before the start (a
    probe's jobs.csv). Behind: the result's bound (its end at most 0.3 ms before it was heard) now holds its start
    too, which the estimate put 39 ms late, after the end."""
    journal = Journal(load_experiment(EXPERIMENT))
    journal.began(100.0)
    journal.clock_sample(0, 100.0, 100.0 + out_s, 100.0 + out_s, 100.0 + out_s + back_s)
    journal.job_arrived(Job(1, 0, 1.0, 1.0), 100.9)
    journal.sent(7, 1, 0, 100.9, 100.9002, 101.0)
    journal.started(7, 101.0005, 101.0006)
    journal.reported_done(7, 101.0005, 101.0006, 101.0106, 101.0109, 1.0)
    journal.completed(1, 7, 0)
    journal.correct()
    r = journal.replicas[7]
    assert r.t3 <= r.t4r <= r.t4 <= r.t5 <= r.t6
    assert r.t5 - r.t4 == pytest.approx(0.01, abs=1e-5)  # the puller's own 10 ms, less at most 500 ppm of drift


def test_a_short_job_never_ends_before_it_starts_where_the_estimate_moved_between_its_reports():
    """Same clock, a WAN of 50 ms each way. The first heartbeat (symmetric) says offset 0, and the job's start is
    put at 101.05; a better one (80 ms, all of it out) then says 39 ms, within both of the job's bounds (+-50 ms), and
    its 1 ms end would be put at 101.012, before its start. The puller's own duration holds it: 101.051."""
    journal = Journal(load_experiment(EXPERIMENT))
    journal.began(100.0)
    journal.clock_sample(0, 100.0, 100.05, 100.05, 100.1)
    journal.job_arrived(Job(1, 0, 1.0, 1.0), 100.9)
    journal.sent(7, 1, 0, 100.9, 100.9, 101.0)
    journal.started(7, 101.05, 101.05)
    journal.clock_sample(0, 101.0, 101.079, 101.079, 101.08)
    journal.reported_done(7, 101.05, 101.05, 101.051, 101.101, 1.0)
    journal.completed(1, 7, 0)
    journal.correct()
    r = journal.replicas[7]
    assert r.t4 == pytest.approx(101.05)
    assert r.t4 <= r.t5 <= r.t6 and r.t5 == pytest.approx(101.051, abs=1e-6)


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


def test_the_estimator_holds_a_bounded_number_of_samples_however_many_it_is_fed():
    """A million exchanges, one every 10 ms (2.8 hours): at most MAX_KEPT are held, all within the
    last KEEP seconds, and the count of samples taken is still right."""
    clock = OffsetEstimator()
    for k in range(1_000_000):
        t1 = 0.01 * k
        clock.add(t1, t1 + 0.0001, t1 + 0.0001, t1 + 0.0002 + 0.0001 * (k % 7))
        if k % 100_000 == 0:
            assert len(clock) <= MAX_KEPT
    assert clock.samples == 1_000_000
    assert len(clock) <= MAX_KEPT and len(clock) >= KEEP / PERIOD
    assert all(s[2] >= 9_999.99 + 0.0002 - KEEP for s in clock._kept)


def test_a_drifting_clock_is_followed_within_the_window():
    """A peer 1 s ahead whose clock gains 100 us a second, for an hour, with a heartbeat every
    0.2 s whose legs take 0.1-1 ms at random: the offset at each recent instant is estimated to within
    the best exchange's error (50 us) plus the drift over the window (a few ms at most), where an
    estimator that kept the first hour's minimum would be 0.36 s off."""
    rng = random.Random(3)
    clock = OffsetEstimator()

    def offset(t: float) -> float:
        return 1.0 + 100e-6 * t

    for k in range(18_000):
        t1 = 0.2 * k
        out, back = rng.uniform(0.0001, 0.001), rng.uniform(0.0001, 0.001)
        t2 = t1 + out + offset(t1 + out)
        clock.add(t1, t2, t2, t1 + out + back)
        if k % 1000 == 999:
            t = t1 - 1.0
            assert clock.offset_at(t) == pytest.approx(offset(t), abs=0.0035), k
            assert clock.to_local(t + offset(t)) == pytest.approx(t, abs=0.0035)
    assert clock.offset == pytest.approx(offset(3600.0), abs=0.007)
    assert len(clock) <= MAX_KEPT


def test_period_best_records_the_first_period_s_improvements_then_one_exchange_per_period():
    """Exchanges every 0.2 s for 60 s with delays that vary: the first period's improvements at once,
    then exactly one per period, each the period's smallest delay; a made-up exchange with a negative
    leg is never recorded; fed what it records, the estimator holds what it holds fed everything."""
    rng = random.Random(5)
    best = PeriodBest()
    recorded: list[tuple[float, float, float, float]] = []
    everything = OffsetEstimator()
    thinned = OffsetEstimator()
    by_period: dict[int, list[tuple[float, tuple]]] = {}
    for k in range(300):
        t1 = 1000.0 + 0.2 * k
        delay = rng.uniform(0.0001, 0.01)
        sample = (t1, t1 + delay / 2, t1 + delay / 2, t1 + delay)
        assert best.offer(t1, t1 + 1.0, t1 + 0.5, t1 + 0.1) is None  # t3 < t2: not an exchange
        everything.add(*sample)
        by_period.setdefault(math.floor(sample[3] / PERIOD), []).append((delay, sample))
        out = best.offer(*sample)
        if out is not None:
            recorded.append(out)
            thinned.add(*out)
    first = [s for s in recorded if s[3] - 1000.0 < PERIOD]
    assert 1 <= len(first) <= 1 + PERIOD / 0.2
    assert all(b[3] - b[0] < a[3] - a[0] for a, b in zip(first, first[1:]))  # each beats the one before
    later = recorded[len(first):]
    periods = [math.floor(s[3] / PERIOD) for s in later]
    assert len(periods) == len(set(periods))  # at most one a period
    assert periods == sorted(by_period)[1:-1] or periods == sorted(by_period)[2:-1]  # all but the last
    for p, s in zip(periods, later):
        assert s == min(by_period[p])[1]
    assert list(thinned._kept) == list(everything._kept)[:-1]  # (the last period is not over: held)
