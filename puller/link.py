"""The puller's connection to its mapper: a ZeroMQ socket with its limits, keys and monitor; messages out and in."""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.drops import DropLog
from mgst.wire.frames import one_message
from mgst.wording import printable
from puller.limits import MAX_SHOWN
from puller.patience import BACKOFF_MAX
from puller.reach import EVENTS, Reach

log = logging.getLogger(__name__)

_monitor_names = itertools.count()


class Link:
    """One socket to the mapper at a time: ``open()`` after ``close()``, ``send()`` never blocks (a message that
    finds the queue full is dropped), ``receive()`` then ``message()`` read what the mapper sent. The socket's
    monitor events go to ``reach`` (why the mapper is not reached, if it is not); frames that are no message from
    a mapper are dropped, counted in ``drops``."""

    def __init__(self, endpoint: str, keys: security.ClientKeys | None, context: zmq.Context, machine: str,
                 reach: Reach, drops: DropLog):
        self.endpoint = endpoint
        self.keys = keys
        self._ctx = context
        self.machine = machine
        self.reach = reach
        self.drops = drops
        self.sock: zmq.Socket | None = None
        self.monitor: zmq.Socket | None = None

    def open(self) -> None:
        """A new socket, connecting to the mapper (any last one closed at once)."""
        self.close(linger=0)
        self.sock = self._ctx.socket(zmq.DEALER)
        try:  # (a step that fails, an endpoint ZeroMQ refuses say, leaves nothing open: close() takes both)
            self._connect(self.sock)
        except BaseException:
            self.close(linger=0)
            raise

    def _connect(self, sock: zmq.Socket) -> None:
        """Set ``sock`` up (its limits, its keys, its monitor) and connect it to the mapper."""
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, int(BACKOFF_MAX * 1000))
        # A larger frame is refused by ZeroMQ as its header arrives (the connection is dropped), never held whole:
        # the protocol's own check comes after the frame is in memory.
        sock.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
        if security.needs_ipv6(self.endpoint):
            sock.setsockopt(zmq.IPV6, 1)
        if self.keys is not None:
            security.secure_client(sock, self.keys)
        try:
            self.monitor = sock.get_monitor_socket(
                EVENTS, addr=f"inproc://mgst-puller-monitor-{os.getpid()}-{next(_monitor_names)}")
        except zmq.ZMQError as e:  # diagnostics only
            log.debug("%s: no socket monitor: %s", self.machine, e)
            self.monitor = None
        sock.connect(self.endpoint)

    def close(self, linger: int) -> None:
        if self.monitor is not None:
            if self.sock is not None:
                try:
                    self.sock.disable_monitor()
                except zmq.ZMQError:
                    pass
            self.monitor.close(linger=0)
            self.monitor = None
        if self.sock is not None:
            self.sock.close(linger=linger)
            self.sock = None

    def read_monitor(self) -> None:
        """Tell ``reach`` the monitor's events, every one waiting."""
        while self.monitor is not None:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            self.reach.event(event["event"], event["value"])

    def send(self, msg: Any) -> None:
        if self.sock is None:
            return
        try:
            self.sock.send(P.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            log.debug("%s: send queue full, dropped %s", self.machine, type(msg).__name__)

    def receive(self) -> tuple[bytes, int]:
        """The next message's first frame and its number of frames, from the open socket (zmq.Again: none waits)."""
        return one_message(self.sock, zmq.NOBLOCK)

    def message(self, frame: bytes, parts: int) -> Any:
        """What ``receive()`` returned as a message from a mapper; None if it is not one (dropped, counted)."""
        if parts > 1:  # a message is one frame
            self.drops.drop(P.Drop.FRAMES, f"the mapper of {self.machine}", f"{parts} frames")
            return None
        try:
            msg = P.decode(frame)
        except P.ProtocolError as e:
            self.drops.drop(e.reason, f"the mapper of {self.machine}", printable(e.detail, MAX_SHOWN))
            return None
        if type(msg) not in P.FROM_MAPPER:
            self.drops.drop(P.Drop.DIRECTION, f"the mapper of {self.machine}", type(msg).__name__)
            return None
        return msg


__all__ = ["Link"]
