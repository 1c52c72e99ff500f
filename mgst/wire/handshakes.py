"""The mapper's handshakes that fail before any key is checked, logged with the reason its socket sees.

A puller whose key the mapper does not admit is logged by the ZAP handler (security.AuthorizedKeys, with the
key's fingerprint). Others never reach it: a plain puller (no CURVE, ``--insecure``) against a keyed mapper, a
keyed puller against an ``--insecure`` mapper, or a puller that trusts another mapper's public key (its first
message cannot be decrypted). ZeroMQ says so only in the socket's monitor events; :class:`HandshakeWatch` reads
them in a thread of its own and logs each reason at most once per REFUSAL_LOG_INTERVAL (such a puller retries
with back-off, and none of these shows a key to tell two pullers apart).
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import recv_monitor_message

from mgst.wire.security import REFUSAL_LOG_INTERVAL

log = logging.getLogger("mgst.wire.handshakes")

EVENTS = zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
POLL_MS = 200  # how often the thread looks whether it is stopped
_ADDRESSES = itertools.count()  # inproc addresses of this process's watches


PLAIN_REFUSED = ("refused a handshake without CURVE: a puller started with --insecure? This mapper requires keys: "
                 "start the puller with --keys, a copy of this mapper's key folder (a keyed puller whose handshake did "
                 "not finish in time, after the mapper stalled or over a slow network, is reported alike)")
# The same event soon after this mapper stalled: its pullers' handshakes, queued while it was stopped, timed out
AFTER_STALL = ("a puller's handshake did not finish: this mapper stalled a moment ago, and handshakes queued "
               "meanwhile time out (its puller says hello again; a puller started with --insecure is refused alike)")
# How long after a stall's grace a failed handshake is put down to it (ZeroMQ's handshake time-out is 30 s)
AFTER_STALL_S = 35.0
KEYED_REFUSED = ("refused a CURVE handshake: a puller started with --keys? This mapper runs without them "
                 "(--insecure): start the puller with --insecure too, or the mapper with --keys")


def reason(event: int, value: int, curve: bool) -> str:
    """What a failed handshake of a mapper's socket (``curve``: keyed) probably means, in one sentence (two events
    of one attempt give the same sentence, logged once)."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
        return PLAIN_REFUSED if curve else KEYED_REFUSED
    if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        # A plain client meets a keyed mapper with this event alone. Against an --insecure mapper, a keyed puller
        # gives a mechanism mismatch (above) and then this one, or this one alone when the puller saw the mismatch
        # first and closed (a race, lost under load): the same sentence, so that one attempt is one line. A keyed
        # puller whose handshake did not finish in time (the mapper stopped for a while: its pullers' handshakes
        # queued meanwhile time out) gives it too, which a keyed mapper's line says.
        return PLAIN_REFUSED if curve else KEYED_REFUSED
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
        return ("refused a CURVE handshake that could not be decrypted: a puller that trusts another mapper's public "
                "key (its key folder's mapper.key is not this mapper's)")
    return f"a handshake failed (ZeroMQ protocol error {value:#x}): a puller of another version, or not a puller?"


class HandshakeWatch:
    """Logs the failed handshakes of ``socket`` (a mapper's; ``curve``: keyed), each reason once per ``interval``
    seconds. Call :meth:`stop` before the socket is closed."""

    def __init__(self, socket: zmq.Socket, curve: bool, interval: float = REFUSAL_LOG_INTERVAL,
                 clock: Callable[[], float] | None = None):
        self.curve = curve
        self.interval = interval
        self._clock = clock or time.monotonic
        self._logged: dict[str, float] = {}
        self.failed = 0  # handshakes failed, logged or not
        self.stalled_until = -math.inf  # (wall time) until then, a handshake that did not finish is put down to a stall
        self._socket = socket
        self._address = f"inproc://mgst-handshakes-{next(_ADDRESSES)}"
        socket.monitor(self._address, EVENTS)
        self._monitor = socket.context.socket(zmq.PAIR)
        self._monitor.connect(self._address)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mgst-handshakes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self._monitor.poll(POLL_MS):
                    continue
                event = recv_monitor_message(self._monitor, zmq.NOBLOCK)
            except (zmq.ZMQError, ValueError):
                continue
            self.note(event["event"], event["value"])

    def note(self, event: int, value: int) -> None:
        """One failed handshake: logged unless its reason was logged less than ``interval`` ago."""
        self.failed += 1
        said = reason(event, value, self.curve)
        stall = said == PLAIN_REFUSED and event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and \
            time.time() < self.stalled_until
        if stall:
            said = AFTER_STALL
        now = self._clock()
        last = self._logged.get(said)
        if last is None or now - last >= self.interval:
            self._logged[said] = now
            (log.info if stall else log.warning)("%s", said)

    def after_stall(self, grace_until: float) -> None:
        """The mapper stalled (its pullers may have taken it for silence; ``grace_until``, wall time, the end of the
        grace it gives them): a handshake that does not finish until AFTER_STALL_S later is put down to it."""
        self.stalled_until = max(self.stalled_until, grace_until + AFTER_STALL_S)

    def stop(self) -> None:
        """Stop reading and release the monitor (the socket stays open)."""
        self._stopping.set()
        self._thread.join(2 * POLL_MS / 1000 + 1.0)
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:
            pass
        self._monitor.close(linger=0)
