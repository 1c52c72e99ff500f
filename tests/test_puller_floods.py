"""A mapper that floods a puller, or sends what it never should, cannot grow its memory or its log, hold its timers,
undo its machine's injected reclaim, or stop a gang member playing its chain.

In-thread pullers (``puller_fakes.ThreadPuller``, without CURVE: the limits are the same with it) talk to a raw
ROUTER socket standing in for the mapper, on loopback at a free port; every wait is bounded.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import zmq
from puller_fakes import FakeMapper, job

from mgst.wire import gang_protocol as G
from mgst.wire import protocol as P
from puller import daemon, gang_member, narrator
from puller.daemon import Puller
from puller.gang_member import GangMember


def welcomed(fake: FakeMapper, **fields) -> bytes:
    """The puller's hello, welcomed, and its first request read: its routing id."""
    ident, _ = fake.expect(P.Hello, 10)
    fake.welcome(ident, **fields)
    fake.expect(P.Ready, 10)
    return ident


def peak_kib() -> int:
    return int(next(line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
                    if line.startswith("VmHWM:")))


def test_a_frame_over_the_limit_is_refused_as_it_arrives_not_held(no_children_left, fake: FakeMapper, start) -> None:
    """A 48 MiB frame (the limit is 64 KiB) never reaches the puller's memory whole: ZeroMQ drops the connection
    at its header, so the protocol's own check never sees it (it would count it "frame too large" after holding
    it); the puller reconnects, says hello again and serves the mapper as before."""
    p = start()
    ident = welcomed(fake)
    big = b"\x00" * (48 << 20)
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from now
    before = peak_kib()
    fake.sock.send_multipart([ident, big], copy=False)  # (copied, the sender would hold it twice)
    # the puller finds its connection dropped and says hello again: welcomed, it runs a job
    again = welcomed(fake)
    fake.send(again, job(7, work=0.01))
    fake.expect(P.Started, 10)
    fake.expect(P.Done, 10)
    grew = peak_kib() - before
    drops = dict(p.puller.drops.counts)
    assert p.close() == 0
    assert P.Drop.TOO_LARGE not in drops, drops  # (without the socket's limit: 1, after holding 48 MiB)
    assert grew < 16 << 10, f"the peak resident size grew by {grew} KiB"


class EndlessSocket:
    """A socket with a mapper's heartbeat always waiting: it never says zmq.Again."""

    def __init__(self, limit: int):
        self.frame = P.encode(P.Heartbeat(1, 1.0, -1.0, -1.0))
        self.reads = 0
        self.limit = limit

    def recv(self, flags: int = 0) -> bytes:
        self.reads += 1
        if self.reads > self.limit:
            raise AssertionError(f"a pass read more than {self.limit} frames")
        return self.frame

    def get(self, option: int) -> int:
        assert option == zmq.RCVMORE
        return 0  # (each message one frame)


def test_a_pass_reads_a_bounded_number_of_frames_so_the_puller_s_own_timers_keep_their_time(ctx) -> None:
    """A mapper that sends without pause: each pass of the loop takes RECEIVE_PER_PASS frames, then the loop
    does what is due (heartbeats, ends, availability periods) before the next (the socket stays readable)."""
    puller = Puller("tcp://127.0.0.1:9", "M1", insecure=True, context=ctx)
    sock = EndlessSocket(limit=10 * daemon.RECEIVE_PER_PASS)
    puller.link.sock = sock  # type: ignore[assignment]
    try:
        puller._receive_pass()
        assert sock.reads == daemon.RECEIVE_PER_PASS
        puller._receive_pass()
        assert sock.reads == 2 * daemon.RECEIVE_PER_PASS
    finally:
        puller.link.sock = None
        puller.runner.close()
        puller.wakeup.close()


def test_repeated_refusals_pauses_welcomes_and_jobs_make_a_few_log_lines(fake: FakeMapper, start, caplog) -> None:
    """Each line a mapper can make a puller repeat (a refusal for now, a pause, a welcome again, a replica it runs
    already, a job with every slot taken, a welcome asking more slots than offered) is logged at a bounded rate,
    the next line saying how many were left out; the puller still answers each message."""
    caplog.set_level(logging.INFO)
    p = start()
    ident = welcomed(fake)
    fake.send(ident, job(1, work=1000.0))
    fake.expect(P.Started, 10)
    n = 200
    for i in range(n):
        fake.send(ident, job(1, work=1000.0))  # runs here already
        fake.send(ident, job(100 + i, work=1000.0))  # every slot taken: refused
    busy = [m for m, _ in fake.collect(3.0) if type(m) is P.Failed]
    assert len(busy) == n and {m.code for m in busy} == {P.FAIL_BUSY}, len(busy)
    for _ in range(n):  # each welcome (asking for more slots than offered) undone by a pause, then a refusal
        fake.send(ident, P.Welcome(P.PROTOCOL_VERSION, 0, 1.0, 2.0, 1.0, "emulate", None, 5, 0.0))
        fake.send(ident, P.Paused("the journal cannot be written"))
        fake.send(ident, P.Refused("busy: try again", False))
    fake.collect(2.0)
    assert p.close() == 0
    text = [r.getMessage() for r in caplog.records]
    for says, most in (("runs here already", 3), ("with every slot taken", 3), ("asks for 5 slots", 3),
                       ("paused the run", 3), ("refused this puller for now", 3),
                       ("registered again", narrator.AGAIN_BURST + 3)):  # (a burst, then one per 5 or 10 s)
        lines = [t for t in text if says in t]
        assert 1 <= len(lines) <= most, (says, len(lines))


def test_a_refused_command_s_control_characters_do_not_reach_the_log(fake: FakeMapper, start, caplog) -> None:
    """The command a mapper sends is its own text: refused, its escapes and line breaks are shown escaped, so it
    cannot retitle the operator's terminal nor forge a log line."""
    from puller.allowlist import AllowList  # noqa: PLC0415

    caplog.set_level(logging.INFO)
    p = start(executors=("command",), allowlist=AllowList.build(["sim=/bin/true"]))
    ident = welcomed(fake, executor="command")
    forged = "x\n2026-11-30 12:00:00.000 ERROR M1: FORGED"
    fake.send(ident, job(1, command=("/bin/true\x1b[2J\x1b]0;owned\x07", forged)))
    failed = fake.expect(P.Failed, 10)[1]
    assert failed.code == P.FAIL_REFUSED
    assert p.close() == 0
    refused = [r.getMessage() for r in caplog.records if "command not allowed" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "\x1b" not in refused[0] and "\x07" not in refused[0] and "\n" not in refused[0], repr(refused[0])


def test_a_mapper_s_share_does_not_undo_the_machine_s_injected_reclaim(fake: FakeMapper, start) -> None:
    """The machine's availability has it RECLAIMED at share 0 (its owner has it): its replica is suspended. A
    Share(1.0) from the mapper (which never sends one) does not run it at full speed; as at a welcome, the
    machine's own share holds."""
    p = start()
    ident, _ = fake.expect(P.Hello, 10)
    fake.welcome(ident, failures=("trace", [[1000.0, 1, 0.0]]))  # RECLAIMED at share 0 for 1,000 time units
    said = fake.expect(P.Share, 10)[1]
    assert (said.share, said.state) == (0.0, 1)
    fake.send(ident, job(9, work=0.3))
    fake.expect(P.Started, 10)
    fake.send(ident, P.Share(1.0, 0))
    got = [m for m, _ in fake.collect(1.5)]
    assert p.close() == 0
    assert not [m for m in got if type(m) is P.Done], got  # 0.3 s of work at full speed would be done


def test_a_gang_member_remembers_a_bounded_number_of_data_transfers(ctx) -> None:
    """Only whether it holds data counts (a Compute needs inputs): past MAX_DATA_HELD transfers the oldest is
    forgotten, so a mapper sending transfers without end cannot grow the member's memory."""
    member = GangMember("tcp://127.0.0.1:9", 1, insecure=True, context=ctx)
    try:
        for transfer in range(10 * gang_member.MAX_DATA_HELD):
            member._chunk(G.Chunk(transfer, G.DATA, 0, 1, b"x"))
        assert len(member.data) == gang_member.MAX_DATA_HELD
        assert max(member.data) == 10 * gang_member.MAX_DATA_HELD - 1  # the newest are the ones kept
    finally:
        member._stop_monitor()
        member.socket.close(linger=0)
        member.wakeup.close()


def test_a_gang_member_never_waits_for_a_mapper_that_stops_reading(ctx) -> None:
    """A mapper that reads nothing: the member's messages fill its queue, then are counted and dropped; sending
    never blocks (a blocked member stops playing its availability chain). Small queues and socket buffers both
    sides, so that they fill at once."""
    mapper = ctx.socket(zmq.ROUTER)
    mapper.setsockopt(zmq.RCVHWM, 1)
    mapper.setsockopt(zmq.RCVBUF, 4096)
    mapper.linger = 0
    port = mapper.bind_to_random_port("tcp://127.0.0.1")
    small = zmq.Context()
    small.setsockopt(zmq.SNDHWM, 10)  # (the defaults of the member's socket, set before it connects)
    small.setsockopt(zmq.SNDBUF, 4096)
    member = GangMember(f"tcp://127.0.0.1:{port}", 1, insecure=True, context=small)
    done = threading.Event()

    def flood() -> None:
        for transfer in range(20_000):
            member._send(G.Received(transfer))
        done.set()

    thread = threading.Thread(target=flood, daemon=True)
    try:
        thread.start()
        assert done.wait(30), "the member's send blocked on a mapper that reads nothing"
        assert member.unsent > 0
    finally:
        mapper.close(linger=0)  # (a blocked send ends with the context)
        member._stop_monitor()
        member.wakeup.close()
        small.destroy(linger=0)
        thread.join(30)


def test_throttled_lines_are_a_burst_then_one_per_interval_each_saying_how_many_it_left_out(monkeypatch) -> None:
    from puller import ratelimit  # noqa: PLC0415

    clock = [100.0]
    monkeypatch.setattr(ratelimit.time, "monotonic", lambda: clock[0])
    lines: list[str] = []

    class Lines(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger("test-throttled")
    logger.addHandler(Lines())
    logger.propagate = False
    say = ratelimit.Throttled(5.0, logger, burst=3)
    for i in range(10):
        say.log(logging.WARNING, "line %d", i)
    assert lines == ["line 0", "line 1", "line 2"]
    clock[0] = 104.0  # 0.8 of a line earned: still nothing
    say.log(logging.WARNING, "line %d", 10)
    clock[0] = 105.5
    say.log(logging.WARNING, "line %d", 11)
    assert lines[3:] == ["line 11 (8 more like this suppressed)"]
    clock[0] = 1000.0  # long quiet: a whole burst again, no count to give
    for i in range(4):
        say.log(logging.WARNING, "again %d", i)
    assert lines[4:] == ["again 0", "again 1", "again 2"]


def test_a_law_flipping_every_10_ms_makes_a_burst_of_availability_lines_then_one_a_second(fake, start,
                                                                                          caplog) -> None:
    """A markov3 law the mapper sends flips the machine UP <-> RECLAIMED every slot (1e-300 time units, played as
    10 ms): the puller plays every period (a Share to the mapper each), and its log says so at a bounded rate."""
    caplog.set_level(logging.INFO)
    law = ("markov3", 1e-300, 0.5, 0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 7)
    p = start()
    ident, _ = fake.expect(P.Hello, 10)
    fake.welcome(ident, failures=law, heartbeat=0.2)
    got = [m for m, _ in fake.collect(2.0)]
    assert p.close() == 0
    shares = [m for m in got if type(m) is P.Share]
    lines = [r.getMessage() for r in caplog.records if "reclaim" in r.getMessage()]
    assert len(shares) >= 20, len(shares)  # (a period is 10 ms: some 100 in 2 s, fewer on a busy machine)
    assert 1 <= len(lines) <= narrator.AVAILABILITY_BURST + 4, len(lines)
