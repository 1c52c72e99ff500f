"""A failed send is a verdict pending (mgst.testbed.unreachable): judged once what waits is read, and after a gap
in the mapper's heartbeats, not before its pullers' liveness window has passed. Times here are given, not read."""

from __future__ import annotations

import math

from mgst.testbed.unreachable import PendingUnreachable

INTERVAL, LIVENESS = 0.2, 5


def pending(by_identity: dict[bytes, int]) -> tuple[PendingUnreachable, list[tuple[int, float, str]]]:
    declared: list[tuple[int, float, str]] = []
    return PendingUnreachable(by_identity, lambda j, now, why: declared.append((j, now, why)), INTERVAL,
                              LIVENESS), declared


def test_without_a_stall_a_failure_is_declared_once_the_socket_is_read_or_an_interval_later():
    p, declared = pending({b"a": 0, b"b": 1})
    for t in (0.0, 0.05, 0.1):
        p.beat(t)
    p.failed(b"a", 0, "unreachable", 0.11)
    p.failed(b"b", 1, "unreachable", 0.11)
    assert p.due(0.11) == 0.11  # look again at once
    p.judge(0.12, backlog=True)  # messages keep coming: not yet
    assert declared == [] and p
    p.judge(0.12 + INTERVAL, backlog=True)  # an interval on
    assert declared == [(0, 0.32, "unreachable"), (1, 0.32, "unreachable")] and not p
    assert p.due(1.0) == math.inf


def test_after_a_gap_in_the_heartbeats_failures_wait_the_pullers_liveness_window():
    by_identity = {b"a": 0, b"b": 1}
    p, declared = pending(by_identity)
    p.beat(0.0)
    p.beat(0.05)
    # the mapper stalls 2 s: its pullers heard nothing for their liveness window (5 x 0.2 s) and reconnect
    p.beat(2.05)
    grace = 2.05 + LIVENESS * INTERVAL
    p.failed(b"a", 0, "unreachable", 2.06)  # a's puller closed that connection and says hello on another
    p.failed(b"b", 1, "unreachable", 2.06)  # b's is gone
    assert p.due(2.07) == grace  # the loop waits for the grace, not spinning
    p.judge(2.07, backlog=False)  # the socket is read, but a's hello may still be in its handshake
    assert declared == []
    assert p.gone(0, b"a") and not p.gone(0, b"a2")  # (for admission: that connection is not live)
    by_identity.pop(b"a")
    by_identity[b"a2"] = 0  # a's hello on its new connection, read within the grace
    p.judge(grace, backlog=False)
    assert declared == [(1, grace, "unreachable")] and not p


def test_a_stall_seen_first_by_a_failed_send_also_opens_the_grace():
    p, declared = pending({b"a": 0})
    p.beat(0.0)
    p.failed(b"a", 0, "unreachable", 1.5)  # the stall was within the iteration: no beat since 0.0
    p.judge(1.6, backlog=False)
    assert declared == []
    p.judge(1.5 + LIVENESS * INTERVAL, backlog=False)
    assert declared == [(0, 2.5, "unreachable")]


def test_a_gap_shorter_than_the_pullers_patience_opens_no_grace():
    p, declared = pending({b"a": 0})
    p.beat(0.0)
    p.beat((LIVENESS - 1) * INTERVAL)  # a puller heard one at most an interval before 0.0: within its window
    p.failed(b"a", 0, "unreachable", (LIVENESS - 1) * INTERVAL + 0.01)
    p.judge((LIVENESS - 1) * INTERVAL + 0.02, backlog=False)
    assert [j for j, _, _ in declared] == [0]


def test_at_the_run_s_end_pending_failures_are_declared_as_they_stand():
    p, declared = pending({b"a": 0, b"b": 1})
    p.beat(0.0)
    p.failed(b"a", 0, "not reading (its queue is full)", 3.0)  # within a stall's grace
    p.failed(b"b", 1, "unreachable", 3.0)
    p.judge(3.01, backlog=True, final=True)
    assert declared == [(0, 3.01, "not reading (its queue is full)"), (1, 3.01, "unreachable")]


def test_a_failure_of_a_connection_no_longer_registered_is_ignored_and_a_newer_one_replaces_it():
    by_identity = {b"a": 0}
    p, declared = pending(by_identity)
    p.beat(0.0)
    p.failed(b"old", 0, "unreachable", 0.01)  # not the machine's connection: nothing
    assert not p
    p.failed(b"a", 0, "unreachable", 0.02)
    by_identity.pop(b"a")
    by_identity[b"a2"] = 0
    p.failed(b"a2", 0, "unreachable", 0.03)  # its new connection fails too: that one is judged
    p.judge(0.04, backlog=False)
    assert declared == [(0, 0.04, "unreachable")]
