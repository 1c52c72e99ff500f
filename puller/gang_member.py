"""A gang member: a puller that receives a gang run's real transfers and computes its part of each iteration.

It connects a DEALER to the gang run's mapper (mgst.wire.gang_protocol), says hello as worker q, and from the
welcome's start follows its own markov3 chain through the adjuster (adjuster.failures.SlotSchedule): RECLAIMED
stops its job (SIGSTOP), UP continues it, DOWN kills it and clears its program cache, its data and any partial
transfer. It keeps the program until DOWN and each data message until the mapper releases it or cancels it,
reports each transfer whose last byte arrived, and each part of a gang its job finished. Every value the
mapper sends is checked twice: by the protocol's bounds, then against what this member holds (a chunk must
continue its transfer, a computation needs the program and data); a bad one is logged and dropped.

Its wire is CURVE as a puller's is (mgst.wire.security): with its key pair and the mapper's public key it talks
only to the holder of that key, and the mapper admits it as worker q only with worker q's key. A handshake the
mapper refuses (a key it does not admit, a mapper without keys) ends the member at once, saying what is probably
wrong. Without keys (``--insecure``, said explicitly) it warns that anyone can pose as its mapper.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from adjuster.failures import SlotSchedule
from mgst.wire import gang_protocol as G
from mgst.wire import security
from mgst.wire.drops import DropLog
from mgst.wire.frames import Drop, ProtocolError, one_message
from puller.memory_guard import MemoryGuard
from puller.ratelimit import Throttled
from puller.reach import EVENTS, Reach
from puller.wakeup import Wakeup

log = logging.getLogger(__name__)

UP, RECLAIMED, DOWN = 0, 1, 2
JOB = Path(__file__).with_name("gang_job.py")
# Transfers a member receives at once: the core sends one at a time to a worker; a few more are a mapper's bug.
MAX_PARTIAL = 8
# Data transfers a member remembers having received: only whether it holds any counts (a Compute needs its
# inputs), so past this many the oldest is forgotten. A run sends a worker one per iteration while its
# configuration holds it; without a bound a mapper could grow the member's memory by a few dozen bytes a transfer.
MAX_DATA_HELD = 64
# How long a member waits for its welcome (s); how far ahead the run's start may be, and how far behind (a
# member slow to read its welcome plays the periods it missed at once: the chain's boundaries are from the start).
WELCOME_WAIT = 60.0
MAX_LEAD = 60.0
MAX_LATE = 10.0
# The longest a member sleeps in one poll (s): a chain's absorbing state has no end.
POLL_MAX = 1.0
# The exit code of a member that left because its connection held a message that never ends (EX_PROTOCOL, sysexits.h).
EXIT_HELD_TOO_MUCH = 76
HELD_TOO_MUCH = "its connection held a message that never ends"  # (its bye's reason)
HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


class Job:
    """A part of a gang: a child process started ahead (its own process group, so that a member that dies leaves
    no stopped orphan: the kernel continues and hangs up an orphaned stopped group), told its seconds by
    :meth:`go`, and the pidfd that says it ended."""

    def __init__(self) -> None:
        self.gang = -1
        self.proc = subprocess.Popen([sys.executable, "-I", "-S", str(JOB), str(os.getpid())], process_group=0,
                                     stdin=subprocess.PIPE)
        self.fd = os.pidfd_open(self.proc.pid)
        self.stopped = False

    def go(self, gang: int, seconds: float, stall: float) -> None:
        assert self.proc.stdin is not None
        self.gang = gang
        self.proc.stdin.write(f"{seconds!r} {stall!r}\n".encode())
        self.proc.stdin.close()

    def stop(self, stopped: bool) -> None:
        """Stop or continue it, and wait until it is (so that a member that dies just after leaves it stopped,
        which the kernel sees to, or running, when it sees its parent gone; never in between)."""
        if stopped != self.stopped and self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGSTOP if stopped else signal.SIGCONT)
            _, status = os.waitpid(self.proc.pid, os.WUNTRACED if stopped else os.WCONTINUED)
            if os.WIFEXITED(status) or os.WIFSIGNALED(status):  # it ended first: Popen must not wait for it
                self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.stopped = stopped

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL ends a stopped process too
        self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        os.close(self.fd)


class GangMember:
    """One worker of a gang run; :meth:`run` returns the exit code (0: the mapper's bye)."""

    def __init__(self, connect: str, worker: int, context: zmq.Context | None = None,
                 keys: security.ClientKeys | None = None, insecure: bool = False, exit_with: int | None = None,
                 memory_guard: MemoryGuard | None = None):
        if keys is None and not insecure:
            raise ValueError("a gang member needs CURVE keys, or insecure=True to run without them")
        if keys is not None and insecure:
            raise ValueError("keys and insecure=True contradict each other")
        if keys is None:
            log.warning("--insecure: no CURVE; anyone who can reach this machine or %s can pose as the gang run's "
                        "mapper or read its transfers", connect)
        # The process this member goes with (its run's driver): once it ends, however it ends, the member leaves (its
        # job killed) rather than wait for a bye that will not come. ProcessLookupError if it has ended already. Its
        # pidfd is polled beside the member's sources, as a puller's is (puller/wakeup.py).
        self.exit_with = exit_with
        self.worker = worker
        self.context = context or zmq.Context.instance()
        # how the handshake goes, until the welcome: a refused one is this member's end
        self.reach = Reach(connect, keys, time.monotonic)
        self.wakeup = Wakeup(exit_with)
        try:  # (a socket that cannot be made or connected leaves nothing open: neither the wait's pipe nor itself)
            self.socket, self.monitor = self._connected(connect, keys)
        except BaseException:
            self.wakeup.close()
            raise
        self.state = UP
        self.program = False
        self.data: dict[int, int] = {}  # transfer -> bytes, held while the configuration holds this worker
        self.partial: dict[int, tuple[str, int, int]] = {}  # transfer -> (kind, total, bytes so far)
        self.job: Job | None = None
        self.standby: Job | None = None  # the next part's process, started ahead
        self.held = False  # the mapper holds the gang (a peer is not UP)
        self.drops = 0
        self.drop_log = DropLog(log)  # counted by reason, logged at a bounded rate (a mapper cannot flood it)
        self.unsent = 0  # messages the mapper's full queue did not take
        self.unsent_log = Throttled(10.0, log)
        self.time_unit = 1.0
        # What a message that never ends can make ZeroMQ hold (puller/memory_guard.py): a gang run's mapper does
        # not come back, so the member does not connect again, as a puller does; it leaves (EXIT_HELD_TOO_MUCH).
        self.memory_guard = memory_guard or MemoryGuard()
        self.memory_guard.reset(time.monotonic())

    def _connected(self, connect: str, keys: security.ClientKeys | None) -> tuple[zmq.Socket, zmq.Socket | None]:
        """The member's socket, secured and connecting to ``connect``, and its monitor; closed again if any step
        fails (a ZMQError: an endpoint ZeroMQ refuses, a key it cannot take)."""
        socket = self.context.socket(zmq.DEALER)
        monitor: zmq.Socket | None = None
        try:
            socket.setsockopt(zmq.LINGER, 1000)
            socket.setsockopt(zmq.MAXMSGSIZE, G.MAX_FRAME)
            if security.needs_ipv6(connect):
                socket.setsockopt(zmq.IPV6, 1)
            if keys is not None:
                security.secure_client(socket, keys)
            monitor = socket.get_monitor_socket(EVENTS)
            socket.connect(connect)
        except BaseException:
            if monitor is not None:
                with contextlib.suppress(zmq.ZMQError):
                    socket.disable_monitor()
                monitor.close(0)
            socket.close(0)
            raise
        return socket, monitor

    # ------------------------------------------------------------------ the run

    def run(self) -> int:
        try:
            self._send(G.GangHello(G.GANG_PROTOCOL_VERSION, self.worker, time.time()))
            welcome = self._welcome()
            if welcome is None:
                held_too_much = self.memory_guard.trips > 0
                reason = HELD_TOO_MUCH if held_too_much else "no welcome it could take"
                with contextlib.suppress(zmq.Again):  # (after a refused handshake there is no one to hear it)
                    self.socket.send(G.encode(G.GangBye(reason)), zmq.NOBLOCK)
                return EXIT_HELD_TOO_MUCH if held_too_much else 2
            self.time_unit = welcome.time_unit
            schedule = SlotSchedule(welcome.failures, self.worker, welcome.time_unit, welcome.start)
            self.standby = Job()
            return self._loop(schedule)
        finally:
            for job in (self.job, self.standby):
                if job is not None:
                    job.kill()
            self._stop_monitor()
            self.socket.close()
            self.wakeup.close()

    def _parent_gone(self, events: dict) -> bool:
        """Whether the process of --exit-with has ended (as the wait's ``events`` say)."""
        if not self.wakeup.parent_ended(events):
            return False
        log.warning("the process it goes with (%d, --exit-with) has ended: leaving", self.exit_with)
        return True

    def _until_memory_look(self) -> float:
        """Seconds until the memory guard's next look (a message that never ends never wakes a poll)."""
        return max(0.0, self.memory_guard.next_check - time.monotonic())

    def _held_too_much(self) -> bool:
        """Whether the memory grown since the connection was made is over the guard's limit: a message the mapper
        never ends (ZeroMQ holds its frames until the last); said once, as the member's reason to leave."""
        grown = self.memory_guard.grown_over(time.monotonic())
        if grown is None:
            return False
        log.error("the connection to the mapper made this member grow by %d MiB (over %d MiB): a message that never "
                  "ends; leaving", grown >> 20, self.memory_guard.limit >> 20)
        return True

    def _stop_monitor(self) -> None:
        if self.monitor is not None:
            self.socket.disable_monitor()
            self.monitor.close(0)
            self.monitor = None

    def _welcome(self) -> G.GangWelcome | None:
        """The mapper's welcome; None (logged) if it has none this member can take, or refused its handshake."""
        try:
            return self._await_welcome()
        finally:
            self._stop_monitor()

    def _await_welcome(self) -> G.GangWelcome | None:
        deadline = time.monotonic() + WELCOME_WAIT
        assert self.monitor is not None
        while (left := deadline - time.monotonic()) > 0:
            events = self.wakeup.wait([self.socket, self.monitor], min(left, self._until_memory_look()))
            if self._parent_gone(events) or self._held_too_much():
                return None
            if self.monitor in events and self._refused():
                log.error("the mapper refused this member: %s", self.reach.reason())
                return None
            if self.socket not in events:
                continue
            msg = self._receive()
            if isinstance(msg, G.GangWelcome):
                if msg.version != G.GANG_PROTOCOL_VERSION or msg.worker != self.worker:
                    log.error("welcome for worker %d, protocol %d: not this member's", msg.worker, msg.version)
                    return None
                if not -MAX_LATE <= msg.start - time.time() <= MAX_LEAD:
                    log.error("the run's start is %.1f s away: refused", msg.start - time.time())
                    return None
                return msg
            if isinstance(msg, G.GangBye):
                log.error("the mapper said bye before any welcome: %r", msg.reason)  # (%r: the peer's text)
                return None
        log.error("no welcome within %.0f s: %s", WELCOME_WAIT, self.reach.reason())
        return None

    def _refused(self) -> bool:
        """Read the monitor's events: whether a handshake failed. Each failure is one that will not change during a
        gang run (a key the mapper does not admit, a mapper key that is not the mapper's, a mapper with CURVE where
        this member has none or the other way): the mapper does not restart as the main one may."""
        assert self.monitor is not None
        refused = False
        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            self.reach.event(event["event"], event["value"])
            refused |= bool(event["event"] & HANDSHAKE_FAILED)
        return refused

    def _loop(self, schedule: SlotSchedule) -> int:
        while True:
            now = time.time()
            if now >= schedule.ends_at:
                period = schedule.advance()
                self._enter(int(period.state), int(schedule.slot))
                continue
            if self._held_too_much():
                with contextlib.suppress(zmq.Again):
                    self.socket.send(G.encode(G.GangBye(HELD_TOO_MUCH)), zmq.NOBLOCK)
                return EXIT_HELD_TOO_MUCH
            job = self.job
            wait = min(POLL_MAX, schedule.ends_at - now, self._until_memory_look())
            events = self.wakeup.wait([self.socket] if job is None else [self.socket, job.fd], wait)
            if job is not None and job.fd in events and job.proc.poll() is not None:
                self._job_ended(job)
            if self._parent_gone(events):
                return 1
            if self.socket in events and self._receive_pass():
                return 0

    def _receive_pass(self) -> bool:
        """Take what the mapper sent, at most RECEIVE_PER_PASS frames (then the chain's boundary, if due, before
        more: a mapper sending without pause cannot hold the member's chain); True on its GangBye."""
        for _ in range(G.RECEIVE_PER_PASS):
            if not self.socket.poll(0):
                break
            msg = self._receive()
            if isinstance(msg, G.GangBye):
                return True
            if msg is not None and self.state != DOWN:  # a DOWN machine hears nothing
                self._handle(msg)
        return False

    def _enter(self, state: int, slot: int) -> None:
        """The chain moved to ``state`` at ``slot``: impose it on the job, then say so."""
        self.state = state
        if state == DOWN:
            if self.job is not None:
                self.job.kill()
                self.job = None
            self.program = False
            self.data.clear()
            self.partial.clear()
        elif self.job is not None:
            self.job.stop(state != UP or self.held)
        self._send(G.StateChanged(state, slot))

    def _job_ended(self, job: Job) -> None:
        code = job.proc.returncode
        job.kill()
        self.job = None
        if code == 0:
            self._send(G.Finished(job.gang))
        else:
            log.warning("the job of gang %d exited with %d", job.gang, code)

    # ------------------------------------------------------------------ the mapper's orders

    def _handle(self, msg: Any) -> None:
        if isinstance(msg, G.Chunk):
            self._chunk(msg)
        elif isinstance(msg, G.CancelTransfer):
            self.partial.pop(msg.transfer, None)
            self.data.pop(msg.transfer, None)
        elif isinstance(msg, G.Release):
            self.data.clear()
            self.partial = {k: v for k, v in self.partial.items() if v[0] == G.PROGRAM}
        elif isinstance(msg, G.Compute):
            if not self.program or not self.data:
                return self._drop(Drop.INPUTS_MISSING, f"gang {msg.gang}")
            if self.job is not None:
                self.job.kill()
            self.held = False
            self.job, self.standby = self.standby or Job(), Job()
            self.job.go(msg.gang, msg.seconds, max(0.0125, self.time_unit / 2))
            self.job.stop(self.state != UP)
        elif isinstance(msg, G.Hold | G.Stop):
            job = self.job
            if job is None or job.gang != msg.gang:
                return None  # the part already ended, or was never started here: nothing to do
            if isinstance(msg, G.Stop):
                job.kill()
                self.job = None
            else:
                self.held = not msg.running
                job.stop(self.state != UP or self.held)
        else:
            self._drop(Drop.DIRECTION, type(msg).__name__)
        return None

    def _chunk(self, c: G.Chunk) -> None:
        kind, total, have = self.partial.get(c.transfer, (c.kind, c.total, 0))
        if (kind, total) != (c.kind, c.total) or c.offset != have:
            return self._drop(Drop.CHUNK_ORDER, f"transfer {c.transfer} at {c.offset}, expected {have} of {total}")
        if c.transfer not in self.partial and len(self.partial) >= MAX_PARTIAL:
            return self._drop(Drop.TOO_MANY_TRANSFERS, f"more than {MAX_PARTIAL}")
        have += len(c.payload)
        if have < total:
            self.partial[c.transfer] = (kind, total, have)
            return None
        self.partial.pop(c.transfer, None)
        if kind == G.PROGRAM:
            self.program = True
        else:
            data = self.data
            data[c.transfer] = total
            if len(data) > MAX_DATA_HELD:
                del data[next(iter(data))]  # the oldest (dicts keep their order)
        self._send(G.Received(c.transfer))
        return None

    def _drop(self, reason: str, detail: str = "") -> None:
        self.drops += 1
        self.drop_log.drop(reason, "the mapper", detail)

    # ------------------------------------------------------------------ the wire

    def _send(self, msg: Any) -> None:
        """Never waits for the mapper: a mapper that stops reading cannot stop the member playing its chain (a
        message its full queue will not take is counted and logged, and the member goes on)."""
        try:
            self.socket.send(G.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            self.unsent += 1
            self.unsent_log.log(logging.WARNING, "the mapper reads nothing: its queue is full; %s not sent",
                                type(msg).__name__)

    def _receive(self) -> Any:
        frame, parts = one_message(self.socket)
        if parts > 1:  # a message is one frame
            self._drop(Drop.FRAMES, f"{parts} frames")
            return None
        try:
            return G.decode(frame, G.FROM_MAPPER)
        except ProtocolError as e:
            self._drop(e.reason, e.detail)
            return None


def main(argv: list[str] | None = None) -> int:
    """``python -m puller.gang_member --connect ENDPOINT --worker Q (--keys DIR | --insecure)``."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m puller.gang_member", description=__doc__.splitlines()[0])
    parser.add_argument("--connect", required=True, help="the gang run's endpoint, e.g. tcp://127.0.0.1:5555")
    parser.add_argument("--worker", required=True, type=int, help="this member's worker index")
    auth = parser.add_mutually_exclusive_group(required=True)
    auth.add_argument("--keys", type=Path, metavar="DIR",
                      help="the run's key folder: DIR/mapper.key and DIR/pullers/member-Q.key_secret")
    auth.add_argument("--insecure", action="store_true", help="no authentication or encryption (logged)")
    parser.add_argument("--exit-with", type=int, metavar="PID",
                        help="leave (its job killed) once process PID ends, however it ends: its run's driver")
    args = parser.parse_args(argv)
    try:
        endpoint = security.check_endpoint(args.connect, bind=False)
    except ValueError as e:
        parser.exit(2, f"error: --connect: {e}\n")
    if not 0 <= args.worker < G.MAX_WORKERS:
        parser.exit(2, f"error: --worker must be in [0, {G.MAX_WORKERS})\n")
    keys = None
    if args.keys is not None:
        try:
            keys = security.client_keys(args.keys / security.PULLERS / f"{G.member_name(args.worker)}.key_secret",
                                        args.keys / f"{security.MAPPER}.key")
        except security.KeyFileError as e:
            parser.exit(2, f"error: --keys: {e}\n")
    logging.basicConfig(level=logging.WARNING, format=f"gang member {args.worker}: %(levelname)s %(message)s")
    try:
        member = GangMember(endpoint, args.worker, keys=keys, insecure=args.insecure, exit_with=args.exit_with)
    except ProcessLookupError:
        parser.exit(1, f"error: --exit-with: no process {args.exit_with}\n")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        return member.run()
    except ValueError as e:  # a law or a time unit the adjuster cannot play
        log.error("%s", e)
        return 2
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
