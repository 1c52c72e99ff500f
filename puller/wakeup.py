"""The puller's waits: a poll that stop(), a signal, or the end of the process it goes with ends at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

import zmq

from puller.limits import poll_timeout_ms


class Wakeup:
    """A self-pipe that ``wake()`` (from a signal handler or another thread) writes to, and signals too once
    ``install()``; ``wait()`` polls it beside the loop's sources. ``exit_with``, if given, is the pid of a process
    whose end ends the puller's (--exit-with): its pidfd, ``parent_fd``, is readable once it has ended, polled
    too, closed by ``close()``."""

    def __init__(self, exit_with: int | None = None):
        self._r, self._w = os.pipe()
        try:
            for fd in (self._r, self._w):
                os.set_blocking(fd, False)
            # ProcessLookupError if that process has ended already (the pipe is closed: nothing is left open)
            self.parent_fd = os.pidfd_open(exit_with) if exit_with is not None else None
        except BaseException:
            os.close(self._r)
            os.close(self._w)
            raise
        self._lock = threading.Lock()

    def wake(self) -> None:
        """End the wait under way, or the next; safe from a signal handler and from another thread."""
        if self._lock.acquire(blocking=False):  # not if run() is closing the pipe right now
            try:
                if self._w >= 0:
                    os.write(self._w, b"s")
            except OSError:
                pass  # full: a wake-up is pending anyway
            finally:
                self._lock.release()

    def install(self, handler: Callable[..., Any]) -> None:
        """SIGTERM and SIGINT call ``handler``; the wake-up pipe makes any wait notice at once (main thread only)."""
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)
        signal.set_wakeup_fd(self._w)

    def wait(self, sources: list, timeout: float) -> dict:
        """Poll ``sources`` (sockets, fds), the pipe and ``parent_fd`` for up to ``timeout`` seconds: the events."""
        poller = zmq.Poller()
        for src in sources:
            poller.register(src, zmq.POLLIN)
        poller.register(self._r, zmq.POLLIN)
        if self.parent_fd is not None:
            poller.register(self.parent_fd, zmq.POLLIN)
        events = dict(poller.poll(poll_timeout_ms(timeout)))  # (at most MAX_POLL: any far instant is safe)
        if self._r in events:
            try:
                os.read(self._r, 512)  # drain; the handler has already set the flag
            except BlockingIOError:
                pass
        return events

    def parent_ended(self, events: dict) -> bool:
        """The process it goes with has ended, as ``wait()``'s events say."""
        return self.parent_fd is not None and self.parent_fd in events

    def close(self) -> None:
        """Close the pipe (giving back the signals' wake-up fd if it is ours), then ``parent_fd``."""
        self._close_pipe()
        if self.parent_fd is not None:
            os.close(self.parent_fd)
            self.parent_fd = None

    def _close_pipe(self) -> None:
        with self._lock:
            if self._w < 0:
                return
            if threading.current_thread() is threading.main_thread():
                try:
                    old = signal.set_wakeup_fd(-1)
                    if old not in (self._w, -1):
                        signal.set_wakeup_fd(old)  # someone else's: leave it in place
                except ValueError:
                    pass
            os.close(self._r)
            os.close(self._w)
            self._r = self._w = -1


__all__ = ["Wakeup"]
