"""Protocol v3 on the puller: slots, staging, checkpoints, resumption, share changes, failure injection.

In-thread pullers (``puller_fakes.ThreadPuller``, CURVE on) talk to a raw ROUTER
socket standing in for the mapper, on loopback at a free port. Tests wait for
messages, never for luck: every wait is bounded, and timings are read from the
puller's own clock fields where they can be (the network adds nothing there).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import zmq
from helpers import is_suspended
from puller_fakes import FakeMapper, ThreadPuller, client_keys, job

from adjuster.throttle import available_backends
from mgst.availability.registry import process_from_wire
from mgst.wire import protocol as P
from puller.allowlist import AllowList
from puller.runner import Runner

# Timer tolerance on the puller's own clock (poll granularity, a loaded test machine), seconds.
TOL = 0.08


@pytest.fixture
def start(mapper: FakeMapper, keydir: Path, ctx: zmq.Context) -> Iterator[Callable[..., ThreadPuller]]:
    """start(**puller options): an in-thread puller of this mapper; stopped (and checked) after the test."""
    made: list[ThreadPuller] = []

    def _start(**kwargs) -> ThreadPuller:
        p = ThreadPuller(mapper.endpoint, client_keys(keydir), ctx, **kwargs)
        made.append(p)
        return p

    yield _start
    for p in made:
        p.close()


def until(mapper: FakeMapper, kind: type, timeout: float) -> tuple[list[tuple[P.Message, float]], P.Message, float]:
    """Messages (not heartbeats) up to the first ``kind``: (those before, with arrival times; it; its arrival)."""
    before = []
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        got = mapper.recv(left)
        if got is None:
            break
        msg, at = got[1], time.monotonic()
        if type(msg) is kind:
            return before, msg, at
        if type(msg) is not P.Heartbeat:
            before.append((msg, at))
    raise AssertionError(f"no {kind.__name__} within {timeout} s; got {[m for m, _ in before]}")


def wait_for(check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# ---------------------------------------------------------------------- slots


def test_three_slots_run_three_jobs_at_once_and_never_a_fourth(mapper: FakeMapper, start) -> None:
    start(slots=3)
    ident, hello = mapper.expect(P.Hello, 10)
    assert (hello.slots, hello.holds, hello.finished) == (3, (), ())
    mapper.welcome(ident, slots=3)
    _, ready = mapper.expect(P.Ready)
    assert ready.slots == 3
    for r in (1, 2, 3):
        mapper.send(ident, job(r, work=1.0))
    started = [mapper.expect(P.Started)[1] for _ in range(3)]  # no Ready between: every slot was asked for
    assert sorted(s.replica for s in started) == [1, 2, 3]
    mapper.send(ident, job(4, work=1.0))
    _, failed = mapper.expect(P.Failed)
    assert (failed.replica, failed.code) == (4, P.FAIL_BUSY)
    dones = [mapper.expect(P.Done, 5)[1] for _ in range(3)]
    assert sorted(d.replica for d in dones) == [1, 2, 3]
    t0 = min(s.started for s in started)
    for d in dones:  # side by side: each ends ~1 s after the first start, not 2 or 3
        assert 1.0 - TOL <= d.finished - t0 <= 1.0 + 2 * TOL, (d, t0)
        assert d.ready and d.achieved_share == pytest.approx(1.0)
    mapper.quiet(0.3)  # three Dones asked for three slots: no Ready on top


def test_ready_asks_for_free_slots_once_and_hello_lists_replicas(mapper: FakeMapper, start) -> None:
    p = start(slots=3)
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, slots=5, heartbeat=0.4)  # more than it offered: it runs 3 at most
    _, ready = mapper.expect(P.Ready)
    assert (ready.slots, ready.share) == (3, 1.0)
    mapper.send(ident, job(1, work=30.0))
    mapper.expect(P.Started)
    mapper.quiet(0.2)  # its other free slots are asked for already
    mapper.send(ident, P.CancelMsg(1))
    _, ready = mapper.expect(P.Ready)  # the cancelled replica's slot is free and not asked for
    assert ready.slots == 3
    for r in (2, 3, 4):
        mapper.send(ident, job(r, work=30.0 if r != 4 else 0.2))
    for _ in range(3):
        mapper.expect(P.Started)
    _, done = mapper.expect(P.Done)
    assert (done.replica, done.ready) == (4, True)  # asks for the slot it frees: no Ready
    mapper.send(ident, job(5, work=30.0))
    mapper.expect(P.Started)
    mapper.send(ident, job(6, work=30.0))
    _, failed = mapper.expect(P.Failed)
    assert (failed.replica, failed.code) == (6, P.FAIL_BUSY)
    # Silent mapper: a new hello lists every running replica and the result not known to be read.
    ident, hello = mapper.expect(P.Hello, 5)
    assert (hello.holds, hello.finished) == ((2, 3, 5), (4,))
    mapper.welcome(ident, slots=3, heartbeat=0.4)
    _, done = mapper.expect(P.Done)
    assert (done.replica, done.ready) == (4, False)  # again; no slot is free, so it asks for none
    _, hb = mapper.expect(P.Heartbeat, ignore=())  # sent after the Done: echoing it acknowledges the Done
    mapper.send(ident, P.Heartbeat(1, time.time(), hb.clock, time.time()))
    wait_for(lambda: not p.puller.slots.held, 2.0)
    assert p.puller.slots.holds() == (2, 3, 5)


def test_results_held_across_a_new_welcome_ask_for_nothing_and_one_ready_follows_them(
        mapper: FakeMapper, start) -> None:
    """A resumed mapper may have counted a held result already: a request riding on it would be read
    while another result still holds the slot (dropped as ready while busy). The held results go out
    without asking, then one Ready asks for every free slot."""
    start(slots=2)
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, slots=2, heartbeat=0.3)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=0.05))
    mapper.send(ident, job(2, work=0.1))
    # the mapper falls silent (no heartbeats, no echo): both results are held; the puller says hello again
    deadline = time.monotonic() + 15
    while True:
        got = mapper.recv(deadline - time.monotonic())
        assert got is not None, "no hello listing both results"
        if type(got[1]) is P.Hello and sorted(got[1].finished) == [1, 2]:
            ident, hello = got
            break
    assert hello.holds == ()
    mapper.welcome(ident, slots=2, heartbeat=2.0)
    before, ready, _ = until(mapper, P.Ready, 5)
    dones = [m for m, _ in before if type(m) is P.Done]
    assert sorted(d.replica for d in dones) == [1, 2] and not any(d.ready for d in dones), before
    assert ready.slots == 2
    mapper.quiet(0.3)


# ---------------------------------------------------------------------- staging


def test_staging_delays_computing_and_the_result(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, time_unit=0.5)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=1.0, stage=1.2))  # stages 0.6 s, then computes 0.5 s
    started, t_started = mapper.expect_at(P.Started)
    computing, t_computing = mapper.expect_at(P.Computing)
    assert computing.replica == 1
    assert 0.6 - TOL / 2 <= computing.clock - started.started <= 0.6 + TOL
    assert t_computing - t_started >= 0.6 - TOL
    done, t_done = mapper.expect_at(P.Done)
    assert 0.5 - TOL / 2 <= done.finished - computing.clock <= 0.5 + TOL
    assert (done.started, done.received) == (started.started, started.received)
    assert t_done - t_started >= 1.1 - TOL
    # No staging: it computes at once and says nothing more than Started.
    mapper.send(ident, job(2, work=0.4))
    mapper.expect(P.Started)
    _, done = mapper.expect(P.Done)  # (a Computing first would fail this)
    assert done.replica == 2
    # Staging is cut short by a cancel: no Computing ever, the slot asks again.
    mapper.send(ident, job(3, work=1.0, stage=0.4))
    mapper.expect(P.Started)
    mapper.send(ident, P.CancelMsg(3))
    mapper.expect(P.Ready)
    mapper.quiet(0.5)


def test_a_held_result_keeps_its_slot_and_goes_out_after_its_hold_with_its_computed_end(mapper: FakeMapper,
                                                                                        start) -> None:
    # a grid whose results reach the server late: the job computes 0.1 s, then its result is held 3 s in its slot
    # (hold 6 at time unit 0.5), and reported with the end of its computing, asking for the slot it frees
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, time_unit=0.5)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=0.2, hold=6.0))
    started, t_started = mapper.expect_at(P.Started)
    before, done, t_done = until(mapper, P.Done, 10)
    assert not any(type(m) is P.Ready for m, _ in before), before  # the slot stays taken while the result is held
    assert done.replica == 1 and done.ready  # the freed slot asked for with the result
    assert 0.1 - TOL / 2 <= done.finished - started.started <= 0.1 + TOL  # computed 0.1 s
    assert t_done - t_started >= 3.1 - TOL / 2  # reported after the hold
    # cancelled during its hold (1 s after it started, computed long before): nothing is reported, the slot asks again
    mapper.send(ident, job(2, work=0.2, hold=6.0))
    mapper.expect(P.Started)
    mapper.quiet(1.0)
    mapper.send(ident, P.CancelMsg(2))
    mapper.expect(P.Ready)
    mapper.quiet(0.5)


# ---------------------------------------------------------------------- checkpoints, resumption


def test_progress_at_the_checkpoint_interval(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, time_unit=0.5, checkpoint=0.5)  # a checkpoint every 0.25 s
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=2.4))  # 1.2 s
    _, started = mapper.expect(P.Started)
    before, done, _ = until(mapper, P.Done, 5)
    progress = [(m, at) for m, at in before if type(m) is P.Progress]
    assert len(progress) == len(before) == 4, before  # at 0.25, 0.5, 0.75, 1.0 s
    fractions = [m.progress for m, _ in progress]
    assert fractions == sorted(fractions) and len(set(fractions)) == 4
    for k, f in enumerate(fractions, 1):
        assert f == pytest.approx(k * 0.25 / 1.2, abs=0.05), fractions
    gaps = [b - a for (_, a), (_, b) in zip(progress, progress[1:], strict=False)]
    assert all(0.25 - 0.1 <= g <= 0.25 + 0.1 for g in gaps), gaps
    assert done.finished - started.started == pytest.approx(1.2, abs=TOL)


def test_a_resumed_job_does_what_is_left(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, checkpoint=0.3)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=1.6, progress=0.5))
    _, started = mapper.expect(P.Started)
    before, done, _ = until(mapper, P.Done, 5)
    assert done.finished - started.started == pytest.approx(0.8, abs=TOL)  # half of 1.6
    fractions = [m.progress for m, _ in before if type(m) is P.Progress]
    assert fractions and fractions[0] == pytest.approx(0.5 + 0.3 / 1.6, abs=0.05), fractions


# ---------------------------------------------------------------------- share changes


def test_share_zero_suspends_and_a_positive_share_resumes(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, checkpoint=0.3)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=1.0))
    _, started = mapper.expect(P.Started)
    _, first = mapper.expect(P.Progress)
    mapper.send(ident, P.Share(0.0))
    t0 = time.time()
    during = mapper.collect(0.8)  # suspended: no end, and checkpoints without progress
    assert during and all(type(m) is P.Progress for m, _ in during), during
    frozen = {round(m.progress, 6) for m, _ in during[1:]}
    assert len(frozen) == 1 and first.progress <= min(frozen) <= first.progress + 0.15, (first, during)
    mapper.send(ident, P.Share(1.0))
    paused = time.time() - t0
    _, done, _ = until(mapper, P.Done, 5)
    assert done.finished - started.started == pytest.approx(1.0 + paused, abs=TOL)
    assert done.achieved_share == pytest.approx(1.0 / (1.0 + paused), abs=0.05)  # time-weighted


def test_a_lower_share_stretches_what_is_left(mapper: FakeMapper, start) -> None:
    start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, checkpoint=0.4)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=1.0))
    _, started = mapper.expect(P.Started)
    _, first = mapper.expect(P.Progress)  # ~0.4 done
    mapper.send(ident, P.Share(0.5))
    _, done, _ = until(mapper, P.Done, 5)
    elapsed = done.finished - started.started
    # 0.4 s at full speed, the remaining 0.6 at half speed: 1.6 s; a little more for the message's trip
    assert 1.6 - TOL / 2 <= elapsed <= 1.6 + 2 * TOL, elapsed
    assert done.achieved_share == pytest.approx(1.0 / elapsed, abs=0.03)  # work 1.0 over its wall time


def test_no_ready_at_share_zero(mapper: FakeMapper, start) -> None:
    start(slots=2)
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, slots=2)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=30.0))
    mapper.expect(P.Started)
    mapper.send(ident, P.Share(0.0))
    mapper.send(ident, P.CancelMsg(1))
    mapper.quiet(0.4)  # a machine without CPU to give does not ask for work
    mapper.send(ident, P.Share(0.25))
    _, ready = mapper.expect(P.Ready)
    assert (ready.slots, ready.share) == (2, 0.25)


def test_spin_progress_and_suspension(no_children_left, mapper: FakeMapper, start) -> None:
    p = start(executors=("spin",))
    ident, hello = mapper.expect(P.Hello, 10)
    assert hello.speed > 0
    mapper.welcome(ident, executor="spin", checkpoint=0.2)
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=1.5))  # 1.5 CPU seconds
    mapper.expect(P.Started)
    _, first = mapper.expect(P.Progress)
    _, second = mapper.expect(P.Progress)
    assert 0 < first.progress < second.progress < 1
    worker = psutil.Process(p.puller.runner.kits[0].worker.pid)
    mapper.send(ident, P.Share(0.0))
    wait_for(lambda: is_suspended(worker.pid), 2.0)
    _, a = mapper.expect(P.Progress)
    _, b = mapper.expect(P.Progress)
    assert b.progress == pytest.approx(a.progress, abs=0.01)  # stopped: no iterations
    mapper.send(ident, P.Share(1.0))
    before, done, _ = until(mapper, P.Done, 20)
    assert not is_suspended(worker.pid)
    assert 0 < done.achieved_share <= 1


# ---------------------------------------------------------------------- failures


def _seed_with_first_periods(failures: Callable[[int], tuple], up: tuple[float, float],
                             down: tuple[float, float]) -> int:
    for seed in range(1000):
        periods = process_from_wire(failures(seed), 0, 1.0)
        if up[0] <= periods.next().duration <= up[1] and down[0] <= periods.next().duration <= down[1]:
            return seed
    raise AssertionError("no such seed")


def test_going_down_kills_every_replica(mapper: FakeMapper, start) -> None:
    seed = _seed_with_first_periods(lambda s: ("weibull", 1.0, 1.0, 0.5, 0.1, s), (0.8, 1.5), (0.2, 0.8))
    start(slots=2)
    ident, hello = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, slots=2, failures=("weibull", 1.0, 1.0, 0.5, 0.1, seed))
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, work=30.0))
    mapper.send(ident, job(2, work=30.0, stage=30.0))
    mapper.expect(P.Started)
    mapper.expect(P.Started)
    _, back = mapper.expect(P.Hello, 6)  # down, silent, back: nothing reported in between
    assert back.incarnation != hello.incarnation
    assert (back.holds, back.finished) == ((), ())


def test_failures_start_with_begin_not_with_the_welcome(mapper: FakeMapper, start) -> None:
    """A welcome before the run carries no law: the machine stays up however long registration takes;
    Begin starts the machine's failure periods from its arrival."""
    seed = _seed_with_first_periods(lambda s: ("weibull", 1.0, 1.0, 0.5, 0.1, s), (0.3, 0.6), (0.2, 0.8))
    start(slots=1)
    ident, hello = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, slots=1, failures=None)
    mapper.expect(P.Ready)
    with pytest.raises(AssertionError, match="no Hello within"):  # up past its first up period: no law, no failure
        mapper.expect(P.Hello, 1.0)
    mapper.send(ident, P.Begin(("weibull", 1.0, 1.0, 0.5, 0.1, seed)))
    sent = time.monotonic()
    _, back = mapper.expect(P.Hello, 6)  # down after its first up period, then back as a new incarnation
    assert back.incarnation != hello.incarnation
    assert time.monotonic() - sent >= 0.3 + 0.2


def test_a_failure_model_it_cannot_draw_is_refused(mapper: FakeMapper, start) -> None:
    p = start()
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, failures=("weibull", 100.0, 0.01, 10.0, 1.0, 7))  # valid on the wire; shape < 0.1
    _, bye = mapper.expect(P.Bye)
    assert "failure model" in bye.reason and "shape" in bye.reason
    assert p.wait(5) == 2


def test_command_share_zero_suspends_it(no_children_left, mapper: FakeMapper, start,
                                                    tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    naps = ("import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n"
            "for _ in range(20): time.sleep(0.05)\n")
    allow = AllowList({"nap": (sys.executable, "-c", naps, str(pidfile))}, frozenset(), {})
    start(executors=("command",), allowlist=allow)
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident, executor="command")
    mapper.expect(P.Ready)
    mapper.send(ident, job(1, key="nap"))
    _, started = mapper.expect(P.Started)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().isdigit(), 5.0)
    proc = psutil.Process(int(pidfile.read_text()))
    mapper.send(ident, P.Share(0.0))
    wait_for(lambda: is_suspended(proc.pid), 2.0)
    t0 = time.time()
    mapper.quiet(0.6)  # stopped: its naps do not go on
    assert is_suspended(proc.pid)
    mapper.send(ident, P.Share(1.0))
    paused = time.time() - t0
    _, done, _ = until(mapper, P.Done, 10)
    assert done.finished - started.started >= 1.0 + paused - 0.2  # its 1 s of naps, after the pause
    # A replica cancelled while suspended is killed, not left stopped (no_children_left checks).
    pidfile.unlink()  # before the job: its process may write the file before Started arrives
    mapper.send(ident, job(2, key="nap"))
    mapper.expect(P.Started)
    wait_for(lambda: pidfile.exists() and pidfile.read_text().isdigit(), 5.0)
    second = psutil.Process(int(pidfile.read_text()))
    mapper.send(ident, P.Share(0.0))
    wait_for(lambda: is_suspended(second.pid), 2.0)
    mapper.send(ident, P.CancelMsg(2))
    wait_for(lambda: not second.is_running() or second.status() == psutil.STATUS_ZOMBIE, 5.0)


def test_each_slot_has_its_own_worker_and_throttle(no_children_left) -> None:
    runner = Runner("auto", "M1")
    try:
        runner.calibrate()
        jobs = [runner.start("spin", job(r, work=30.0), slot, None, 0.5, 1.0, time.time())
                for slot, r in ((0, 1), (1, 2))]
        k0, k1 = runner.kits[0], runner.kits[1]
        assert k0.worker is not k1.worker and k0.throttle is not k1.throttle
        assert k0.throttle.share == k1.throttle.share == 0.5  # each replica at a_j, as the model says
        wait_for(lambda: all((j.progress(time.time()) or 0) > 0 for j in jobs), 5.0)
        jobs[0].set_share(0.0, time.time())
        stopped = psutil.Process(jobs[0].pid)
        wait_for(lambda: is_suspended(stopped.pid), 2.0)
        jobs[1].set_share(0.25, time.time())
        assert k1.throttle.share == 0.25
        frozen = jobs[0].progress(time.time())
        time.sleep(0.3)
        assert jobs[0].progress(time.time()) == pytest.approx(frozen, abs=0.002)
        for j in jobs:
            j.kill()  # a stopped worker too
        assert not stopped.is_running() or stopped.status() == psutil.STATUS_ZOMBIE
    finally:
        runner.close()


@pytest.mark.parametrize("backend", available_backends())
def test_share_zero_on_the_slot_throttle_leaves_nothing_suspended(no_children_left, backend: str) -> None:
    """Share 0 is the slot's throttle suspending the job, on every backend: no iteration while suspended, the
    job goes on when the share is back; cancelled while suspended it is killed and reaped, the fresh worker
    waits suspended, and closing the runner (what the puller does when it exits) leaves nothing behind."""
    runner = Runner(backend, "M1")
    try:
        runner.calibrate()
        first = runner.start("spin", job(1, work=30.0), 0, None, 0.0, 1.0, time.time())  # suspended from the start
        kit = runner.kits[0]
        assert kit.throttle.backend == backend and kit.throttle.suspended and is_suspended(first.pid)
        assert first.progress(time.time()) == 0.0
        time.sleep(0.3)
        assert first.progress(time.time()) == 0.0
        first.set_share(1.0, time.time())
        assert not is_suspended(first.pid)
        wait_for(lambda: (first.progress(time.time()) or 0) > 0, 5.0)
        first.set_share(0.0, time.time())
        assert is_suspended(first.pid)
        held = first.progress(time.time())
        time.sleep(0.3)
        assert first.progress(time.time()) == held
        killed = psutil.Process(first.pid)
        first.kill()  # cancelled while suspended
        assert not killed.is_running(), "the suspended worker was not killed and reaped"
        second = runner.start("spin", job(2, work=30.0), 0, None, 0.0, 1.0, time.time())
        assert second.pid != killed.pid and is_suspended(second.pid)
    finally:
        runner.close()
