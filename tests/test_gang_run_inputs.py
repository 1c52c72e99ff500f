"""mgst.testbed.gang_run checks every member's message against what it knows: out-of-order, repeated, unknown or
malformed reports are dropped and counted, never handed to the core."""

from __future__ import annotations

import logging
import threading
import time

import pytest
import zmq

from mgst.core.iterations import Iterations
from mgst.testbed.casanova_beside import markov3_form
from mgst.testbed.gang_run import GangRun
from mgst.wire import gang_protocol as G
from mgst.wire.frames import Drop
from mgst.wire.gang_protocol import RECEIVE_PER_PASS

MATRIX = ((0.9, 0.05, 0.05), (0.2, 0.7, 0.1), (0.3, 0.1, 0.6))
WAIT = 20.0


class FirstUp:
    proactive = False

    def choose(self, app, now):
        return {app.up()[0]: app.tasks}

    def reconsider(self, app, now):
        return None


def _gang_run(ctx: zmq.Context, register_timeout: float = 60.0) -> GangRun:
    """A gang run of two workers on loopback (no keys), not yet registered."""
    app = Iterations([1.0, 1.0], 1, 1, 1.0, 1.0, 1, FirstUp())
    return GangRun(app, [markov3_form(MATRIX, 1)] * 2, 0.1, 64, cap=10, context=ctx,
                   register_timeout=register_timeout)


@pytest.fixture
def registered():
    """A gang run of two workers on loopback (no keys), both registered, slot 0 beginning now: the context, the run
    and the members' sockets (a test may add its own to the list, closed with them)."""
    ctx = zmq.Context()
    gang_run = _gang_run(ctx)
    members = []
    try:
        for q in range(2):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.LINGER, 0)
            d.connect(gang_run.endpoint)
            d.send(G.encode(G.GangHello(G.GANG_PROTOCOL_VERSION, q, time.time())))
            members.append(d)
        gang_run._register()
        gang_run.start = time.time()  # slot 0 begins now
        yield ctx, gang_run, members
    finally:
        for sock in members:
            sock.close(0)
        gang_run.close()
        ctx.term()


def test_a_members_bad_reports_are_dropped_and_counted(registered):
    ctx, gang_run, members = registered
    stranger = ctx.socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    stranger.connect(gang_run.endpoint)
    members.append(stranger)
    bad = [
        (members[0], G.encode(G.StateChanged(1, 1000))),  # ahead of the run's clock
        (members[0], G.encode(G.StateChanged(0, 1))),  # UP again: no change
        (members[0], G.encode(G.Received(99))),  # no such transfer
        (members[1], b"\x93\x01\x02\x03"),  # not a map
        (members[1], G.encode(G.Compute(1, 1.0))),  # the mapper's own order
        (stranger, G.encode(G.StateChanged(2, 1))),  # not registered
    ]
    for sock, frame in bad:
        sock.send(frame)
    members[1].send(G.encode(G.StateChanged(2, 1)))  # a good one
    deadline = time.monotonic() + WAIT
    while (gang_run.result.drops < len(bad) or not gang_run.changes) and time.monotonic() < deadline:
        if gang_run.socket.poll(100):
            gang_run._receive_all()
    assert gang_run.result.drops == len(bad)
    assert gang_run.changes == [(1, 1.0, 2)]
    members[1].send(G.encode(G.StateChanged(2, 1)))  # the same report again
    while gang_run.result.drops == len(bad) and time.monotonic() < deadline:
        if gang_run.socket.poll(100):
            gang_run._receive_all()
    assert gang_run.result.drops == len(bad) + 1 and gang_run.changes == [(1, 1.0, 2)]


def test_a_gang_run_binds_loopback_only():
    app = Iterations([1.0], 1, 1, 1.0, 1.0, 1, FirstUp())
    with pytest.raises(ValueError, match="loopback only"):
        GangRun(app, [markov3_form(MATRIX, 1)], 0.1, 64, bind="tcp://0.0.0.0:*")


def test_a_member_that_floods_is_read_in_bounded_passes_and_logged_at_a_bounded_rate(registered, caplog):
    """A registered member sending bad frames without pause: each pass reads at most RECEIVE_PER_PASS of them (the run
    gets back to its clock between passes), every one is dropped and counted by its reason, and the log gets a few
    lines, not one per frame."""
    _, gang_run, members = registered
    flood = 3 * RECEIVE_PER_PASS + 7
    began = time.monotonic()
    caplog.set_level(logging.WARNING, logger="mgst")
    for _ in range(flood):
        members[0].send(b"\x93\x01\x02\x03")  # not a map
    members[1].send(G.encode(G.StateChanged(2, 1)))  # a good report behind the flood, from another member
    deadline = time.monotonic() + WAIT
    passes = []
    while (gang_run.result.drops < flood or not gang_run.changes) and time.monotonic() < deadline:
        if gang_run.socket.poll(100):
            before = gang_run.result.drops + len(gang_run.changes)
            gang_run._receive_all()
            passes.append(gang_run.result.drops + len(gang_run.changes) - before)
    assert gang_run.result.drops == flood and gang_run.changes == [(1, 1.0, 2)]
    assert max(passes) <= RECEIVE_PER_PASS  # bounded passes: the flood in four or more
    assert gang_run.drop_log.counts == {Drop.NOT_A_MAP: flood}
    lines = [r for r in caplog.records if "dropped a message" in r.getMessage()]
    # the burst, and one line per 5 s after it
    assert 1 <= len(lines) <= 10 + (time.monotonic() - began) / 5 + 1, len(lines)


def test_a_refused_hello_from_a_peer_that_left_does_not_end_the_registration():
    """A hello the run refuses (another protocol), from a peer that closed at once: its refusal cannot be delivered
    (ROUTER_MANDATORY), which ended the registration with a ZMQError; it is dropped, and the run waits for its
    members as long as it said it would."""
    ctx = zmq.Context()
    gang_run = _gang_run(ctx, register_timeout=1.0)
    try:
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 1000)
        d.connect(gang_run.endpoint)
        d.send(G.encode(G.GangHello(G.GANG_PROTOCOL_VERSION + 7, 0, time.time())))
        d.close()  # (its hello delivered first: LINGER)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="never said hello"):
            gang_run._register()
        assert time.monotonic() - t0 >= 0.9 and gang_run.result.refused_hellos == 1
    finally:
        gang_run.close()
        ctx.term()


def test_a_peer_that_floods_hellos_and_reads_nothing_cannot_hold_the_registration_past_its_time_out():
    """Refused hellos by the thousand from a peer with a tiny receive queue that never reads: the refusals fill its
    queue, and a blocking send waited there for ever. They are sent without waiting (dropped when full), and the
    registration ends on time. (Small queues and buffers on the run's side too, so that they fill at once.)"""
    ctx = zmq.Context()
    ctx.setsockopt(zmq.SNDHWM, 10)  # (defaults for the sockets made after: the run's)
    ctx.setsockopt(zmq.SNDBUF, 4096)
    gang_run = _gang_run(ctx, register_timeout=2.0)
    bad = G.encode(G.GangHello(G.GANG_PROTOCOL_VERSION + 7, 0, time.time()))
    stop = threading.Event()

    def flood() -> None:  # (its socket its own: made, used and closed in this thread)
        flooder = ctx.socket(zmq.DEALER)
        flooder.setsockopt(zmq.LINGER, 0)
        flooder.setsockopt(zmq.RCVHWM, 1)
        flooder.setsockopt(zmq.RCVBUF, 2048)
        flooder.connect(gang_run.endpoint)
        try:
            while not stop.is_set():
                try:
                    flooder.send(bad, zmq.NOBLOCK)
                except zmq.Again:
                    time.sleep(0.001)
        finally:
            flooder.close(0)

    outcome: list[BaseException] = []

    def register() -> None:
        try:
            gang_run._register()
        except BaseException as e:  # (its outcome, for the test's thread)
            outcome.append(e)

    thread = threading.Thread(target=flood, daemon=True)
    thread.start()
    registering = threading.Thread(target=register, daemon=True)
    registering.start()
    registering.join(2.0 + WAIT)
    stop.set()
    thread.join(10)
    if registering.is_alive():  # blocked in a send: its socket cannot be closed under it (left to the process)
        pytest.fail("the registration was held past its time-out")
    try:
        assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError), outcome
        # (a flood, not a hello or two: how many a loaded machine reads in the 2 s varies; 100 on a busy CI once)
        assert gang_run.result.refused_hellos > 10
    finally:
        gang_run.close()
        ctx.term()
