"""The mapper's ROUTER socket: bound and CURVE-secured, its outbox sent only once the journal has committed."""

from __future__ import annotations

import errno
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import zmq

from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.handshakes import HandshakeWatch
from mgst.wire.routing_ids import seed_routing_ids

log = logging.getLogger("mgst.testbed.mapper")

# Messages a peer may have queued at the mapper: a puller has a handful in flight at most;
# with MAX_FRAME this caps what one flooding connection can make the mapper hold (16 MB).
RCVHWM = 256
# Connections the kernel queues for the mapper to accept, at least (ZeroMQ's default): one per
# machine, so that thousands of pullers starting at once are not dropped and made to retry their
# connection 1, 3, 7... s later (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG = 100
# At most this many messages are handled per receive pass; then timers, arrivals and
# heartbeats get their turn, so that a flood cannot stall them. ROUTER sockets read
# their peers fair-queued, so a flooding peer cannot starve the others either.
RECEIVE_BATCH = 256
# How often the farewell looks at whether it is aborted: a second Ctrl-C ends it within this.
FAREWELL_POLL_MS = 100


class BindError(ValueError):
    """The mapper's address cannot be bound (in use, or not this machine's)."""


class Router:
    """One ROUTER socket for all the pullers, bound to ``bind`` (``:0``: a free port; ``endpoint`` says which).

    Messages are queued in ``outbox`` by :meth:`send` and leave only by :meth:`send_queued`, which
    the mapper calls once the journal has committed (write-ahead). With ``keys``, the socket is a
    CURVE server and a ZAP handler admits the authorized keys; the handler serves a whole context,
    so a secured router without a ``context`` gets one of its own, and two mappers in one process
    (tests, benchmarks) never share or clash over one.
    """

    def __init__(self, bind: str, keys: security.ServerKeys | None, context: zmq.Context | None, machines: int):
        self._own_context = context is None and keys is not None
        self._ctx = context or (zmq.Context() if self._own_context else zmq.Context.instance())
        self._auth = security.start_authenticator(self._ctx, keys) if keys is not None else None
        self.curve = keys is not None  # a message carries its sender's key (User-Id)
        self.outbox: list[tuple[bytes, bytes, int | None]] = []  # (identity, frame, machine), until committed
        try:
            seed_routing_ids()  # before the socket: its automatic ids start from rand()
            self.socket = self._ctx.socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.socket.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
            self.socket.setsockopt(zmq.RCVHWM, RCVHWM)
            self.socket.setsockopt(zmq.BACKLOG, max(LISTEN_BACKLOG, machines))
            if security.needs_ipv6(bind):
                self.socket.setsockopt(zmq.IPV6, 1)
            if keys is not None:
                security.secure_server(self.socket, keys)
            try:
                if bind.endswith(":0"):
                    port = self.socket.bind_to_random_port(bind[: -len(":0")])
                    bind = f"{bind[: -len(':0')]}:{port}"
                else:
                    self.socket.bind(bind)
            except zmq.ZMQError as e:  # a port in use, an address not of this machine: the user's to fix
                raise BindError(f"cannot bind {bind}: {zmq.strerror(e.errno)}"
                                + (" (not an address of this machine?)" if e.errno == errno.ENODEV else "")) from None
        except BaseException:
            if hasattr(self, "socket"):
                self.socket.close(linger=0)
            self.close_auth()
            raise
        self.endpoint = bind
        # handshakes refused before any key is looked at (no CURVE, another mapper's key): logged, once a minute
        self.handshakes = HandshakeWatch(self.socket, curve=keys is not None)

    def send(self, identity: bytes | None, msg: Any, machine: int | None = None) -> None:
        """Queue ``msg`` for ``identity`` (machine ``machine``, if it is one's); nothing for None."""
        if identity is not None:
            self.outbox.append((identity, P.encode(msg), machine))

    def send_queued(self, failed: Callable[[bytes, int | None, zmq.ZMQError], None]) -> None:
        """Send what is queued (the journal has it); ``failed`` is told of each message that could not leave
        (its peer gone, or its queue full), and may queue more."""
        out, self.outbox = self.outbox, []
        for identity, frame, machine in out:
            try:
                self.socket.send_multipart([identity, frame], zmq.NOBLOCK)
            except zmq.ZMQError as e:  # peer gone (ROUTER_MANDATORY) or its queue full
                failed(identity, machine, e)

    def say_bye(self, frame: bytes, identities: list[bytes]) -> None:
        """Drop what is queued (decided by events the journal may lack: never sent), send ``frame`` to each."""
        self.outbox.clear()
        for identity in identities:
            try:
                self.socket.send_multipart([identity, frame], zmq.NOBLOCK)
            except zmq.ZMQError:
                pass

    def farewell(self, seconds: float, aborting: Callable[[], bool], awaited: set[str],
                 registered: Mapping[bytes, str] | None = None) -> None:
        """For at most ``seconds``, answer any hello with a bye, until every machine in ``awaited`` (those whose
        puller was down at the end: injected failures) has said hello or acknowledged the run's bye, or
        ``aborting()``: such pullers learn that the run is over and exit. An acknowledgement counts only from the
        connection the machine was registered on (``registered``: connection to machine name). With nobody
        awaited, there is nobody to tell."""
        end = time.monotonic() + seconds
        bye = P.encode(P.Bye("run over"))
        awaited = set(awaited)
        registered = registered or {}
        while awaited and not aborting() and (left := end - time.monotonic()) > 0:
            # (in slices: an abort, a second Ctrl-C, must end the farewell now, not when the socket next hears)
            if not self.socket.poll(min(math.ceil(left * 1000), FAREWELL_POLL_MS)):
                continue
            for _ in range(RECEIVE_BATCH):
                try:
                    identity, *rest = self.socket.recv_multipart(zmq.NOBLOCK)
                except (zmq.Again, ValueError):
                    break
                try:
                    msg = P.decode(rest[0]) if len(rest) == 1 else None
                    if type(msg) is P.Hello:
                        self.socket.send_multipart([identity, bye], zmq.NOBLOCK)
                        # (a forged name can only end the farewell early: that puller then gives up on its own)
                        awaited.discard(msg.machine)
                    elif type(msg) is P.Bye and identity in registered:  # it read the run's bye: it leaves
                        awaited.discard(registered[identity])
                except (P.ProtocolError, zmq.ZMQError):
                    pass

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket (letting queued messages out for up to ``linger_ms``), then the ZAP handler."""
        self.handshakes.stop()
        self.socket.close(linger=linger_ms)
        self.close_auth()

    def close_auth(self) -> None:
        """Stop the ZAP handler, and end the context if it is the router's own (its sockets closed by now)."""
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_context:
            self._own_context = False
            self._ctx.term()  # every socket of it is closed by now
