"""A mapper that stalls longer than its pullers' liveness keeps its machines: a puller that found it silent
reconnects, and neither that nor a slow answer to its hello is a failure (docs/puller.md, docs/testbed.md)."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable

import zmq
from puller_fakes import FakeMapper, ThreadPuller
from test_testbed import Run, check_every_job_done_once
from test_testbed_attacks import FakePuller, wait_for

from mgst.core.state import MachineState
from mgst.model import Experiment, JobClass, Machine, PolicySpec, SimulationSettings, TestbedSettings
from mgst.testbed.liveness import HEARTBEAT_INTERVAL, LIVENESS
from mgst.testbed.mapper import Mapper
from mgst.wire import protocol as P

STALL = 2.5  # seconds: over the pullers' liveness (5 heartbeat intervals of 0.2 s), with room for a busy machine


def one_busy_machine() -> Experiment:
    """One class of short jobs arriving faster than M1 serves them: M1 always runs one."""
    return Experiment(name="stall", classes=(JobClass("1", 3.0),), machines=(Machine("M1", (2.0,), 1.0),),
                      policy=PolicySpec("fcfs"), simulation=SimulationSettings(horizon=20.0, warmup=1.0),
                      testbed=TestbedSettings(time_unit=0.1, duration=5.0, timeout_factor=10.0))


def stall_once(mapper: Mapper, seconds: float, when: Callable[[float], bool], read_empty: bool = False
               ) -> threading.Event:
    """Stop ``mapper``'s loop for ``seconds``, once, at the first heartbeat slice at which ``when(now)`` holds (as
    a long decision would); the event is set as it stops. ``read_empty``: the woken mapper's socket reads empty (as
    after a SIGSTOP, which stops ZeroMQ's own threads too: the pullers' new connections are still in their
    handshakes when it wakes), so its first slice judges silence as of then."""
    stalled = threading.Event()
    beat = mapper.heartbeats.beat

    def stalling_beat(now: float, drained_at: float, *grace: float) -> None:
        if not stalled.is_set() and mapper.t0 is not None and when(now):
            stalled.set()
            time.sleep(seconds)
            now = time.time()
            # (the mapper looked at the gap before this slice: as it does after a real stall, at the next one)
            mapper.unreachable.beat(now)
            grace = (mapper.unreachable.grace_until,)
            if read_empty:
                drained_at = now
        beat(now, drained_at, *grace)

    mapper.heartbeats.beat = stalling_beat
    return stalled


def test_a_mapper_stalled_past_its_pullers_liveness_loses_no_machine_and_no_replica(tmp_path, no_children_left):
    """The mapper's loop stops for 2.5 s (as a long decision would) while M1 runs a replica. M1's puller hears
    nothing for five heartbeat intervals and says hello again on a new connection, holding the replica. When the
    mapper wakes, its first heartbeat goes to the connection the puller closed, which ZeroMQ reports unreachable:
    that must not take M1 down (losing the replica and counting a failure the run never had) while the puller's
    hello, already waiting, says it is there."""
    exp = one_busy_machine()
    stalled: list[set[int]] = []  # the replicas M1 ran when the mapper stalled
    with Run(exp, tmp_path) as r:
        m = r.mapper

        def running_a_replica(now: float) -> bool:
            if now - m.t0 > 1.0 and m.core.machines[0].replicas:
                stalled.append(set(m.core.machines[0].replicas))
                return True
            return False

        stall_once(m, STALL, running_a_replica)
        run = r.wait()
    assert stalled, "the mapper never stalled with a replica running"
    assert r.mapper.heartbeat_interval == HEARTBEAT_INTERVAL
    journal = r.mapper.journal
    # (a job sent in the instant before the stall may be lost: its send failed, and the new hello lacks it)
    lost = [rid for rid in stalled[0] if journal.replicas[rid].outcome == "lost"]
    assert lost == [], f"replicas running through the stall lost: {lost}"
    assert len(journal.machines[0].periods) == 1, journal.machines[0].periods  # up once, never down
    assert len(journal.machines[0].incarnations) == 1
    check_every_job_done_once(run, tmp_path / "out")


def test_a_hello_that_comes_after_the_woken_mapper_has_read_its_socket_still_keeps_the_machine_up(tmp_path):
    """The hello of a puller that reconnected during a stall may come after the woken mapper has read everything
    waiting (its handshake not done yet: a busy machine, a key to check). A gap in the mapper's heartbeats longer
    than its pullers' patience gives a failed send their liveness window before it is judged: the hello, read
    within it, keeps the machine up. (A fake puller on a raw socket: the test says when its hello goes.)"""
    interval = 0.5  # a grace of 5 x 0.5 s for the test's hello to come in, on a busy machine
    stall = LIVENESS * interval + 1.0  # the puller gives up on it after LIVENESS intervals of silence
    mapper = Mapper(one_busy_machine(), "tcp://127.0.0.1:0", heartbeat_interval=interval, register_timeout=30.0)
    stalled = stall_once(mapper, stall, lambda now: now - mapper.t0 > 0.5)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(mapper.run()), daemon=True)
    ctx = zmq.Context()
    fakes: list[FakePuller] = []
    try:
        thread.start()

        def hello() -> P.Hello:
            return P.Hello(P.PROTOCOL_VERSION, "M1", 7, ("emulate",), 0.0, time.time(), 1, (), ())

        fakes.append(FakePuller(ctx, mapper.endpoint, None))
        fakes[0].send(hello())
        fakes[0].expect(P.Welcome)
        assert stalled.wait(20), "the mapper never stalled"
        # the puller finds the mapper silent (its heartbeats have kept the mapper's view of it fresh meanwhile) ...
        wait_for(lambda: time.time() - fakes[0].mapper_received >= LIVENESS * interval, 20, "the puller's patience")
        fakes[0].close()  # ... and closes that connection ...
        wait_for(lambda: 0 in mapper.unreachable.pending, 20, "the woken mapper's send to the closed connection")
        fakes.append(FakePuller(ctx, mapper.endpoint, None))  # ... and says hello on a new one, only now
        fakes[1].send(hello())
        fakes[1].expect(P.Welcome)
        wait_for(lambda: not mapper.unreachable.pending, 20, "the failed send to be judged")
        assert mapper.core.machines[0].state is not MachineState.DOWN
        assert len(mapper.journal.machines[0].periods) == 1, mapper.journal.machines[0].periods
    finally:
        mapper.stopping = mapper.aborting = True
        thread.join(30)
        for fake in fakes:
            fake.close()
        ctx.destroy(linger=0)
    assert not thread.is_alive() and outcome


def test_a_puller_whose_hello_reached_a_slow_mapper_waits_for_its_answer_on_the_same_connection(
        fake: FakeMapper, ctx: zmq.Context) -> None:
    """A hello the mapper's socket has (the handshake done, the connection never dropped) is answered when the
    mapper gets to it: a new connection would not be faster, and the mapper, reading the first hello late, would
    welcome a connection already closed and find the machine unreachable. The puller says hello once in 3 s
    (six times its first back-off) and is served on that connection when the answer comes."""
    p = ThreadPuller(fake.endpoint, None, ctx, insecure=True)
    try:
        ident, first = fake.expect(P.Hello, 10)
        hellos = [m for m, _ in fake.collect(3.0) if type(m) is P.Hello]
        assert hellos == [], f"{len(hellos)} more hellos while the mapper held the first"
        fake.welcome(ident)
        got, ready = fake.expect(P.Ready, 5)
        assert got == ident
    finally:
        assert p.close() == 0


def test_a_puller_whose_connection_dropped_says_hello_again_after_its_back_off(ctx: zmq.Context) -> None:
    """The other side: a mapper that went away (its process gone, the connection dropped) lost the hello; the puller
    says hello again after its back-off, to the mapper that comes back on the same port."""
    first_mapper = FakeMapper(ctx, None)
    endpoint = first_mapper.endpoint
    p = ThreadPuller(endpoint, None, ctx, insecure=True)
    try:
        first_mapper.expect(P.Hello, 10)
        first_mapper.sock.close(linger=0)  # gone without an answer
        second = FakeMapper(ctx, None, endpoint)
        ident, hello = second.expect(P.Hello, 10)  # well before the 30 s a delivered hello is given
        second.welcome(ident)
        second.expect(P.Ready, 5)
        second.sock.close(linger=0)
    finally:
        assert p.close() == 0


def test_a_puller_starved_of_cpu_reads_what_waits_before_it_takes_the_mapper_for_silent(
        fake: FakeMapper, ctx: zmq.Context) -> None:
    """A puller whose thread got no CPU for longer than its liveness window (a loaded lab machine) while the
    mapper kept sending heartbeats finds its last-heard time old, but the heartbeats are in its socket: it reads
    them and stays on its connection, rather than saying hello on a new one (which, read by a mapper after it had
    judged the old connection gone, cost the machine)."""
    starve, starving, release = threading.Event(), threading.Event(), threading.Event()

    def clock() -> float:
        # (the puller's own thread, stopped at the top of its loop: where it next looks at how long it has heard
        # nothing; a starved process stops anywhere, and this is where it matters)
        if starve.is_set() and sys._getframe(1).f_code.co_name == "_loop":
            starve.clear()
            starving.set()
            assert release.wait(20)
        return time.time()

    interval = 0.2
    p = ThreadPuller(fake.endpoint, None, ctx, insecure=True, clock=clock)
    try:
        ident, _ = fake.expect(P.Hello, 10)
        fake.welcome(ident, heartbeat=interval)
        fake.expect(P.Ready)

        def keep_beating(seconds: float) -> list[P.Message]:
            """Send the puller a heartbeat every 0.1 s for ``seconds``: what it sent meanwhile, but heartbeats."""
            got, seq, end = [], 0, time.monotonic() + seconds
            while (left := end - time.monotonic()) > 0:
                seq += 1
                fake.send(ident, P.Heartbeat(seq, time.time(), -1.0, -1.0))
                got += [m for m, _ in fake.collect(min(0.1, left))]
            return got

        starve.set()
        keep_beating(0.3)
        assert starving.wait(10), "the puller's thread never stopped"
        keep_beating(LIVENESS * interval + 0.5)  # its silence window passes while its heartbeats wait for it
        release.set()
        got = keep_beating(2.0)
        assert [m for m in got if type(m) is P.Hello] == [], "it took the mapper for silent and said hello again"
    finally:
        release.set()
        assert p.close() == 0


def test_a_stall_in_a_run_with_failures_books_no_failure(tmp_path, no_children_left):
    """With a failure law (one that never fails within the run), the woken mapper judged every puller silent at
    its first heartbeat, the pullers' new hellos still in their handshakes: every machine down, booked as its
    failure, every replica resubmitted (a lab engineer's 5 s SIGSTOP of the mapper, 3 runs of 3). Silence is not
    judged within the grace a stall opens."""
    from mgst.model import FailureModel  # noqa: PLC0415

    exp = dataclasses.replace(one_busy_machine(), failures=FailureModel(mean_up=1e9, mean_down=1.0))
    with Run(exp, tmp_path) as r:
        m = r.mapper
        stalled = stall_once(m, STALL, lambda now: now - m.t0 > 1.0 and bool(m.core.machines[0].replicas),
                             read_empty=True)
        run = r.wait()
    assert stalled.is_set(), "the mapper never stalled"
    journal = r.mapper.journal
    assert len(journal.machines[0].periods) == 1, journal.machines[0].periods  # up once, never down
    assert r.mapper.core.machines[0].stats.failures == 0
    check_every_job_done_once(run, tmp_path / "out")


def test_a_mapper_left_without_a_puller_says_so_once_a_stretch(caplog):
    """A stall of the head node past the pullers' --give-up: every puller left, and the mapper ran generation and
    its whole drain with `up 0/6`, saying nothing (its summary: no warning, no cause). It says so after NOBODY_FOR
    seconds, once until a puller is back."""
    import logging  # noqa: PLC0415
    from types import SimpleNamespace  # noqa: PLC0415

    from mgst.testbed.lasting import Lasting  # noqa: PLC0415
    from mgst.testbed.mapper import NOBODY_FOR  # noqa: PLC0415

    fake = SimpleNamespace(by_identity={}, _nobody=Lasting(NOBODY_FOR, again=True),
                           core=SimpleNamespace(queued_count=7))
    say = Mapper._say_if_nobody_is_here
    with caplog.at_level(logging.WARNING, logger="mgst.testbed.mapper"):
        for t in (100.0, 100.0 + NOBODY_FOR / 2, 100.0 + NOBODY_FOR, 100.0 + 2 * NOBODY_FOR):
            say(fake, t)
        assert [r.getMessage()[:50] for r in caplog.records] == ["no puller has been connected for 10 s (every machi"]
        assert "7 jobs queue for no machine" in caplog.records[0].getMessage()
        fake.by_identity = {b"p": 0}  # one back: the stretch is over
        say(fake, 200.0)
        fake.by_identity = {}
        say(fake, 300.0)
        say(fake, 300.0 + NOBODY_FOR)
    assert len(caplog.records) == 2
