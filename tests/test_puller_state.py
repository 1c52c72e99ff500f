"""A puller's own state, in this process (no socket opened): what a failing __init__ holds, and what the mapper's
messages leave it in, handled one by one at given instants (Puller._handle), so that no timing can blur it."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import zmq

from mgst.availability import State
from mgst.wire import protocol as P
from puller.availability import REBASE_BURST
from puller.daemon import Puller

ENDPOINT = "tcp://127.0.0.1:9"  # (never connected to: no test here opens the puller's socket)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("bad", [{"idle_exit": 0.0}, {"idle_exit": float("nan")}, {"slots": 0}, {"give_up": 0.0}],
                         ids=["idle_exit 0", "idle_exit nan", "slots 0", "give_up 0"])
def test_a_puller_refused_its_options_holds_no_file_descriptor(bad: dict, ctx: zmq.Context) -> None:
    """Every option is checked before the --exit-with pidfd (or anything else) is opened: a ValueError leaves
    nothing open."""
    before = open_fds()
    with pytest.raises(ValueError):
        Puller(ENDPOINT, "M1", insecure=True, context=ctx, executors=("emulate",), exit_with=os.getpid(), **bad)
    assert open_fds() == before


def test_a_puller_whose_exit_with_process_has_ended_holds_no_file_descriptor(ctx: zmq.Context,
                                                                             no_children_left) -> None:
    ended = subprocess.Popen([sys.executable, "-c", ""])
    ended.wait()  # (reaped: its pid names no process)
    before = open_fds()
    with pytest.raises(ProcessLookupError):
        Puller(ENDPOINT, "M1", insecure=True, context=ctx, executors=("emulate",), exit_with=ended.pid)
    assert open_fds() == before


@pytest.fixture
def made(ctx: zmq.Context) -> Iterator[Callable[..., Puller]]:
    """made(**options): an insecure emulate-only Puller of this process, never run; each closed after the test."""
    pullers: list[Puller] = []

    def _made(**kwargs) -> Puller:
        p = Puller(ENDPOINT, "M1", insecure=True, context=ctx, executors=("emulate",), **kwargs)
        pullers.append(p)
        return p

    yield _made
    for p in pullers:
        p.slots.kill_all()
        p.runner.close()
        p.link.close(linger=0)
        p.wakeup.close()


def test_a_puller_made_and_closed_holds_no_file_descriptor(made: Callable[..., Puller]) -> None:
    before = open_fds()
    p = made(exit_with=os.getpid())
    assert p.wakeup.parent_fd is not None and len(open_fds() - before) == 3  # the pidfd and the wake-up pipe
    p.wakeup.close()
    assert open_fds() == before


UP, RECLAIMED, DOWN = int(State.UP), int(State.RECLAIMED), int(State.DOWN)


def welcome(failures: tuple | None = None, time_unit: float = 1.0) -> P.Welcome:
    return P.Welcome(P.PROTOCOL_VERSION, 0, time_unit, 2.0, 1.0, "emulate", failures, 1, 0.0)


def test_a_welcome_whose_law_begins_down_leaves_the_puller_down_and_offline(made: Callable[..., Puller]) -> None:
    """A welcome's law that begins with a DOWN period: down at once (no socket, no welcome), and so offline: the
    slots are not configured for a welcome it dropped, nor online with no connection."""
    p = made()
    now = 1000.0
    p._handle(welcome(("trace", [[3.0, DOWN, 0.0], [100.0, UP, 1.0]])), now)
    assert p.availability.up_at == pytest.approx(now + 3.0)
    assert p.welcome is None and p.link.sock is None
    assert not p.slots.online


LAW = ("trace", [[100.0, UP, 1.0]] * 10)  # up throughout: a Begin changes only where in the law it is


def test_a_begin_before_a_welcome_is_dropped_and_counted_whether_a_law_plays_or_not(
        made: Callable[..., Puller]) -> None:
    """The mapper sends a Begin only after its welcome, on the same connection (a welcome after the run began
    carries the law itself): one that comes before a welcome is from no mapper of this puller's, dropped and
    counted (as a Job or a Share before a welcome), never played, whether a law plays already or not."""
    p = made()
    p._handle(P.Begin(LAW), 1000.0)  # never welcomed: no law plays
    assert p.availability.schedule is None and p.availability.next_change == math.inf
    assert p.drops.counts == {P.Drop.UNREGISTERED: 1}
    p._handle(welcome(), 1001.0)
    p._handle(P.Begin(LAW), 1001.0)
    schedule = p.availability.schedule
    assert schedule is not None and p.drops.counts == {P.Drop.UNREGISTERED: 1}
    p._handle(P.Paused("the journal cannot be written"), 1002.0)  # offline, its law playing on
    assert p.welcome is None
    p._handle(P.Begin(LAW, 50.0), 1002.0)
    assert p.availability.schedule is schedule
    assert p.drops.counts == {P.Drop.UNREGISTERED: 2}


def test_a_run_s_re_bases_do_not_count_against_the_next_run_s(made: Callable[..., Puller]) -> None:
    """With --stay, the mapper's Bye ends the law played and its re-base budget with it: the next run's first
    re-base is obeyed however many the last run's made (REBASE_BURST at once, then one per REBASE_EVERY s)."""
    p = made(stay=True)
    now = 1000.0
    p._handle(welcome(), now)
    p._handle(P.Begin(LAW), now)
    for k in range(1, REBASE_BURST + 1):  # the whole burst, at once
        p._handle(P.Begin(LAW, 100.0 * k), now)
    assert p.availability.schedule.model_time(now) == pytest.approx(100.0 * REBASE_BURST)
    p._handle(P.Begin(LAW, 50.0), now)  # (one more now is over the budget)
    assert p.drops.counts == {P.Drop.REBASE_RATE: 1}
    p._handle(P.Bye("run over"), now)
    assert p.availability.schedule is None and not p.stopping
    now += 1.0  # the next run, well within REBASE_EVERY
    p._handle(welcome(), now)
    p._handle(P.Begin(LAW), now)
    p._handle(P.Begin(LAW, 500.0), now)
    assert p.drops.counts == {P.Drop.REBASE_RATE: 1}  # (the last run's only)
    assert p.availability.schedule.model_time(now) == pytest.approx(500.0)


@pytest.mark.parametrize("endpoint", ["ipc:///tmp/" + "x" * 200, "nonsense://x"], ids=["path too long", "no transport"])
def test_a_link_that_cannot_connect_holds_no_socket(endpoint: str) -> None:
    """An endpoint ZeroMQ refuses when the puller's socket connects (a ZMQError) leaves neither the socket nor its
    monitor open (they were made, then lost: the link had not kept them)."""
    import logging
    import time

    from mgst.wire.drops import DropLog
    from puller.link import Link
    from puller.reach import Reach

    made: list[zmq.Socket] = []

    class Context(zmq.Context):
        def socket(self, kind, **kwargs):
            s = super().socket(kind, **kwargs)
            made.append(s)
            return s

    ctx = Context()
    try:
        link = Link(endpoint, None, ctx, "M1", Reach(endpoint, None, time.monotonic), DropLog(logging.getLogger()))
        with pytest.raises(zmq.ZMQError):
            link.open()
        assert made and all(s.closed for s in made), made
        assert (link.sock, link.monitor) == (None, None)
    finally:
        ctx.destroy(linger=0)


def test_the_puller_s_clock_reads_the_wall_clock_once_and_steps_with_it_never(monkeypatch, made) -> None:
    """A puller whose wall clock was set back 5 s (an NTP step at boot) sent no heartbeat until the clock caught up:
    the mapper booked its machine down, a replica resubmitted. Its clock now reads the wall clock once and then
    advances with the boot-time clock: the step does not reach it. The puller runs on it by default."""
    import time  # noqa: PLC0415

    from puller.steady_clock import steady_wall_clock  # noqa: PLC0415

    clock = steady_wall_clock()
    first = clock()
    assert abs(first - time.time()) < 1.0
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 5.0)  # the wall clock set back
    second = clock()
    assert first <= second < first + 1.0
    monkeypatch.setattr(time, "time", real)
    puller = made()
    assert puller.clock is not time.time and abs(puller.clock() - time.time()) < 1.0
