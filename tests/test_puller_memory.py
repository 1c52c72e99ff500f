"""A mapper that never ends a message cannot grow a puller without bound.

ZeroMQ holds every frame of a message until its last arrives, and bounds only each frame (MAXMSGSIZE) and the
number of whole messages (the high-water mark): frames flagged "more" without end grew a puller by a gigabyte a
second, silently, until the machine ran out of memory. A raw ZMTP 3.0 server (the NULL mechanism, as a puller
with --insecure speaks it; a mapper holding its key can do the same over CURVE) stands in for the mapper; the
puller, or a gang run's member, runs in a thread of the test, on loopback, and every wait is bounded.
"""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import zmq
from puller_fakes import ThreadPuller

from mgst.testbed.casanova_beside import markov3_form
from mgst.wire import gang_protocol as G
from mgst.wire import protocol as P
from puller import gang_member
from puller.gang_member import GangMember
from puller.memory_guard import MemoryGuard, resident_bytes

FRAME = 60_000  # bytes of each frame: under MAXMSGSIZE (64 KiB), so ZeroMQ takes every one
CAP = 2 * 2**30  # bytes sent at most


def _send_until_dropped(conn: socket.socket, size: int) -> int:
    """Frames of ``size`` bytes flagged MORE (the message goes on) until the peer drops the connection (OSError:
    a broken pipe or a reset); the bytes sent. Fails if CAP bytes were taken."""
    frame = b"\x03" + struct.pack(">Q", size) + b"\x00" * size  # MORE | LONG
    sent = 0
    with pytest.raises(OSError):
        while sent < CAP:
            conn.sendall(frame)
            sent += size
    return sent


def _exactly(conn: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        more = conn.recv(n - len(got))
        if not more:
            raise EOFError("the puller closed the connection")
        got += more
    return got


def _frame(conn: socket.socket) -> bytes:
    flags = _exactly(conn, 1)[0]
    return _exactly(conn, int.from_bytes(_exactly(conn, 8 if flags & 2 else 1), "big"))


def _handshake(conn: socket.socket, gang: bool = False) -> None:
    """ZMTP 3.0, NULL: the greeting, a READY as a ROUTER, the puller's READY, then its hello (read, not answered);
    a gang member's hello with ``gang``."""
    conn.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
    _exactly(conn, 64)
    body = b"\x05READY" + b"\x0bSocket-Type" + struct.pack(">I", 6) + b"ROUTER"
    conn.sendall(b"\x04" + bytes([len(body)]) + body)
    _frame(conn)  # its READY
    if gang:
        assert type(G.decode(_frame(conn), G.FROM_MEMBER)) is G.GangHello
    else:
        assert type(P.decode(_frame(conn))) is P.Hello


def test_a_message_that_never_ends_is_dropped_with_its_connection_and_the_puller_connects_again() -> None:
    limit = 64 * 2**20
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(20)
    ctx = zmq.Context()
    p = None
    try:
        p = ThreadPuller(f"tcp://127.0.0.1:{server.getsockname()[1]}", None, ctx, insecure=True,
                         memory_guard=MemoryGuard(limit, every=0.05))
        conn, _ = server.accept()
        conn.settimeout(20)
        _handshake(conn)
        welcome = P.encode(P.Welcome(P.PROTOCOL_VERSION, 0, 1.0, 600.0, 1.0, "emulate", None, 1, 0.0))
        conn.sendall(b"\x00" + bytes([len(welcome)]) + welcome)
        deadline = time.monotonic() + 10
        while p.puller.welcome is None and time.monotonic() < deadline:  # (awaited: its state, read)
            time.sleep(0.01)
        assert p.puller.welcome is not None
        before = resident_bytes()
        sent = _send_until_dropped(conn, FRAME)
        conn.close()
        assert sent < CAP // 2, f"{sent / 2**20:.0f} MiB taken before the puller let go"
        again, _ = server.accept()  # it connects again, and says hello holding what it held
        again.settimeout(20)
        _handshake(again)
        again.close()
        assert p.puller.memory_guard.trips == 1
        deadline = time.monotonic() + 10  # the guard's first look on the new connection gives the memory back
        while p.puller.memory_guard.baseline is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert resident_bytes() - before < limit, "the memory of the dropped message was not given back"
        assert p.thread.is_alive()
        code, p = p.close(), None
        assert code == 0
    finally:
        if p is not None:
            p.close()
        server.close()
        ctx.destroy(linger=0)


@pytest.mark.parametrize("welcomed", [False, True])
def test_a_gang_member_held_a_message_that_never_ends_leaves_before_it_grows_without_bound(welcomed: bool) -> None:
    """A gang run's mapper does not come back, so a member whose connection holds an unending message leaves (it
    says why, exit 76), in its welcome's wait as in its run, rather than connect again as a puller does."""
    limit = 64 * 2**20
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(20)
    ctx = zmq.Context()
    codes: list[int] = []
    member = GangMember(f"tcp://127.0.0.1:{server.getsockname()[1]}", 0, ctx, insecure=True,
                        memory_guard=MemoryGuard(limit, every=0.05))
    thread = threading.Thread(target=lambda: codes.append(member.run()), daemon=True)
    conn = None
    try:
        thread.start()
        conn, _ = server.accept()
        conn.settimeout(20)
        _handshake(conn, gang=True)
        if welcomed:  # (an availability chain that stays UP for the whole test)
            welcome = G.encode(G.GangWelcome(G.GANG_PROTOCOL_VERSION, 0, 0.5, time.time(),
                                             markov3_form(((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)), 1)))
            conn.sendall(b"\x00" + bytes([len(welcome)]) + welcome)
            deadline = time.monotonic() + 10
            while member.time_unit != 0.5 and time.monotonic() < deadline:  # (awaited: its state, read)
                time.sleep(0.01)
            assert member.time_unit == 0.5, "the member did not take its welcome"
        sent = _send_until_dropped(conn, G.MAX_FRAME - 1024)  # (under the member's MAXMSGSIZE: a puller's is larger)
        assert sent < CAP // 2, f"{sent / 2**20:.0f} MiB taken before the member let go"
        thread.join(20)
        assert not thread.is_alive() and codes == [gang_member.EXIT_HELD_TOO_MUCH]
        assert member.memory_guard.trips == 1
    finally:
        if conn is not None:
            conn.close()
        server.close()
        thread.join(20)
        ctx.destroy(linger=0)
