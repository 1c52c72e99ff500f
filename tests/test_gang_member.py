"""puller.gang_member and adjuster.failures.SlotSchedule: a member plays the simulation's chain, suspends and kills
its job as its availability says, and checks every value the mapper sends against what it holds."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
import zmq

from adjuster.failures import SlotSchedule
from mgst.availability.markov3 import Markov3Group, Markov3Process
from mgst.testbed.casanova_beside import TRIAL, markov3_form
from mgst.wire import gang_protocol as G
from mgst.wire.frames import Drop
from mgst.wire.gang_protocol import RECEIVE_PER_PASS
from puller.gang_member import DOWN, RECLAIMED, UP, GangMember, Job

MATRIX = ((0.9, 0.05, 0.05), (0.2, 0.7, 0.1), (0.3, 0.1, 0.6))
WAIT = 20.0  # the longest any event of these tests is awaited (s)


def test_a_member_plays_the_chain_the_simulation_plays_with_boundaries_from_the_start():
    seed, worker, unit, start = 11, 3, 0.25, 1000.0
    schedule = SlotSchedule(markov3_form(MATRIX, seed), worker, unit, start)
    sim = Markov3Process(Markov3Group(MATRIX, 1.0), 1.0, seed, TRIAL, worker)
    slot = 0.0
    for _ in range(200):
        expected = sim.next()
        assert (schedule.period.state, schedule.period.duration) == (expected.state, expected.duration)
        slot += expected.duration
        assert schedule.ends_at == start + slot * unit  # from the start: no drift however late it is played
        schedule.advance()


def test_a_stopped_job_does_no_work():
    job = Job()
    try:
        began = time.monotonic()
        job.go(1, 0.3, 0.05)
        job.stop(True)
        with pytest.raises(subprocess.TimeoutExpired):
            job.proc.wait(0.5)  # stopped: its 0.3 s of work cannot end
        job.stop(False)
        assert job.proc.wait(WAIT) == 0
        assert time.monotonic() - began >= 0.5 + 0.3 - 0.02
    finally:
        job.kill()


@pytest.mark.parametrize("hangup", ["default", "ignored"])
def test_a_member_that_dies_leaves_no_stopped_job(hangup):
    """Its job is in a process group of its own: orphaned with a stopped member, the kernel continues it and hangs
    it up (and a running job sees its parent gone). A member started under nohup ignores the hangup, and so does
    its job: continued, the job must still see that the member that started it is gone, even when it was stopped
    before it read its line (stop right after go, as here)."""
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {os.getcwd()!r})
        if {hangup!r} == "ignored":
            signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts it
        from puller.gang_member import Job
        job = Job(); job.go(1, 60.0, 0.05); job.stop(True)  # (returns once it is stopped)
        print(job.proc.pid, flush=True)
        os._exit(0)
    """)
    member = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert member.stdout is not None
    pid = int(member.stdout.readline())
    member.stdout.close()
    assert member.wait(WAIT) == 0
    try:
        psutil.Process(pid).wait(WAIT)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        os.kill(pid, 9)
        raise AssertionError("the dead member's stopped job was left behind") from None


@pytest.fixture
def wire():
    """A member connected to a ROUTER on a free loopback port; the router, the member's routing id there, and a
    function reading what the member says."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    member = GangMember(router.getsockopt_string(zmq.LAST_ENDPOINT), 2, ctx, insecure=True)
    member._send(G.GangHello(G.GANG_PROTOCOL_VERSION, 2, time.time()))
    assert router.poll(int(WAIT * 1000))
    identity = router.recv_multipart()[0]

    def said():
        assert router.poll(int(WAIT * 1000)), "the member said nothing"
        return G.decode(router.recv_multipart()[1], G.FROM_MEMBER)

    yield member, said, router, identity
    for job in (member.job, member.standby):
        if job is not None:
            job.kill()
    member._stop_monitor()
    member.socket.close(0)
    router.close(0)
    ctx.term()


@pytest.fixture
def wired(wire):
    """The member and what it says."""
    member, said, _, _ = wire
    return member, said


def _chunks(transfer: int, kind: str, total: int, size: int) -> list[G.Chunk]:
    return [G.Chunk(transfer, kind, o, total, b"x" * min(size, total - o)) for o in range(0, total, size)]


def test_a_member_takes_a_transfer_in_order_and_says_when_its_last_byte_arrived(wired):
    member, said = wired
    first, second = _chunks(5, G.PROGRAM, 10, 6)
    member._handle(second)  # out of order: refused
    assert member.drops == 1 and not member.program
    member._handle(first)
    member._handle(G.Chunk(5, G.DATA, 6, 10, b"xxxx"))  # the same transfer, another kind: refused
    member._handle(G.Chunk(5, G.PROGRAM, 6, 12, b"xxxx"))  # another total: refused
    assert member.drops == 3
    member._handle(second)
    assert member.program and said() == G.Received(5)


def test_a_member_computes_only_with_its_program_and_data(wired):
    member, said = wired
    member._handle(G.Compute(1, 5.0))
    assert member.job is None and member.drops == 1
    for c in _chunks(1, G.PROGRAM, 5, 5) + _chunks(2, G.DATA, 3, 5):
        member._handle(c)
    assert [said(), said()] == [G.Received(1), G.Received(2)]
    member._handle(G.Compute(1, 5.0))
    assert member.job is not None and member.job.gang == 1


def _computing(member: GangMember, said) -> Job:
    for c in _chunks(1, G.PROGRAM, 5, 5) + _chunks(2, G.DATA, 3, 5):
        member._handle(c)
    assert [said(), said()] == [G.Received(1), G.Received(2)]
    member._handle(G.Compute(7, 30.0))
    assert member.job is not None
    return member.job


def _status(job: Job) -> str:
    return psutil.Process(job.proc.pid).status()


def test_reclaimed_suspends_the_job_and_up_continues_it(wired):
    member, said = wired
    job = _computing(member, said)
    member._enter(RECLAIMED, 12)
    assert job.stopped and said() == G.StateChanged(RECLAIMED, 12)
    member._handle(G.Hold(7, True))  # the mapper lets the gang go on: still RECLAIMED here, still stopped
    assert job.stopped
    member._enter(UP, 15)
    assert not job.stopped and _status(job) != psutil.STATUS_STOPPED


def test_a_peer_not_up_holds_the_job_and_a_lost_gang_kills_it(wired):
    member, said = wired
    job = _computing(member, said)
    member._handle(G.Hold(7, False))
    assert job.stopped
    member._handle(G.Hold(7, True))
    assert not job.stopped
    member._handle(G.Stop(7))
    assert member.job is None and job.proc.returncode is not None


def test_down_kills_the_job_and_clears_the_program_cache_and_data(wired):
    member, said = wired
    job = _computing(member, said)
    member._handle(_chunks(3, G.DATA, 10, 4)[0])  # a transfer under way
    member._enter(DOWN, 20)
    assert job.proc.returncode is not None and member.job is None
    assert not member.program and not member.data and not member.partial
    assert said() == G.StateChanged(DOWN, 20)


def test_a_member_needs_its_key_or_an_explicit_insecure_and_says_so_in_one_line(tmp_path, capsys):
    from puller.gang_member import main  # noqa: PLC0415

    with pytest.raises(SystemExit) as e:
        main(["--connect", "tcp://127.0.0.1:5555", "--worker", "3", "--keys", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith("error: --keys: ") and "member-3.key_secret" in err
    assert err.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        main(["--connect", "tcp://127.0.0.1:5555", "--worker", "3"])
    assert e.value.code == 2 and "--keys --insecure is required" in capsys.readouterr().err
    with pytest.raises(ValueError, match="needs CURVE keys, or insecure"):
        GangMember("tcp://127.0.0.1:5555", 3)


def test_a_mapper_that_floods_is_read_in_bounded_passes_and_logged_at_a_bounded_rate(wire, caplog):
    """Bad frames from the mapper without pause: each pass takes at most RECEIVE_PER_PASS (the member's chain gets its
    boundaries between passes), every one is dropped and counted by its reason, and the log gets a few lines, not
    one per frame; a good order behind the flood is still carried out."""
    member, said, router, identity = wire
    caplog.set_level(logging.WARNING, logger="puller")
    flood = 3 * RECEIVE_PER_PASS + 7
    began = time.monotonic()
    for _ in range(flood):
        router.send_multipart([identity, b"\x93\x01\x02\x03"])  # not a map
    for chunk in _chunks(7, G.PROGRAM, 10, 10):
        router.send_multipart([identity, G.encode(chunk)])
    passes = []
    deadline = time.monotonic() + WAIT
    while not member.program and time.monotonic() < deadline:
        if member.socket.poll(100):
            before = member.drops + member.program
            assert not member._receive_pass()
            passes.append(member.drops + member.program - before)
    assert member.program and said() == G.Received(7)
    assert member.drops == flood and member.drop_log.counts == {Drop.NOT_A_MAP: flood}
    assert max(passes) <= RECEIVE_PER_PASS
    lines = [r for r in caplog.records if "dropped a message" in r.getMessage()]
    assert 1 <= len(lines) <= 10 + (time.monotonic() - began) / 5 + 1, len(lines)


def test_a_message_of_several_frames_is_dropped_not_obeyed_frame_by_frame(wire):
    """A program sent as one message of two frames (its two chunks) was taken chunk by chunk: now the message is
    read whole and dropped (wrong frame count); the same chunks as two messages are taken."""
    member, said, router, identity = wire
    first, second = _chunks(9, G.PROGRAM, 10, 6)
    router.send_multipart([identity, G.encode(first), G.encode(second)])
    assert member.socket.poll(int(WAIT * 1000))
    assert not member._receive_pass()
    assert not member.program and member.drop_log.counts == {Drop.FRAMES: 1}
    for chunk in (first, second):
        router.send_multipart([identity, G.encode(chunk)])
    deadline = time.monotonic() + WAIT
    while not member.program and time.monotonic() < deadline:
        if member.socket.poll(100):
            member._receive_pass()
    assert member.program and said() == G.Received(9)


@pytest.mark.parametrize("welcomed", [False, True], ids=["awaiting its welcome", "welcomed"])
def test_a_member_leaves_once_the_process_it_goes_with_ends(welcomed):
    """A gang run's driver killed outright (SIGKILL) never says bye: its members waited for one for ever, each with
    its job. With --exit-with (as mgst.testbed.gang_local starts them) a member leaves once that process ends, in
    its welcome's wait as in its run; without, it stays (the control)."""
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.bind("tcp://127.0.0.1:*")
    endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
    procs: list[subprocess.Popen] = []
    try:
        driver = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        procs.append(driver)
        members = [subprocess.Popen([sys.executable, "-m", "puller.gang_member", "--connect", endpoint, "--worker",
                                     str(q), "--insecure", *(["--exit-with", str(driver.pid)] if q == 0 else [])],
                                    stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for q in range(2)]
        procs += members
        identities = {}
        for _ in range(2):
            assert router.poll(int(WAIT * 1000)), "no hello"
            identity, frame = router.recv_multipart()
            hello = G.decode(frame, G.FROM_MEMBER)
            identities[hello.worker] = identity
            if welcomed:
                router.send_multipart([identity, G.encode(G.GangWelcome(
                    G.GANG_PROTOCOL_VERSION, hello.worker, 0.1, time.time(), markov3_form(MATRIX, 1)))])
        if welcomed:  # member 0 in its run: it reports its chain's first move (a slot is 0.1 s)
            deadline = time.monotonic() + WAIT
            while router.poll(max(0, int((deadline - time.monotonic()) * 1000))):
                if router.recv_multipart()[0] == identities[0]:
                    break
            else:
                pytest.fail("member 0 said nothing after its welcome")
        driver.kill()
        driver.wait()
        assert members[0].wait(WAIT) == (1 if welcomed else 2)
        with pytest.raises(subprocess.TimeoutExpired):
            members[1].wait(1.0)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        router.close(0)
        ctx.term()


@pytest.mark.parametrize("connect", ["ipc:///tmp/" + "x" * 200, "nonsense://x"], ids=["path too long", "no transport"])
def test_a_member_that_cannot_connect_holds_nothing_open(connect: str, monkeypatch) -> None:
    """An endpoint ZeroMQ refuses when the member's socket connects (a ZMQError, after the wait was opened) leaves
    nothing open: not the socket, its monitor, nor the wait's pipe and the --exit-with pidfd. (Each object is checked
    closed: a count of the process's descriptors moves with other tests' threads in the same worker.)"""
    import puller.gang_member as gang_member

    waits: list[gang_member.Wakeup] = []

    class Recorded(gang_member.Wakeup):
        def __init__(self, exit_with: int | None = None):
            super().__init__(exit_with)
            waits.append(self)

    class Context(zmq.Context):
        def socket(self, kind, **kwargs):
            made = super().socket(kind, **kwargs)
            sockets.append(made)
            return made

    sockets: list[zmq.Socket] = []
    monkeypatch.setattr(gang_member, "Wakeup", Recorded)
    ctx = Context()
    try:
        with pytest.raises(zmq.ZMQError):
            GangMember(connect, 2, ctx, insecure=True, exit_with=os.getpid())
        assert sockets and all(s.closed for s in sockets), sockets  # (the monitor's PAIR is made by pyzmq's own call)
        (wait,) = waits
        assert (wait._r, wait._w, wait.parent_fd) == (-1, -1, None)  # the pipe and the pidfd closed
    finally:
        ctx.destroy(linger=0)
