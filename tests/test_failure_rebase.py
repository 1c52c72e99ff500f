"""A resumed run re-bases the failure law its pullers play on its clock (Begin.at).

Model time stands still through a mapper's outage and its successor's wait for its pullers, while each puller's
schedule runs on in wall time: without a re-base, every failure after a resume came early in model time by the
outage and the wait. The schedule's arithmetic (no processes), a puller against a fake mapper (in a thread,
loopback), and a real mapper killed and resumed with real pullers (loopback, children reaped).
"""

from __future__ import annotations

import datetime as dt
import re
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq
from puller_fakes import FakeMapper, ThreadPuller, client_keys
from test_resume import count_events, reap, start_mapper, trace_run, wait_for
from test_testbed_attacks import FakePuller, hello
from test_testbed_attacks import client_keys as machine_keys

from adjuster.failures import MAX_SKIPPED_PERIODS, AvailabilitySchedule
from mgst.availability import State
from mgst.config import load_experiment
from mgst.testbed.local_run import start_pullers, stop_pullers
from mgst.testbed.mapper import Mapper
from mgst.wire import protocol as P
from mgst.wire import security

UP, RECLAIMED, DOWN = int(State.UP), int(State.RECLAIMED), int(State.DOWN)
TRACE = ("trace", [[10.0, UP, 1.0], [5.0, DOWN, 0.0], [20.0, RECLAIMED, 0.5], [7.0, UP, 1.0]])


# ---------------------------------------------------------------- the schedule


@pytest.mark.parametrize("at, state, left, then", [
    (0.0, State.UP, 10.0, State.DOWN),  # the run's start: as before
    (4.0, State.UP, 6.0, State.DOWN),
    (12.0, State.DOWN, 3.0, State.RECLAIMED),  # within a DOWN period: the rest of it
    (15.0, State.RECLAIMED, 20.0, State.UP),  # at a boundary: the next period, whole
    (34.5, State.RECLAIMED, 0.5, State.UP),
    (38.0, State.UP, 4.0, None),  # within the trace's last period
])
def test_a_schedule_started_at_a_model_time_plays_the_rest_of_the_period_under_way(at, state, left, then) -> None:
    unit, now = 0.5, 1000.0
    schedule = AvailabilitySchedule(TRACE, 0, unit, now, 1.0, at)
    assert schedule.period.state is state
    assert schedule.ends_at == pytest.approx(now + left * unit)
    if then is not None:
        assert schedule.advance(schedule.ends_at).state is then


@pytest.mark.parametrize("law", [("exponential", 40.0, 8.0, 11), ("weibull", 60.0, 0.7, 9.0, 3.0, 5)])
def test_a_law_started_at_a_model_time_is_the_tail_of_the_same_law_from_its_start(law) -> None:
    """The periods from model time ``at`` are those the law plays from its start (as the simulation beside the run
    does), from ``at`` on: the boundaries are the same model times."""
    unit = 1.0  # (model time = wall time from 0; the laws' periods are far above MIN_PERIOD)
    whole = AvailabilitySchedule(law, 3, unit, 0.0, 1.0)
    boundaries, states = [], [whole.period.state]
    for _ in range(60):
        boundaries.append(whole.ends_at)
        states.append(whole.advance(whole.ends_at).state)
    at = (boundaries[20] + boundaries[21]) / 2  # within the 22nd period
    late = AvailabilitySchedule(law, 3, unit, 500.0, 1.0, at)
    assert late.period.state is states[21]
    for k in range(21, 59):  # each boundary at the same model time: ``at`` is wall 500 now
        assert late.ends_at - 500.0 + at == pytest.approx(boundaries[k], rel=1e-12, abs=1e-9)
        assert late.advance(late.ends_at).state is states[k + 1]


def test_the_schedule_knows_the_model_time_it_plays() -> None:
    """Where in the law a schedule is, at a wall time: from ``at`` at the time unit's pace, held at the end of a
    period not yet advanced (a late timer, a period lengthened to MIN_PERIOD), on from each advance."""
    schedule = AvailabilitySchedule(TRACE, 0, 0.5, 1000.0, 1.0, 12.0)  # DOWN, 3 time units (1.5 s) left
    assert schedule.model_time(1000.0) == 12.0
    assert schedule.model_time(1000.5) == pytest.approx(13.0)
    assert schedule.model_time(1009.0) == 15.0  # (its timer late: held at the DOWN period's end)
    assert schedule.advance(1009.0).state is State.RECLAIMED
    assert schedule.model_time(1009.0) == 15.0
    assert schedule.model_time(1011.0) == pytest.approx(19.0)
    assert AvailabilitySchedule(TRACE, 0, 0.5, 7.0, 1.0).model_time(8.0) == pytest.approx(2.0)  # (from the start)


def test_a_model_time_past_more_periods_than_the_bound_is_refused_saying_so() -> None:
    law = ("exponential", 1e-3, 1e-3, 1)  # a period of 1e-3 on average: MAX_SKIPPED_PERIODS in some 200 time units
    with pytest.raises(ValueError, match=f"more than {MAX_SKIPPED_PERIODS:,} periods"):
        AvailabilitySchedule(law, 0, 1.0, 0.0, 1.0, 1e5)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="model time to start at"):
            AvailabilitySchedule(TRACE, 0, 1.0, 0.0, 1.0, bad)


def test_begin_s_model_time_is_checked_on_the_wire() -> None:
    assert P.decode(P.encode(P.Begin(TRACE, 12.5))) == P.Begin(TRACE, 12.5)
    for bad in (-1.0, float("nan"), float("inf"), "12", None):
        frame = msgpack.packb({"t": "begin", "failures": None, "at": bad})
        with pytest.raises(P.ProtocolError):
            P.decode(frame)
    with pytest.raises(P.ProtocolError):  # (a Begin without its model time is another version's)
        P.decode(msgpack.packb({"t": "begin", "failures": None}))


# ---------------------------------------------------------------- a puller against a fake mapper


@pytest.fixture
def puller(mapper: FakeMapper, keydir: Path, ctx: zmq.Context):
    p = ThreadPuller(mapper.endpoint, client_keys(keydir), ctx)
    yield p
    p.close()


SHORT = ("trace", [[2.0, UP, 1.0], [0.6, DOWN, 0.0], [30.0, UP, 1.0]])  # time unit 1: wall seconds


def test_a_begin_at_a_later_model_time_re_bases_the_schedule_the_puller_plays(mapper: FakeMapper, puller) -> None:
    """Playing SHORT from its start, told it is at model time 2.3 (a resumed mapper's clock): DOWN at once for the
    0.3 left of the down period, then back (not down at 2 s and back at 2.6 s, as its own schedule had it); told
    where it is (within REBASE_TOLERANCE), it changes nothing."""
    ident, first = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(SHORT))
    mapper.send(ident, P.Begin(SHORT, 2.3))
    sent = time.monotonic()
    ident, back = mapper.expect(P.Hello, 5)  # down at once (silent), then a new incarnation's hello
    took = time.monotonic() - sent
    assert back.incarnation != first.incarnation
    assert 0.25 <= took < 1.5, took  # 0.3 s down (its own schedule: 2.6 s); a loaded machine's slack above
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    # Told it is 0.3 s behind where it is (within REBASE_TOLERANCE; a Begin's delivery, a late timer): nothing
    # changes (a re-base would put it back in the down period it just left, for 0.3 s)
    mapper.send(ident, P.Begin(SHORT, 2.3 + (time.monotonic() - sent) - 0.3))
    mapper.quiet(2.5)  # up for good: no second failure at its old schedule's times
    assert puller.puller.drops.counts == {}


def test_re_bases_are_bounded_in_rate_and_a_begin_without_a_law_is_dropped(mapper: FakeMapper, puller) -> None:
    up = ("trace", [[100.0, UP, 1.0]] * 5)  # up throughout: a re-base changes only where in the law it is
    ident, _ = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(up))
    for at in (50.0, 150.0, 250.0, 350.0, 450.0):  # each far from the last: 3 at once (REBASE_BURST), then none
        mapper.send(ident, P.Begin(up, at))
    mapper.send(ident, P.Begin(None, 10.0))
    deadline = time.monotonic() + 5
    while puller.puller.drops.total < 3 and time.monotonic() < deadline:
        mapper.recv(0.05)
    assert puller.puller.drops.counts == {P.Drop.REBASE_RATE: 2, P.Drop.BAD_VALUE: 1}
    schedule = puller.puller.availability.schedule
    assert schedule.model_time(time.time()) == pytest.approx(250.0, abs=2.0)  # the third re-base's


def test_a_begin_the_puller_cannot_play_is_dropped_and_its_schedule_kept(mapper: FakeMapper, puller) -> None:
    ident, first = mapper.expect(P.Hello, 10)
    mapper.welcome(ident)
    mapper.expect(P.Ready)
    mapper.send(ident, P.Begin(SHORT))
    begun = time.monotonic()
    mapper.send(ident, P.Begin(("exponential", 1e-3, 1e-3, 1), 1e5))  # past MAX_SKIPPED_PERIODS periods
    mapper.send(ident, P.Begin(("exponential", 1.0, 1.0, 1), 1e300))  # past the laws' times a puller takes
    ident, back = mapper.expect(P.Hello, 5)  # its own schedule: down at 2 s, back at 2.6 s
    assert time.monotonic() - begun >= 2.55
    assert back.incarnation != first.incarnation
    assert puller.puller.drops.counts == {P.Drop.BAD_VALUE: 2}
    assert puller.wait(0.1) is None  # running on


# ---------------------------------------------------------------- a real mapper killed and resumed

# M1 fails at model time 20 for 5 (wall 4 s after the run's start); M2 stays up.
RESUME_TRACE = "M1,0,20,up,1\nM1,20,25,down,0\nM1,25,100000,up,1\nM2,0,100000,up,1\n"
# M1 fails at model times 5 and 25; M2 stays up.
AWAY_TRACE = "M1,0,5,up,1\nM1,5,15,down,0\nM1,15,25,up,1\nM1,25,28,down,0\nM1,28,100000,up,1\nM2,0,100000,up,1\n"
TIME_UNIT = 0.2  # (TRACE_TOML's, whose run generates jobs for 30 model time units)
# How far from its model time a failure may come on a loaded machine, in model time units (1 s): the Begin's
# delivery, the puller's timer, the log's milliseconds. Without the re-base, the tests' failures come 7 and 10 early.
LATE = 5.0
DOWN_LINE = re.compile(r"M1: injected failure: down at (\d\d:\d\d:\d\d\.\d\d\d)")


def clock_starts(journal: Path) -> list[float]:
    """The wall time of model time 0 each time the clock (re)started: the run's start, then each resume's."""
    with sqlite3.connect(f"file:{journal}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT data FROM events WHERE kind = 'begin' ORDER BY seq").fetchall()
    return [msgpack.unpackb(data)[0] for (data,) in rows]


def _wall(clock: str, near: float) -> float:
    """A log line's local HH:MM:SS.mmm as seconds since the epoch, on the day that puts it nearest ``near``."""
    day = dt.datetime.fromtimestamp(near).date()
    times = [dt.datetime.combine(day + dt.timedelta(days=d), dt.time.fromisoformat(clock)).timestamp()
             for d in (-1, 0, 1)]
    return min(times, key=lambda t: abs(t - near))


def _killed_and_resumed(tmp_path: Path, trace: str, resume_at: float, resume_wait: float | None) -> tuple[list[float],
                                                                                                          str]:
    """A keyed run of M1 and M2 playing ``trace``; its mapper SIGKILLed at model time 2 and resumed at model time
    ``resume_at`` of the first clock: by ``mgst mapper --resume`` (``resume_wait`` None), or in this process with
    that wait for its pullers. The wall times of the clock's starts (the journal's) and the pullers' log."""
    exp_file, keys, out, endpoint = trace_run(tmp_path, trace)
    common = [str(exp_file), "--bind", endpoint, "--keys", str(keys)]
    journal, log = out / "journal.sqlite", tmp_path / "pullers.log"
    procs: list[subprocess.Popen] = [start_mapper([*common, "--out", str(out)])]
    pullers: list[subprocess.Popen] = []
    try:
        pullers = start_pullers(endpoint, ["M1", "M2"], log, keys=keys)
        wait_for(lambda: count_events(journal, "begin") >= 1, 60, "the run's start", procs[0])
        start = clock_starts(journal)[0]
        time.sleep(max(0.0, start + 2 * TIME_UNIT - time.time()))
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        time.sleep(max(0.0, start + resume_at * TIME_UNIT - time.time()))
        if resume_wait is None:
            procs.append(start_mapper([*common, "--resume", str(out)]))
            _, stderr = procs[-1].communicate(timeout=120)
            assert procs[-1].returncode == 0, stderr[-3000:]
        else:
            Mapper(load_experiment(exp_file), endpoint, keys=security.server_keys(keys), out=out, resume=True,
                   resume_wait=resume_wait).run()
        assert [p.wait(timeout=30) for p in pullers] == [0, 0]
    finally:
        reap([*procs, *pullers])
        stop_pullers(pullers)
    return clock_starts(journal), log.read_text()


def _down_model_times(begins: list[float], log: str) -> list[float]:
    """M1's injected failures, in model time of the last clock (a resumed one's)."""
    assert len(begins) == 2, begins
    return [(_wall(m, begins[1]) - begins[1]) / TIME_UNIT for m in DOWN_LINE.findall(log)]


def test_after_a_resume_a_trace_s_failure_comes_at_its_model_time(tmp_path: Path, no_children_left) -> None:
    """The mapper is killed at model time 2 and resumed 1 s later: M1's failure, at model time 20 of its trace,
    comes at model time 20 of the resumed clock (without the re-base, 10 model units early or more: the outage,
    the new mapper's start and its wait)."""
    begins, log = _killed_and_resumed(tmp_path, RESUME_TRACE, 7.0, None)
    model = _down_model_times(begins, log)
    # at 20, within LATE
    assert model and abs(model[-1] - 20.0) < LATE, (model, log[-3000:])
    assert "availability re-based" in log


def test_a_puller_down_when_the_resumed_clock_runs_again_is_re_based_at_its_welcome(tmp_path: Path,
                                                                                    no_children_left) -> None:
    """The mapper is killed at model time 2; M1 goes down by its trace during the outage (model time 5, for 10)
    and is still down when the resumed mapper, which waits 0.5 s, runs its clock again: it is told the model
    time at its next welcome, goes down for what is left of its down period, and fails next at model time 25 of
    the resumed clock (its own schedule had it ~7 model units early)."""
    begins, log = _killed_and_resumed(tmp_path, AWAY_TRACE, 7.0, 0.5)
    model = _down_model_times(begins, log)
    assert len(model) >= 2 and abs(model[-1] - 25.0) < LATE, (model, log[-3000:])
    assert 5.0 < model[-2] < 15.0, model  # down again at its welcome: its down period was not over in model time


def test_every_welcome_after_the_resumed_clock_runs_is_followed_by_the_model_time(tmp_path: Path,
                                                                                   no_children_left) -> None:
    """The Begin sent when a resumed clock runs again can be lost (its puller went down just then, its queue was
    full): every welcome after it is followed by one too, with the model time of the welcome. Scripted pullers
    (they play no law), a real mapper killed, a resumed one in this process."""
    exp_file, keys, out, endpoint = trace_run(tmp_path, RESUME_TRACE)
    names = ["M1", "M2"]
    ctx = zmq.Context()
    first = start_mapper([str(exp_file), "--bind", endpoint, "--keys", str(keys), "--out", str(out)])
    fakes: list[FakePuller] = []
    resumed: Mapper | None = None
    thread = None

    welcomes: list[P.Welcome] = []

    def register() -> list[FakePuller]:
        made = [FakePuller(ctx, endpoint, machine_keys(keys, name)) for name in names]
        fakes.extend(made)
        for fake, name in zip(made, names):
            fake.send(hello(name))
            welcomes.append(fake.expect(P.Welcome, 30))
        return made

    try:
        for fake in register():
            assert fake.expect(P.Begin, 10).at == 0.0  # the run's start
        time.sleep(3 * TIME_UNIT)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        resumed = Mapper(load_experiment(exp_file), endpoint, keys=security.server_keys(keys), out=out, resume=True,
                         context=ctx)
        thread = threading.Thread(target=resumed.run, daemon=True)
        thread.start()
        begins = [fake.expect(P.Begin, 10) for fake in register()]  # all back: the clock runs, each is told
        held = [b.at for b in begins]
        assert held[0] == held[1] > 0, held
        # Welcomed while the clock was held: no law to play yet (a puller started then went down and up in wall
        # time, journalled at the held instant); the Begin gives it, from the model time.
        assert [w.failures for w in welcomes[-2:]] == [None, None]
        assert [b.failures for b in begins] == [resumed.messages.failure_law(0), resumed.messages.failure_law(1)]
        m1 = fakes[-2]
        m1.send(hello("M1"))  # M1 again, a new incarnation (as after a failure, its Begin lost or not)
        m1.expect(P.Welcome)
        again = m1.expect(P.Begin)
        assert again.failures == resumed.messages.failure_law(0)
        assert held[0] < again.at < resumed.clock.model_now(time.time()) + 1e-9
    finally:
        if resumed is not None and thread is not None:
            resumed.stopping = True
            thread.join(30)
        for fake in fakes:
            fake.close()
        reap([first])
        ctx.destroy(linger=0)
    assert thread is not None and not thread.is_alive()
