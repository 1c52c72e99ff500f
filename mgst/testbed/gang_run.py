"""A gang run: the testbed's driver of tightly-coupled iterations (mgst.core.iterations) on real gang members.

The simulator (mgst.sim.iterations) drives the pure :class:`~mgst.core.iterations.Iterations` on a virtual
slot clock; this drives the same object, with the same policy, on the wall clock: model time is wall seconds
since the run's start over ``time_unit``. The members (puller.gang_member, one process per worker) follow
their own markov3 chains from that start and report each change; their reports, each transfer's last byte
and each member's end of its part are the core's events, handed in at the slot boundary they belong to
through the core's ``Iterations.instant``, which the simulator calls too (ends, then changes, then settle,
then a proactive policy's check: at boundaries with events, and at the boundary a policy whose check reads
the time spent names for its next look; GRACE says how a boundary is placed on the wall). The members hear
what the core decided once per boundary, from its state after the whole instant. What the core decides is
carried out for real:

- the master's link (the core's :class:`~mgst.core.link.MasterLink` rate rule) says which transfers move;
  each moving transfer's bytes go out as the core's Activity progresses (``bytes_per_slot`` a slot, the
  per-worker bandwidth bw), so at most ``n_com`` transfers carry bytes at once, and a transfer the core
  pauses (RECLAIMED) or cancels (DOWN, the worker left) stops; a transfer ends when its member says its last
  byte arrived;
- the gang (the core's :class:`~mgst.core.gang.Gang` rate rule) starts computing when the core gives it rate
  1: every member runs a job of the gang's work (its x_q w_q at the pace the core gives it) in wall seconds,
  is held when the core stalls the gang (a member not UP) and stopped when the gang is lost or replaced; the
  iteration ends when every member's job has ended.

Its wire is secured as the job protocol's is (mgst.wire.security): with ``keys`` (a folder made by
``security.create_keys`` with one key per member, ``gang_protocol.member_name``) the socket is a CURVE server whose
ZAP handler admits only the members' public keys, and worker q's hello is taken only from the key of
``authorized/member-q.key``, as ZeroMQ authenticated it (the frame's ``User-Id``): a member cannot speak as
another. A member whose key is not admitted never gets past the handshake; the run cannot go on without it (its
chain is the experiment's), so registration fails at ``register_timeout``, saying which workers are missing and
how many handshakes were refused. Without keys (``insecure``, said explicitly and logged) it binds loopback only.

No gang, transfer or heuristic is written here: only the wire and the clock.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import zmq
from zmq.auth.thread import ThreadAuthenticator

from mgst.core.iterations import DATA, DOWN, Iterations
from mgst.wire import gang_protocol as G
from mgst.wire import security
from mgst.wire.drops import DropLog
from mgst.wire.frames import Drop, ProtocolError
from mgst.wire.handshakes import HandshakeWatch
from mgst.wire.routing_ids import seed_routing_ids

log = logging.getLogger(__name__)

# Wall seconds between the welcomes and the run's start (slot 0 of every chain): every member is ready then (a
# member that reads its welcome late still plays its chain from the start: puller.gang_member.MAX_LATE).
LEAD = 2.0
# The paper's model is discrete: availability changes at slot boundaries, and an activity that ends at boundary
# k completed in the slot before it, so a change at k does not touch it. On the wall, the core hears of boundary k
# at k + GRACE slots (the members' reports of k, a change, a transfer's last byte, a part's end, each a few ms
# after it happened, arrive in that time), and an activity it starts at k (or resumes) is carried out to end
# FINISH_AHEAD slots before its model end k' (its bytes go out, its job computes, for what is left of it then):
# its end is in before the changes of k', and is handed to the core at k'. So the grace does not add up from one
# activity to the next, and an activity of d slots runs about d - GRACE - FINISH_AHEAD slots on the wall. The
# core waits longer, until LATEST, for an end due at k that is not in yet (a busy machine); one later still is
# taken at the next boundary, and counted (GangRunResult.late).
GRACE = 0.3
LATEST = 0.7
FINISH_AHEAD = 0.2
# While a transfer moves, bytes go out at least this often, as a share of a slot.
PUMP_SLOT_SHARE = 0.125
_PAYLOAD = bytes(range(256)) * (G.MAX_CHUNK // 256)


@dataclass
class GangRunResult:
    """A gang run's outcome: its makespan in slots (None: it passed the cap) and what the wire carried."""

    makespan: float | None
    iterations: int
    wall_s: float
    log: list[Any] = field(default_factory=list)
    bytes_sent: int = 0
    transfers: int = 0
    most_moving: int = 0  # the most transfers carrying bytes at once (n_com bounds it)
    drops: int = 0
    late: int = 0  # ends reported after the boundary the core ended them at
    refused_hellos: int = 0  # hellos refused: another protocol, no such worker, taken, or not that worker's key
    refused_keys: int = 0  # CURVE handshakes refused: keys the run does not admit


@dataclass
class _Sending:
    """A transfer the core queued: its bytes, how many went out, and whether its last byte arrived."""

    worker: int
    total: int
    sent: int = 0
    received: bool = False


class MemberLost(RuntimeError):
    """A gang member left the run (its bye, or it can no longer be reached): the run cannot go on."""


def security_mode(bind: str, keys: security.ServerKeys | None, insecure: bool) -> str:
    """How a gang run bound to ``bind`` runs, as security.security_mode says for the main mapper ("curve", or
    "none (...)", logged as a warning), except that without keys it binds loopback only, ``insecure`` or not: a
    SecurityError of one line otherwise."""
    if keys is not None and insecure:
        raise ValueError("keys and insecure=True contradict each other")
    if keys is None and not security.is_loopback(bind):
        raise security.SecurityError(f"{bind} is reachable from other machines: a gang run without keys "
                                     "(--insecure) binds loopback only; give it keys")
    return security.security_mode(bind, keys, insecure)


class GangRun:
    """Drives ``app`` on ``len(failures)`` gang members that connect to ``endpoint`` (bound on construction).

    ``keys``: the run's keys (security.server_keys of a folder with ``authorized/member-q.key`` for every worker
    q); without them the bind must be loopback (SecurityError otherwise: unlike the main mapper, ``insecure`` does
    not open a gang run to other machines), and the lack of keys is logged as a warning, as the main mapper does
    (security.security_mode): ``insecure`` says it was meant."""

    def __init__(self, app: Iterations, failures: Sequence[tuple], time_unit: float, bytes_per_slot: int,
                 bind: str = "tcp://127.0.0.1:*", proactive: bool = False, cap: float = math.inf,
                 register_timeout: float = 60.0, context: zmq.Context | None = None,
                 keys: security.ServerKeys | None = None, insecure: bool = False):
        if len(failures) != len(app.states):
            raise ValueError("one availability law per worker")
        if not (0.01 <= time_unit <= G.MAX_TIME_UNIT) or not 1 <= bytes_per_slot <= G.MAX_TRANSFER:
            raise ValueError("time_unit in [0.01, 3600] s and bytes_per_slot in [1, MAX_TRANSFER]")
        self.security = security_mode(bind, keys, insecure)
        self.app, self.failures, self.time_unit = app, tuple(failures), time_unit
        self.bytes_per_slot = bytes_per_slot
        self.proactive, self.cap, self.register_timeout = proactive, cap, register_timeout
        self.wake = math.inf  # when the policy asked to look again with no event (Iterations.next_check)
        # each worker's z85 public key, as ZAP reports it in a frame's User-Id (None: insecure)
        self.member_keys = _member_keys(keys, len(failures)) if keys is not None else None
        # The ZAP handler serves a whole context: a keyed run without one gets its own (as the main mapper's router).
        self._own_context = context is None and keys is not None
        self._context = context or (zmq.Context() if self._own_context else zmq.Context.instance())
        self._admitted: security.AuthorizedKeys | None = None
        self._auth: ThreadAuthenticator | None = None
        try:
            if keys is not None:
                self._admitted = security.AuthorizedKeys(keys.authorized)
                self._auth = security.start_authenticator(self._context, keys, provider=self._admitted)
            seed_routing_ids()  # before the socket: its automatic ids start from rand()
            self.socket = self._context.socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 1000)
            self.socket.setsockopt(zmq.MAXMSGSIZE, G.MAX_FRAME)
            self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
            if security.needs_ipv6(bind):
                self.socket.setsockopt(zmq.IPV6, 1)
            if keys is not None:
                security.secure_server(self.socket, keys)
            self.socket.bind(bind)
            # handshakes that fail before any key is looked at (a member without keys, or with another mapper's
            # key): logged with their likely reason, once a minute, as the main mapper's are
            self.handshakes: HandshakeWatch | None = HandshakeWatch(self.socket, curve=keys is not None)
        except BaseException:
            self.close()
            raise
        self.endpoint: str = self.socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self.identities: list[bytes | None] = [None] * len(failures)
        self.start = 0.0
        self.sending: dict[Hashable, _Sending] = {}
        self.gang_key: Hashable | None = None  # the gang whose members were told to compute
        self.gang_running = False
        self.members: list[int] = []  # the running gang's members
        self.finished: set[int] = set()  # members whose part of the running gang ended
        self.with_data: set[int] = set()
        self.ends: list[tuple[int, Hashable]] = []  # reported ends the core has not had yet
        self.changes: list[tuple[int, float, int]] = []  # (worker, slot, state) the core has not had yet
        self.reported_slot = [0] * len(failures)  # each member's last reported boundary
        self.reported_state = [int(s) for s in app.states]  # and its state since (every chain starts UP)
        self.result = GangRunResult(None, 0, 0.0)
        self.drop_log = DropLog(log)  # what is dropped, counted by reason and logged at a bounded rate

    def close(self) -> None:
        """Close the socket (its queued frames out within its linger), then the ZAP handler and an own context."""
        if getattr(self, "handshakes", None) is not None:
            self.handshakes.stop()  # type: ignore[union-attr]
            self.handshakes = None
        if hasattr(self, "socket"):
            self.socket.close()
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_context:
            self._own_context = False
            self._context.term()

    # ------------------------------------------------------------------ the run

    def run(self) -> GangRunResult:
        """Register every member, start, drive the core until the iterations are done or the cap passes."""
        try:
            self._register()
        except TimeoutError as e:  # the members that did register learn why the run will not start
            for q in range(len(self.identities)):
                self._send(q, G.GangBye(f"the run did not start: {e}"[:G.MAX_TEXT]))
            raise
        self.start = time.time() + LEAD
        for q in range(len(self.identities)):
            self._send(q, G.GangWelcome(G.GANG_PROTOCOL_VERSION, q, self.time_unit, self.start, self.failures[q]))
        try:
            return self._drive()
        finally:
            for q in range(len(self.identities)):
                self._send(q, G.GangBye("the run is over"))

    def _drive(self) -> GangRunResult:
        app = self.app
        self._step(app.settle(0.0))
        if self.proactive:  # a configuration just chosen is the policy's own: as if looked at
            self.wake = app.next_check(0.0)
        instant = 0
        while not app.finished() and instant < self.cap:
            instant += 1
            self._wait_until(self.start + (instant + GRACE) * self.time_unit)
            latest = self.start + (instant + LATEST) * self.time_unit
            while self._awaited(instant) and time.time() < latest:
                self._wait_until(min(latest, time.time() + PUMP_SLOT_SHARE * self.time_unit))
            self._instant(float(instant))
        self.result.makespan = float(instant) if app.finished() else None
        self.result.iterations = app.done
        self.result.wall_s = time.time() - self.start
        self.result.log = list(app.log)
        return self.result

    def now(self) -> float:
        """Model time on the wall: slots since the start."""
        return (time.time() - self.start) / self.time_unit

    def _wait_until(self, wall: float) -> None:
        """Carry the moving transfers' bytes and gather the members' reports until ``wall``."""
        while (left := wall - time.time()) > 0:
            wake = min(self._pump(self.now()), wall)
            timeout = max(0.0, min(left, (wake - self.now()) * self.time_unit))
            if self.socket.poll(math.ceil(timeout * 1000)):
                self._receive_all()
        self._pump(self.now())

    def _instant(self, now: float) -> None:
        """Hand the core what happened at slot boundary ``now`` (the core's :meth:`Iterations.instant` keeps the
        simulator's order): the ends due (an end reported before its model end waits for it; one reported late
        is taken now, and counted), then the availability changes; a proactive policy checks at an instant
        where something happened, and at the boundary it named for its next look (its check may read the time)."""
        app = self.app
        ends, self.ends = self.ends, []
        changes = [c for c in self.changes if c[1] <= now]
        self.changes = [c for c in self.changes if c[1] > now]
        due_now: list[Hashable] = []
        for q, key in ends:
            due = self._due_at(key)
            if due is None:
                continue  # cancelled meanwhile: stale
            if due > now + 1e-9:
                self.ends.append((q, key))
                continue
            if due < now - 1e-9:
                self.result.late += 1
                log.info("%s ended at %g in the model, reported after that boundary's grace", key, due)
            due_now.append(key)
        changed = [(q, state) for q, _, state in sorted(changes, key=lambda c: (c[1], c[0]))]
        look = self.proactive and bool(due_now or changed or now >= self.wake)
        self._step(app.instant(now, due_now, changed, check=look))
        if look and not app.finished():
            self.wake = app.next_check(now)

    def _awaited(self, now: float) -> bool:
        """Whether an activity the core ends by ``now`` has not been reported yet."""
        reported = {key for _, key in self.ends}
        gang = self.app.gang
        due = [t.key for t in self.app.link.queue.values() if t.activity.finish_time() <= now + 1e-9]
        if gang is not None and not gang.lost and gang.activity.finish_time() <= now + 1e-9:
            due.append(gang.key)
        return any(k not in reported for k in due)

    def _due_at(self, key: Hashable) -> float | None:
        """The core's end of a reported activity, or None if it is no longer running."""
        if not self.app.alive(key):
            return None
        gang = self.app.gang
        if gang is not None and gang.key == key:
            return gang.activity.finish_time()
        return self.app.link.queue[key].activity.finish_time()

    def _register(self) -> None:
        deadline = time.monotonic() + self.register_timeout
        while None in self.identities:
            left = deadline - time.monotonic()
            if left <= 0 or not self.socket.poll(math.ceil(left * 1000)):
                self._count_refused_keys()
                missing = [q for q, i in enumerate(self.identities) if i is None]
                failed = self.handshakes.failed if self.handshakes is not None else 0
                why = "".join((
                    f"; {self.result.refused_keys} CURVE handshake(s) refused: a key this run does not admit"
                    if self.result.refused_keys else "",
                    f"; {failed} handshake(s) failed before any key was checked: a member "
                    + ("with another mapper's key, or without keys" if self.member_keys is not None else "with keys")
                    if failed else ""))
                raise TimeoutError(f"{len(missing)} gang member(s) never said hello within "
                                   f"{self.register_timeout:g} s (workers {missing[:10]}){why}")
            identity, msg, key = self._recv()
            if not isinstance(msg, G.GangHello):
                continue
            why = self._hello_problem(msg, key)
            if why is not None:
                self.result.refused_hellos += 1
                self._drop(identity, Drop.HELLO_REFUSED, f"as worker {msg.worker}: {why}")
                try:  # (never waits for it: a peer that left, or reads nothing, gets no answer)
                    self.socket.send_multipart([identity, G.encode(G.GangBye(f"refused: {why}"))], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
                continue
            self.identities[msg.worker] = identity
        self._count_refused_keys()

    def _hello_problem(self, msg: G.GangHello, key: str | None) -> str | None:
        """Why a hello cannot be taken, or None: another protocol, no such worker, one already registered, or
        (keyed) a key that is not that worker's."""
        if msg.version != G.GANG_PROTOCOL_VERSION:
            return f"protocol {msg.version}, this run speaks {G.GANG_PROTOCOL_VERSION}"
        if msg.worker >= len(self.identities):
            return f"this run has {len(self.identities)} workers"
        if self.member_keys is not None and key != self.member_keys[msg.worker]:
            return f"the key of worker {msg.worker} is not this one ({_fingerprint(key)})"
        if self.identities[msg.worker] is not None:
            return "that worker is registered"
        return None

    def _count_refused_keys(self) -> None:
        if self._admitted is not None:
            self.result.refused_keys = self._admitted.refused

    # ------------------------------------------------------------------ members' reports: the core's events

    def _receive_all(self) -> None:
        """Gather the frames waiting, at most RECEIVE_PER_PASS: ends (a transfer's last byte, every member's part of
        the gang) and availability changes, handed to the core at the next slot boundary."""
        for _ in range(G.RECEIVE_PER_PASS):  # a member that floods cannot keep the run from its slot boundaries
            if not self.socket.poll(0):
                return
            identity, msg, key = self._recv()
            q = self.identities.index(identity) if identity in self.identities else -1
            if msg is None:
                continue  # dropped and counted by _recv
            if q < 0:
                self._drop(identity, Drop.UNREGISTERED, type(msg).__name__)
            elif self.member_keys is not None and key != self.member_keys[q]:
                # a peer that chose a registered member's routing id (its connection gone) speaks with its own key
                self._drop(identity, Drop.WRONG_KEY, type(msg).__name__)
            elif isinstance(msg, G.StateChanged):
                # a member's chain moves forward, one boundary at a time, never ahead of the run's clock
                if not self.reported_slot[q] < msg.slot <= self.now() + 1 or msg.state == self.reported_state[q]:
                    self._drop(identity, Drop.OUT_OF_ORDER, f"state {msg.state} at slot {msg.slot}")
                    continue
                self.reported_slot[q], self.reported_state[q] = msg.slot, msg.state
                self.changes.append((q, float(msg.slot), msg.state))
            elif isinstance(msg, G.Received):
                key = next((k for k in self.sending if k[2] == msg.transfer), None)  # type: ignore[index]
                sending = self.sending.get(key) if key is not None else None
                if (sending is not None and sending.worker == q and sending.sent == sending.total
                        and not sending.received):
                    sending.received = True
                    self.ends.append((q, key))
                else:
                    self._drop(identity, Drop.NOT_ITS_TRANSFER, f"received transfer {msg.transfer}")
            elif isinstance(msg, G.Finished):
                gang = self.gang_key
                if gang is None or gang[1] != msg.gang or q not in self.members:  # type: ignore[index]
                    continue  # a part of a gang lost or replaced meanwhile
                if q in self.finished:
                    self._drop(identity, Drop.FINISHED_TWICE, f"gang {msg.gang}")
                    continue
                self.finished.add(q)
                if self.finished >= set(self.members):
                    self.ends.append((q, gang))
            elif isinstance(msg, G.GangBye):
                raise MemberLost(f"gang member {q} left: {msg.reason[:200]}")

    # ------------------------------------------------------------------ the core's decisions, carried out

    def _step(self, outs: list[Any]) -> None:
        """After a core call: the link's transfers and the gang, as the core now has them, told to the members.
        (The Etas in ``outs`` are the rate changes; the core's state says the same, and also what was dropped.)"""
        del outs
        app = self.app
        queue = app.link.queue
        for key in [k for k in self.sending if k not in queue]:
            s = self.sending.pop(key)
            if not s.received and app.states[s.worker] != DOWN:  # cancelled (a DOWN member dropped it itself)
                self._send(s.worker, G.CancelTransfer(key[2]))  # type: ignore[index]
        for key, t in queue.items():
            if key not in self.sending:
                total = max(1, round(t.activity.left * self.bytes_per_slot))
                self.sending[key] = _Sending(t.worker, total)
                self.result.transfers += 1
        holding = {q for q, n in app.data_held.items() if n > 0 or any(
            k[0] == DATA for k in app.pending.get(q, ()))}  # type: ignore[index]
        for q in self.with_data - holding:
            if app.states[q] != DOWN:
                self._send(q, G.Release("left the configuration"))
        self.with_data = holding
        self._gang()

    def _gang(self) -> None:
        app = self.app
        gang = app.gang
        key = gang.key if gang is not None and not gang.lost else None
        if self.gang_key is not None and self.gang_key != key:  # lost, replaced or ended
            for q in self.members:
                if q not in self.finished and app.states[q] != DOWN:
                    self._send(q, G.Stop(self.gang_key[1]))  # type: ignore[index]
            self.gang_key, self.gang_running = None, False
        if gang is None or key is None:
            return
        rate = gang.activity.rate
        if self.gang_key is None:
            if rate <= 0:
                return
            self.gang_key, self.gang_running, self.finished = key, True, set()
            self.members = list(app.config)
            # what is left of it on the wall, to end FINISH_AHEAD before the core's end
            seconds = (gang.activity.finish_time() - FINISH_AHEAD - self.now()) * self.time_unit
            for q in self.members:
                self._send(q, G.Compute(key[1], max(seconds, 1e-3)))  # type: ignore[index]
        elif (rate > 0) != self.gang_running:
            self.gang_running = rate > 0
            for q in self.members:
                if app.states[q] != DOWN:
                    self._send(q, G.Hold(key[1], self.gang_running))  # type: ignore[index]

    def _pump(self, now: float) -> float:
        """Send every moving transfer's bytes due by ``now``; when (model time) to pump next."""
        wake = math.inf
        moving = 0
        for key, t in self.app.link.queue.items():
            s = self.sending[key]
            if t.activity.rate <= 0:
                continue
            moving += 1
            finish = t.activity.finish_time() - FINISH_AHEAD
            due = s.total if now >= finish else self._due(s, t.activity, now + FINISH_AHEAD)
            while s.sent < due:
                n = min(G.MAX_CHUNK, due - s.sent)
                kind = G.PROGRAM if key[0] != DATA else G.DATA  # type: ignore[index]
                self._send(s.worker, G.Chunk(key[2], kind, s.sent, s.total, _PAYLOAD[:n]))  # type: ignore[index]
                s.sent += n
                self.result.bytes_sent += n
            if s.sent < s.total:
                wake = min(wake, finish, now + PUMP_SLOT_SHARE)
        self.result.most_moving = max(self.result.most_moving, moving)
        if moving > self.app.link.n_com:
            raise AssertionError(f"{moving} transfers moving, n_com = {self.app.link.n_com}")
        return wake

    def _due(self, s: _Sending, activity: Any, now: float) -> int:
        """Bytes due by model time ``now``: the share done then (its size in slots is its bytes over
        bytes_per_slot)."""
        size = s.total / self.bytes_per_slot
        done = size - activity.remaining(now)
        return min(s.total, max(s.sent, int(done * self.bytes_per_slot)))

    # ------------------------------------------------------------------ the wire

    def _send(self, q: int, msg: Any) -> None:
        identity = self.identities[q]
        if identity is None:
            return
        try:  # never waits for a member: one that reads nothing would stop the run's slot clock
            self.socket.send_multipart([identity, G.encode(msg)], zmq.NOBLOCK)
        except zmq.ZMQError as e:  # the member is gone (ROUTER_MANDATORY), or its queue is full: it reads nothing
            if isinstance(msg, G.GangBye):
                return
            why = "it reads nothing (its queue is full)" if e.errno == zmq.EAGAIN else str(e)
            raise MemberLost(f"gang member {q} cannot be reached: {why}") from None

    def _recv(self) -> tuple[bytes, Any, str | None]:
        """The sender's routing id, its message (None: dropped) and, keyed, the key ZeroMQ authenticated it by
        (every frame after the hello comes on the connection the hello bound to its worker)."""
        frames = self.socket.recv_multipart(copy=False)
        identity = frames[0].bytes
        key = (frames[-1].get("User-Id") or None) if self.member_keys is not None else None
        if len(frames) != 2:
            self._drop(identity, Drop.FRAMES, f"{len(frames)} frames")
            return identity, None, key
        try:
            return identity, G.decode(frames[1].buffer, G.FROM_MEMBER), key
        except ProtocolError as e:
            self._drop(identity, e.reason, e.detail)
            return identity, None, key

    def _drop(self, identity: bytes, reason: str, detail: str = "") -> None:
        """Count a dropped frame, and log it at a bounded rate (a member cannot flood the log)."""
        self.result.drops += 1
        q = self.identities.index(identity) if identity in self.identities else -1
        self.drop_log.drop(reason, f"worker {q}" if q >= 0 else "an unregistered peer", detail)


def _member_keys(keys: security.ServerKeys, workers: int) -> list[str]:
    """Worker q's public key (z85, as a frame's User-Id gives it), from ``authorized/member-q.key``; KeyFileError
    naming the first worker without one."""
    names = {G.member_name(q): q for q in range(workers)}
    bound = security.named_keys(keys, names)
    missing = [q for q in range(workers) if q not in bound]
    if missing:
        raise security.KeyFileError(f"{keys.authorized / (G.member_name(missing[0]) + '.key')}: no such key: every "
                                    f"gang member needs a key of its own ({len(missing)} of {workers} missing)")
    return [bound[q] for q in range(workers)]


def _fingerprint(key: str | None) -> str:
    return security.fingerprint(key.encode("ascii")) if key else "no key"


__all__ = ["FINISH_AHEAD", "GRACE", "LEAD", "GangRun", "GangRunResult", "MemberLost", "security_mode"]
