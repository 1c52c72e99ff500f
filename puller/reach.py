"""Why the mapper cannot be reached, in words: name resolution, TCP connection, or ZeroMQ's security handshake.

ZeroMQ retries a connection silently: a host name that does not resolve, a port nobody
listens on and a server holding another key all look the same from the socket. The
puller reads its socket's monitor events (``EVENTS``): a TCP connection made, a
handshake that succeeded or failed and how. When no TCP connection was made, it
resolves the host and connects to the port itself (``probe``, in a thread of its own:
a resolver or a filtered port can take seconds), which names what failed: the DNS
answer, a refused connection, a time-out.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

import zmq

from mgst.wire import security

# The monitor events the puller reads: connections made and lost, and how each handshake ended.
EVENTS = (zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
          | zmq.EVENT_HANDSHAKE_FAILED_AUTH)
# Seconds the probe's own TCP connection may take: a port behind a firewall that drops packets never answers
# (the kernel would wait about 2 minutes); a mapper on a LAN answers in milliseconds.
PROBE_TIMEOUT = 3.0
# Seconds between two probes while no connection is made: the answer changes when the mapper starts.
PROBE_EVERY = 10.0
# At most this many addresses of a host name are tried by the probe (each may take PROBE_TIMEOUT).
PROBE_ADDRESSES = 2


def host_port(endpoint: str) -> tuple[str, int, bool] | None:
    """(host, port, is an IPv6 literal) of a ``tcp://`` endpoint checked by security.check_endpoint; None
    for ipc:// and inproc:// (nothing to resolve or probe)."""
    if not endpoint.startswith("tcp://"):
        return None
    host, _, port = endpoint[len("tcp://"):].rpartition(":")
    bracketed = host.startswith("[")
    return host.strip("[]"), int(port), bracketed


def probe(host: str, port: int, ipv6: bool = False, timeout: float = PROBE_TIMEOUT) -> str:
    """What a plain TCP connection to ``host:port`` meets: a sentence naming the failure, "" if it connects.

    Only IPv4 addresses of a host name are tried, as ZeroMQ does (the puller does not set ZMQ_IPV6)."""
    family = socket.AF_INET6 if ipv6 else socket.AF_INET
    try:
        addresses = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except socket.gaierror as e:
        return f"cannot resolve the host name {host!r}: {e.strerror} (DNS)"
    except (OSError, UnicodeError) as e:
        return f"cannot resolve the host name {host!r}: {e}"
    failure = f"no address for {host!r}"
    for fam, kind, proto, _, address in addresses[:PROBE_ADDRESSES]:
        where = f"{address[0]} port {port}" if address[0] == host else f"{host} ({address[0]}) port {port}"
        try:
            with socket.socket(fam, kind, proto) as s:
                s.settimeout(timeout)
                s.connect(address)
            return ""
        except ConnectionRefusedError:
            failure = f"connection refused by {where}: nothing listens there (is the mapper started, on this port?)"
        except TimeoutError:
            failure = f"no answer from {where} within {timeout:.0f} s (a firewall, or a host that is down?)"
        except OSError as e:
            failure = f"cannot connect to {where}: {e.strerror or e}"
    return failure


class Reach:
    """What the puller's attempts to reach its mapper showed, and since when it has not reached it.

    ``new_socket()`` at each new socket, ``event()`` for each of its monitor events,
    ``reached()`` at a welcome; ``reason()`` is the best explanation at the moment,
    ``unreached_since`` when the last stretch without a completed handshake began
    (None while one holds). A handshake that completes counts as reaching the mapper:
    a mapper that is up but slow to welcome is waited for.
    """

    def __init__(self, endpoint: str, keys: security.ClientKeys | None, clock: Callable[[], float]):
        self.endpoint = endpoint
        self.keys = keys
        self.clock = clock
        self.target = host_port(endpoint)
        self.unreached_since: float | None = None
        self.connected = False  # this socket's TCP connection is up
        self.handshake_ok = False  # this socket completed its handshake
        self.dropped = False  # this socket's connection dropped since it was made (ZeroMQ connects again)
        self.failure: str | None = None  # how the last handshake failed, until one succeeds
        self._probed: str | None = None  # the last probe's answer ("" connected)
        self.probe_at = -PROBE_EVERY
        self._probe: threading.Thread | None = None

    def new_socket(self, now: float) -> None:
        self.connected = self.handshake_ok = self.dropped = False
        if self.unreached_since is None:
            self.unreached_since = now

    def reached(self) -> None:
        """Welcomed: the mapper is reached."""
        self.unreached_since = None
        self.failure = None

    def event(self, kind: int, value: int) -> None:
        """One monitor event of the current socket."""
        if kind == zmq.EVENT_CONNECTED:
            self.connected = True
            self._probed = None
        elif kind == zmq.EVENT_DISCONNECTED:
            self.connected = False
            self.dropped = True
        elif kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.handshake_ok = True
            self.failure = None
            self.unreached_since = None
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.failure = ("the mapper does not admit this puller's key (is its public key in the mapper's "
                            "authorized/ folder?)")
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            self.failure = (f"the security handshake failed (protocol error {value:#x}): "
                            + ("does the mapper run without CURVE (--insecure)?" if self.keys
                               else "the mapper requires CURVE keys (give --keys)"))
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            if self.failure is not None:  # an earlier attempt's reason says more (a mapper without CURVE answers
                return  # with a protocol error, then may just close the next handshakes)
            # A connection closed during the handshake says less than a protocol error: when the mapper sees the
            # mechanisms differ before this puller does, it closes first and this puller sees only this event.
            if self.keys is not None:
                self.failure = ("the security handshake failed: the server there does not hold the secret key of "
                                f"the mapper key this puller trusts ({security.fingerprint(self.keys.server_public)}), "
                                "or runs without CURVE: a wrong mapper.key, a mapper started with --insecure, "
                                "or another program on that port")
            else:
                self.failure = ("the handshake failed: the mapper requires CURVE keys (give --keys)? or it is not "
                                "a mapper of mgst, of the same version")

    @property
    def delivered(self) -> bool:
        """What this socket sent first (its hello) is in the mapper's hands: the handshake completed and the
        connection never dropped (a dropped one may have lost it; so may a mapper that restarted)."""
        return self.handshake_ok and not self.dropped

    def maybe_probe(self, now: float) -> None:
        """Probe the host and port in a thread, unless ZeroMQ connected, a probe runs, or one ran recently."""
        if self.target is None or self.connected or self.handshake_ok or self.failure is not None:
            return
        if self.probing() or now - self.probe_at < PROBE_EVERY:
            return
        self.probe_at = now
        host, port, ipv6 = self.target
        # A daemon thread: a resolver that hangs must not hold the puller's exit.
        self._probe = threading.Thread(target=self._run_probe, args=(host, port, ipv6),
                                       name="mgst-puller-probe", daemon=True)
        self._probe.start()

    def probing(self) -> bool:
        """A probe runs (its answer will say more than what is known now)."""
        return self._probe is not None and self._probe.is_alive()

    def _run_probe(self, host: str, port: int, ipv6: bool) -> None:
        self._probed = probe(host, port, ipv6)  # (one assignment: the loop reads it whenever it looks)

    def final_reason(self, now: float) -> str:
        """The reason, once more, for the line of a puller that gives up: if nothing says why yet (the machine
        was too busy to look), a probe's answer, awaited for at most the probe's own time-outs."""
        if self.target is not None and not (self.connected or self.handshake_ok or self.failure or self._probed):
            self.probe_at = -PROBE_EVERY
            self.maybe_probe(now)
            if self._probe is not None:
                self._probe.join(PROBE_TIMEOUT * PROBE_ADDRESSES + 1.0)
        return self.reason()

    def reason(self) -> str:
        """Why the mapper has not welcomed this puller, as far as can be seen now."""
        if self.failure is not None:
            return self.failure
        if self.handshake_ok:
            return "connected; no welcome yet"
        if self.connected:
            return "connected, but the handshake does not complete (is it a mapper of mgst?)"
        if self._probed:
            return self._probed
        if self._probed == "":
            return "the port accepts connections; ZeroMQ has not connected yet"
        return "no connection yet"


__all__ = ["EVENTS", "PROBE_TIMEOUT", "Reach", "host_port", "probe"]
