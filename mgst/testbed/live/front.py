"""The live view's connections, in one thread: each admitted, its request head read within a deadline, its
answer written within another, then closed.

Why an event loop and not a thread per connection: a thread blocked reading a client is what a slowloris
takes (a byte every few seconds resets a socket's timeout, so each connection holds its thread for ever),
and threads are few. Here a connection waiting for its request costs a socket and a buffer, nothing more;
the deadline is for the whole head, from the moment the connection is accepted, whatever trickles in;
and the sockets themselves are bounded (:mod:`.admission`). Why no worker threads behind it: an answer is
bytes already in memory (the page's files, the latest snapshot's small file), made in well under a
millisecond, so :data:`Answer` is called in the loop; the only slow part, a client reading the answer, is
a non-blocking write with its own deadline. asyncio's low-level socket calls are enough: no transport,
no protocol class, and a connection to drop is a task to cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mgst.testbed.live.admission import Admission, client_key

log = logging.getLogger(__name__)

# Seconds from a connection's accept to the end of its request head (the blank line), however it trickles.
HEAD_DEADLINE = 5.0
# Seconds to hand a whole answer to the client (the largest, the chart library, is about 50 kB).
WRITE_DEADLINE = 10.0
# Bytes of a request head at most (its line, its headers and their cookies), and read at a time.
MAX_HEAD = 32768
CHUNK = 4096
# Connections accepted in a row before the loop reads the others (those already accepted come first).
ACCEPT_BATCH = 32
# Seconds accepting pauses when the process is out of file descriptors (the listening socket stays readable).
FD_PAUSE = 0.5

# An answer: (the request head, the client's address) -> the bytes to send back.
Answer = Callable[[bytes, str], bytes]


@dataclass(eq=False)
class Connection:
    """One accepted socket, its client's address (as :func:`.admission.client_key` counts it), and the task
    serving it."""

    sock: socket.socket
    address: str
    task: asyncio.Task[None] | None = field(default=None, repr=False)


@dataclass
class FrontStats:
    """What the front did, counted (read by tests and benchmarks)."""

    accepted: int = 0
    refused: int = 0  # closed at once: over a bound (admission)
    replaced: int = 0  # closed at once: an address's oldest unfinished request, for a newer connection of it
    expired: int = 0  # closed at the head's deadline
    oversized: int = 0  # a head over MAX_HEAD
    answered: int = 0


def head_end(buf: bytes | bytearray, start: int = 0) -> int:
    """The index just past the blank line ending a request head in ``buf`` (lines end in CRLF or LF, as
    http.server accepts them), searched from ``start``; -1 if it has not come yet."""
    ends = [i for i in (buf.find(b"\n\r\n", start), buf.find(b"\n\n", start)) if i >= 0]
    if not ends:
        return -1
    i = min(ends)
    return i + (3 if buf[i + 1:i + 2] == b"\r" else 2)


class Front:
    """Serves the listening socket ``sock`` (bound; made non-blocking here) with ``answer``, admitting by
    ``admission``. :meth:`run` serves in the calling thread until :meth:`stop` (from any thread)."""

    def __init__(self, sock: socket.socket, answer: Answer, admission: Admission[Connection],
                 oversized_answer: bytes = b""):
        self.sock = sock
        self.answer = answer
        self.admission = admission
        self.oversized_answer = oversized_answer
        self.stats = FrontStats()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._stop_asked = False
        self._paused = False

    def run(self) -> None:
        """Serve until :meth:`stop`; every connection is closed when it returns."""
        asyncio.run(self._serve())

    def stop(self) -> None:
        with self._lock:
            self._stop_asked = True
            if self._loop is not None and self._stopping is not None:
                with contextlib.suppress(RuntimeError):  # the loop has just ended
                    self._loop.call_soon_threadsafe(self._stopping.set)

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()
        with self._lock:
            self._loop, self._stopping = loop, stopping
            if self._stop_asked:
                return
        self.sock.setblocking(False)
        loop.add_reader(self.sock, self._accept)
        try:
            await stopping.wait()
        finally:
            loop.remove_reader(self.sock)
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _accept(self) -> None:
        """The listening socket is readable: accept up to ACCEPT_BATCH, each admitted or closed at once."""
        loop = asyncio.get_running_loop()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, peer = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    self._pause(loop, e)
                return  # (ECONNABORTED and the like: that client is gone)
            self.stats.accepted += 1
            conn = Connection(sock, client_key(str(peer[0])))
            admitted, replaced = self.admission.open(conn.address, conn)
            if replaced is not None:
                self.stats.replaced += 1
                if replaced.task is not None:
                    replaced.task.cancel()  # its socket is closed by its task, at once
            if not admitted:
                self.stats.refused += 1
                sock.close()
                continue
            sock.setblocking(False)
            conn.task = loop.create_task(self._connection(conn))
            conn.task.add_done_callback(lambda _, conn=conn: self._closed(conn))  # (cancelled before it ran too)

    def _pause(self, loop: asyncio.AbstractEventLoop, error: OSError) -> None:
        """Out of descriptors: stop accepting for FD_PAUSE s (the pending connections wait in the backlog)."""
        if self._paused:
            return
        log.warning("the live view cannot accept a connection (%s): pausing %g s", error.strerror, FD_PAUSE)
        self._paused = True
        loop.remove_reader(self.sock)

        def resume() -> None:
            self._paused = False
            if not (self._stopping is not None and self._stopping.is_set()):
                loop.add_reader(self.sock, self._accept)

        loop.call_later(FD_PAUSE, resume)

    async def _connection(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        try:
            head = await self._read_head(loop, conn)
            if head is None:
                return
            self.admission.answering(conn)
            try:
                data = self.oversized_answer if head is _OVERSIZED else self.answer(head, conn.address)
            except Exception:  # noqa: BLE001 (a bug answering one request must not stop the view)
                log.exception("the live view failed to answer a request")
                return
            async with asyncio.timeout(WRITE_DEADLINE):
                await loop.sock_sendall(conn.sock, data)
            self.stats.answered += 1
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
        except (OSError, TimeoutError):
            pass  # the client went away, or did not read its answer in time
        finally:
            self._closed(conn)

    def _closed(self, conn: Connection) -> None:
        """Off the books, and the socket closed (again: nothing)."""
        self.admission.close(conn)
        conn.sock.close()

    async def _read_head(self, loop: asyncio.AbstractEventLoop, conn: Connection) -> bytes | None:
        """The request head, whole; _OVERSIZED past MAX_HEAD; None if the client closed or the deadline passed."""
        buf = bytearray()
        try:
            async with asyncio.timeout(HEAD_DEADLINE):
                while True:
                    chunk = await loop.sock_recv(conn.sock, CHUNK)
                    if not chunk:
                        return None
                    searched = max(0, len(buf) - 2)
                    buf += chunk
                    end = head_end(buf, searched)
                    if 0 <= end <= MAX_HEAD:
                        return bytes(buf[:end])
                    if end > MAX_HEAD or len(buf) > MAX_HEAD:
                        self.stats.oversized += 1
                        return _OVERSIZED
        except TimeoutError:
            self.stats.expired += 1
            log.debug("%s: no whole request in %g s, closed", conn.address, HEAD_DEADLINE)
            return None


_OVERSIZED = b"\0oversized"  # a marker (the identity is what is compared), never a real head
