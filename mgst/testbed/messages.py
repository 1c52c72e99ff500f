"""What each message from a puller means: registration (who may hold a name), results, readiness.

An object the mapper (:class:`mgst.testbed.mapper.Mapper`) holds, kept apart so
that the mapper's run loop (clock, job generator, timers, write-ahead sending) and
its reading of the wire can each be read alone. Every rule here checks a message
against who sent it before anything is recorded: a hostile or broken peer is
counted and dropped.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection
from itertools import islice
from typing import Any

import zmq

from mgst.availability import registry as availability
from mgst.core.events import (
    MachineAvailability,
    MachineDown,
    MachineHeard,
    MachineReady,
    MachineUp,
    ReplicaComputing,
    ReplicaDone,
    ReplicaFailed,
)
from mgst.core.scheduler import Scheduler
from mgst.core.state import STAGING, WAITING, MachineState
from mgst.model import Availability, Experiment
from mgst.policies.failure import PolicyFailed
from mgst.testbed.admission import HELLO_BURST, Holder, TokenBuckets, admit, hello_rate
from mgst.testbed.checkpoints import MachineCheckpoints
from mgst.testbed.connection import Connection
from mgst.testbed.journal import Journal
from mgst.testbed.router import Router
from mgst.testbed.run_clock import RunClock
from mgst.testbed.unreachable import PendingUnreachable
from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.drops import DropLog

log = logging.getLogger("mgst.testbed.mapper")

# A failed command refused by a puller's allow-list this many times takes the machine out of the run.
REFUSE_LIMIT = 3
# An unknown-name refusal lists at most this many of the experiment's names ("and K more"): enough to see
# the naming scheme, while the reason stays a line, whatever the experiment's size.
NAMES_SHOWN = 20
# A puller's clock may be off the mapper's (a lab without NTP), but not by more than this: a time stamp further
# off is nonsense, and would overflow the clock offsets' arithmetic and the timestamps written (past year 9999).
MAX_CLOCK_SKEW = 10 * 365 * 86400.0
# The fields of each puller message stamped on the puller's clock (a Heartbeat's echo_received: where it is used).
_STAMPED: dict[type, tuple[str, ...]] = {
    P.Heartbeat: ("clock",), P.Ready: ("clock",), P.Computing: ("clock",), P.Started: ("received", "started"),
    P.Done: ("received", "started", "finished"),
}


def some_names(names: Collection[str]) -> str:
    """The first NAMES_SHOWN of ``names`` (each at most 64 characters), then how many more."""
    shown = ", ".join(name[:64] for name in islice(names, NAMES_SHOWN))
    return shown + (f" and {len(names) - NAMES_SHOWN:,} more" if len(names) > NAMES_SHOWN else "")


# Requests for work (Ready) that change what the core knows, per machine: a bucket of READY_BURST
# refilled at READY_RATE a second; one beyond is held (the latest) and applied at a heartbeat once
# the bucket allows, never dropped. An honest puller sends a Ready once per registration and per
# replica that ends without a result asking for more (failed, cancelled): a few a second at most.
# (A Ready that changes nothing, a repeat, journals nothing at all.) A puller's CPU share reports (Share) have
# a bucket of the same size per machine: one per availability period, of 10 ms at the shortest (the puller's
# MIN_PERIOD) but seconds to hours in any law of a real run; one beyond is held (the latest) likewise.
READY_BURST = 20.0
READY_RATE = 10.0
# A result's compute time (the puller's t5 - t4) is believed only up to the time the mapper saw the replica out
# (t3 to t6) times this, plus COMPUTED_SLACK seconds: two clocks' rates differ by parts per million, and the
# puller stamps t4 after it received the job. Beyond, the puller is wrong or lying (a policy learning rates from
# it would be steered), and the core takes its own figure instead.
COMPUTED_RATE_SLACK = 1.001
COMPUTED_SLACK = 0.01
# The log level of a machine's message about its own replica that is over: what a puller sends again after a resume
# of the mapper (its results the journal already holds), or sends as a cancel crosses it. Expected, so not a warning
# (a flood of them is still counted, and rate-limited, as the others are).
_LATE = logging.INFO


class PullerMessages:
    """The mapper's handling of puller messages, on the state it shares with the mapper.

    Shared, not copied: the experiment, the core, the journal, the pullers' connections (and
    ``by_identity``, which maps a registered puller's routing id to its machine), the run's
    clock, the drop counters, the router (its socket is read here; replies are queued on it)
    and the machines' checkpoints. ``keys`` are the mapper's CURVE keys (None: not secured).
    ``feed(now, event)`` gives the core an input as the mapper does (journalled,
    its decisions carried out); ``machine_gone(j, now, left)`` takes machine ``j`` out.
    """

    def __init__(self, experiment: Experiment, core: Scheduler, journal: Journal, conns: list[Connection],
                 by_identity: dict[bytes, int], clock: RunClock, drops: DropLog, router: Router,
                 checkpoints: MachineCheckpoints, keys: security.ServerKeys | None, *, feed: Callable[..., None],
                 machine_gone: Callable[[int, float, bool], None], heartbeat_interval: float, liveness: int,
                 executor: str, failures: bool, seed: int, unreachable: PendingUnreachable,
                 availability_forms: list[tuple] | None = None, availability_until: float = math.inf):
        self.experiment = experiment
        self.core = core
        self.journal = journal
        self.conns = conns
        self.by_identity = by_identity
        self.clock = clock
        self.drops = drops
        self.checkpoints = checkpoints
        self.socket = router.socket
        self.curve = router.curve
        self.send = router.send
        self.feed = feed
        self.machine_gone = machine_gone
        self.time_unit = clock.time_unit
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.executor = executor
        self.failures = failures
        self.seed = seed
        # the sends that found a connection gone, not judged yet (the mapper's)
        self.unreachable = unreachable
        # each machine's availability as its puller plays it from the run's start (made by the mapper), and until when
        self.availability_forms = availability_forms
        self.availability_until = availability_until
        # A resumed run whose clock runs again: each welcome is followed by a Begin with the model time, on which the
        # puller re-bases the failure law it plays if it is off (mgst.testbed.mapper, _rebase_failures): one that was
        # away when the clock ran again, or whose Begin then was lost, is told at its next welcome.
        self.rebase_on_welcome = False
        self.names = {m.name: j for j, m in enumerate(experiment.machines)}
        # With per-machine keys (mgst keys), authorized/NAME.key binds machine NAME to its key from the
        # start: another admitted key cannot take a name whose puller has not registered yet.
        self.prebound_keys = security.named_keys(keys, self.names) if keys is not None else {}
        # Machines by the key they registered with (the journal's), to tell a shared key in O(1).
        self.machines_of_key: dict[str, set[int]] = {}
        for j, mlog in enumerate(journal.machines):
            if mlog.key is not None:
                self.machines_of_key.setdefault(mlog.key, set()).add(j)
        # per (key, machine): admitted hellos, at a rate the failure law's restarts never need
        self.hello_rate = TokenBuckets(HELLO_BURST, hello_rate(experiment.failures if failures else None,
                                                               self.time_unit, experiment))
        # per machine: requests for work that change something
        self.ready_rate = TokenBuckets(READY_BURST, READY_RATE)
        # A re-registered machine's former routing id -> the machine (one per machine: bounded): what was in
        # flight on it when the puller reconnected is told from a stranger's messages (and dropped too).
        self.superseded: dict[bytes, int] = {}

    # ------------------------------------------------------------------ receiving

    def receive_some(self, limit: int) -> bool:
        """Handle up to ``limit`` messages; True if more may be waiting, False once the socket is empty."""
        sock = self.socket
        for _ in range(limit):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return False
            now = time.time()
            identity = frames[0].bytes
            if len(frames) != 2:
                self._bad(identity, P.Drop.FRAMES, f"{len(frames) - 1} frames")
                continue
            try:
                msg = P.decode(frames[1].buffer)
            except P.ProtocolError as e:
                self._bad(identity, e.reason, e.detail)
                continue
            if type(msg) not in P.FROM_PULLER:
                self._bad(identity, P.Drop.DIRECTION, type(msg).__name__)
                continue
            try:
                if type(msg) is P.Hello:
                    key = frames[1].get("User-Id") if self.curve else None
                    self.hello(identity, msg, key or None, now)
                elif identity not in self.by_identity:
                    self._unregistered(identity, type(msg), (frames[1].get("User-Id") or None) if self.curve else None)
                elif self.curve and self._key_differs(identity, frames[1].get("User-Id") or None):
                    self._bad(identity, P.Drop.WRONG_KEY, type(msg).__name__)
                else:
                    self.handle(identity, msg, now)
            except PolicyFailed:  # (not the input's fault: the core cannot go on, and the run stops: Mapper._run)
                raise
            except Exception:  # no input may crash the mapper; a bug here must still be seen
                log.exception("error handling %s from %s", type(msg).__name__, identity.hex()[:16])
                self.drops.counts[P.Drop.HANDLER_ERROR] += 1
        return True

    def _key_differs(self, identity: bytes, key: str | None) -> bool:
        """Whether ``identity`` is a registered machine's routing id on a connection authenticated by another key
        than the machine registered with: libzmq lets a peer choose its routing id, so one with any admitted key
        could take the id of a connection that dropped, and speak as its machine."""
        j = self.by_identity.get(identity)
        return j is not None and self.conns[j].key != key

    def _unregistered(self, identity: bytes, kind: type, key: str | None) -> None:
        """A message but a hello on a connection no machine is registered on, dropped. Late on a connection its
        machine has since replaced, or on one authenticated by the key a machine registered with while that machine
        has no connection (its puller's messages before its hello again: to a resumed mapper, or once its machine
        was taken down), it is that machine's, superseded (quietly); anything else is an unregistered sender's, with
        a warning (a second connection holding a live machine's key is an impostor's; a Bye of one is not
        counted)."""
        j = self.superseded.get(identity)
        if j is None and key is not None:
            away = [h for h in self.machines_of_key.get(key, ()) if self.conns[h].identity is None]
            j = min(away) if away else None  # (a key shared by machines: the first of them without a connection)
        if j is not None:
            self.drops.drop(P.Drop.SUPERSEDED, self.experiment.machines[j].name, kind.__name__, level=logging.DEBUG)
        elif kind is not P.Bye:
            self._bad(identity, P.Drop.UNREGISTERED, kind.__name__)

    def sender(self, identity: bytes) -> str:
        """Who ``identity`` is: its machine's name, or the start of the routing id."""
        j = self.by_identity.get(identity)
        return self.experiment.machines[j].name if j is not None else f"connection {identity.hex()[:16]}"

    def _bad(self, identity: bytes, reason: str, detail: str = "", level: int = logging.WARNING) -> None:
        self.drops.drop(reason, self.sender(identity), detail, level=level)

    def handle(self, identity: bytes, msg: Any, now: float) -> None:
        """A message other than a hello, from ``identity``."""
        j = self.by_identity.get(identity)
        t = type(msg)
        if j is None:  # an unknown sender gets no reply
            self._unregistered(identity, t, None)
            return
        stamped = _STAMPED.get(t)
        if stamped is not None and not all(abs(getattr(msg, f) - now) <= MAX_CLOCK_SKEW for f in stamped):
            self._bad(identity, P.Drop.BAD_VALUE, f"{t.__name__}: a time stamp more than {MAX_CLOCK_SKEW:.3g} s off "
                                                  "this clock")
            return
        conn = self.conns[j]
        conn.last_seen = now
        if self.core.machines[j].silent:
            log.info("%s speaks again", self.experiment.machines[j].name)
            self.feed(now, MachineHeard(j))
        if t is P.Heartbeat:
            conn.remote_clock, conn.remote_received = msg.clock, now
            # A clock sample only for the echo of the heartbeat we sent last, once: a peer cannot
            # feed the estimator (or the journal) more samples than we send heartbeats.
            if conn.hb_sent is not None and msg.echo == conn.hb_sent and abs(msg.echo_received - now) <= MAX_CLOCK_SKEW:
                conn.hb_sent = None
                # The journal (and the estimator, fed from it) takes one exchange per clock_offsets.PERIOD.
                sample = conn.clock_samples.offer(msg.echo, msg.echo_received, msg.clock, now)
                if sample is not None:
                    self.journal.clock_sample(j, *sample)
            if j in self.checkpoints.holding:  # held checkpoints whose interval has passed
                self.checkpoints.record_due(j, now)
            if conn.share_held is not None and self.ready_rate.allow((j, P.Share), now):  # a held share, now
                (share, state), conn.share_held = conn.share_held, None
                self._share(j, share, state, now)
            if conn.ready_held is not None and self.clock.held is None and self.ready_rate.allow(j, now):
                self._apply_held_ready(identity, j, now)  # a held request, now
        elif t is P.Ready:
            if not self._ready_news(j, msg, now):  # a repeat, or too often: nothing journalled now
                return
            conn.pending = (msg.clock, now)
            self._ready(identity, j, now, msg.share, msg.slots)
        elif t is P.Share:  # its availability process took the CPU back, or gave it again
            if self.ready_rate.allow((j, P.Share), now):
                conn.share_held = None
                self._share(j, msg.share, msg.state, now)
            else:  # faster than an honest puller's periods: the latest is applied at a heartbeat
                conn.share_held = (msg.share, msg.state)
        elif t is P.Computing or t is P.Progress:
            live = self.core.replica(msg.replica)
            if live is None or live.machine != j:
                r = self.journal.replicas.get(msg.replica)
                mine = r is not None and r.machine == j
                self._bad(identity, P.Drop.FINISHED_REPLICA if mine else P.Drop.NOT_ITS_REPLICA,
                          f"{t.__name__.lower()} {msg.replica}", _LATE if mine else logging.WARNING)
            elif t is P.Computing:
                if live.phase == STAGING:
                    self.feed(now, ReplicaComputing(msg.replica))
            elif msg.progress > live.checkpoint:
                self.checkpoints.offer(j, msg.replica, msg.progress, now)
        elif t is P.Started:
            r = self.journal.replicas.get(msg.replica)
            live = self.core.replica(msg.replica)
            if r is None or r.machine != j:
                self._bad(identity, P.Drop.NOT_ITS_REPLICA, f"started {msg.replica}")
            elif live is None or live.machine != j:
                self._bad(identity, P.Drop.FINISHED_REPLICA, f"started {msg.replica}", _LATE)
            elif r.t4_remote is None:
                self.journal.started(msg.replica, msg.received, msg.started)
        elif t is P.Done:
            self._done(identity, j, msg, now)
        elif t is P.Failed:
            self._failed(identity, j, msg, now)
        elif t is P.Bye:
            log.info("%s leaves: %r", self.experiment.machines[j].name, msg.reason[:200])  # (%r: the peer's text)
            self.machine_gone(j, now, True)  # (it left: not a failure)

    def _apply_held_ready(self, identity: bytes, j: int, now: float) -> None:
        """Machine ``j``'s held request for work (``conn.ready_held``), handled now, unless it is a repeat now."""
        conn = self.conns[j]
        assert conn.ready_held is not None
        (held, received), conn.ready_held = conn.ready_held, None
        if self._ready_changes(j, held.slots, held.share):
            conn.pending = (held.clock, received)
            self._ready(identity, j, now, held.share, held.slots)

    def release_held_requests(self, now: float) -> None:
        """A resumed run's clock runs again: the requests for work its pullers made while it stood still, now."""
        for j, conn in enumerate(self.conns):
            if conn.identity is not None and conn.ready_held is not None:
                self._apply_held_ready(conn.identity, j, now)

    def _ready_changes(self, j: int, slots: int, share: float | None = None) -> bool:
        """Whether a request for work for ``slots`` slots at ``share`` (None: the share it has) tells the core
        anything: not if the machine already asks for the same slots with the same share (then it is a repeat:
        it journals nothing)."""
        m = self.core.machines[j]
        if m.silent or m.suspected or m.state is MachineState.DOWN:
            return True
        if (m.reclaimed or m.cpu_share <= 0.0) and (share is None or share == m.cpu_share):
            return False  # no CPU to give: the core would ask for no slot (mgst.core.lifecycle make_ready)
        if m.state is not MachineState.READY:
            return True
        free = m.slots - len(m.replicas)
        want = free if slots > free else slots
        return want != m.asking or (share is not None and share != m.cpu_share)

    def _ready_news(self, j: int, msg: P.Ready, now: float) -> bool:
        """True if a Ready is to be handled now; a repeat is ignored, and one over the machine's rate is
        held (the latest) for a heartbeat when the rate allows."""
        conn = self.conns[j]
        conn.ready_held = None  # superseded
        if not self._ready_changes(j, msg.slots, msg.share):
            return False
        if self.ready_rate.allow(j, now):
            return True
        conn.ready_held = (msg, now)
        return False

    def _share(self, j: int, share: float, state: int, now: float) -> None:
        """The puller is UP or RECLAIMED (``state``) at CPU share ``share`` (0: its replicas are suspended): the core
        moves what it runs, and withdraws its request if it has no CPU to give (as the puller, which asks again)."""
        m = self.core.machines[j]
        if share != m.cpu_share or bool(state) != m.reclaimed:
            self.feed(now, MachineAvailability(j, Availability(state), share))

    def _ready(self, identity: bytes, j: int, now: float, share: float | None = None,
               slots: int | None = None) -> None:
        m = self.core.machines[j]
        if self.clock.held is not None:
            # A resumed run's model time stands still while it waits for its pullers: work sent now would start and
            # end at one model instant. The request is held (the latest), and made once the clock runs again.
            conn = self.conns[j]
            clock = conn.pending[0] if conn.pending[0] is not None else now
            conn.ready_held = (P.Ready(m.cpu_share if share is None else share, clock,
                                       m.slots if slots is None else slots), now)
            return
        if m.state is not MachineState.DOWN and m.free_slots <= 0:  # never drops a replica it runs
            self._bad(identity, P.Drop.READY_WHILE_BUSY)
            return
        if m.state is MachineState.DOWN:  # suspected down by the policy: asking again brings it back
            self.journal.machine_up(j, now)
        self.feed(now, MachineReady(j, share, slots))

    def _done(self, identity: bytes, j: int, msg: P.Done, now: float) -> None:
        r = self.journal.replicas.get(msg.replica)
        if r is None or r.machine != j:
            self._bad(identity, P.Drop.NOT_ITS_REPLICA, f"done {msg.replica}")
            return
        if r.t6 is not None or not self.core.accepts_result(msg.replica):
            # already counted, or not wanted any more: nothing is recorded, but a free machine still asks
            self._bad(identity, P.Drop.FINISHED_REPLICA, f"done {msg.replica}", _LATE)
            if r.t6 is None and r.outcome == "timeout" and not r.late_heard and "on_event" in self.core.hooks:
                # The first result of a replica given up on by a time-out, whose job was done meanwhile: the
                # core counts it stale, and a policy that listens learns that the machine was up after all
                # (LPAS_DG counts a false suspicion), as in a simulation. Once: a replay tells nothing more.
                r.late_heard = True
                self.feed(now, ReplicaDone(msg.replica))
        else:
            self.journal.reported_done(msg.replica, msg.received, msg.started, msg.finished, now,
                                       msg.achieved_share)
            # How long it computed, t5 - t4 on the puller's own clock (a duration: no offset to correct),
            # in model time; the core's figure (sent to result) would include the delays.
            computed_s = msg.finished - msg.started
            if not 0.0 <= computed_s <= (now - r.t3) * COMPUTED_RATE_SLACK + COMPUTED_SLACK:
                # the result counts; only its compute time is dropped (counted as a bad field value)
                self._bad(identity, P.Drop.BAD_VALUE, f"done {msg.replica}: computed {computed_s:.6g} s, beyond "
                                                      f"the {now - r.t3:.6g} s it was out")
                computed: float | None = None
            else:
                computed = computed_s / self.time_unit
            self.feed(now, ReplicaDone(msg.replica, False, computed))
        if msg.ready:
            conn = self.conns[j]
            if self.core.machines[j].state is not MachineState.READY:  # a replay must not move an earlier request
                conn.pending = (msg.finished, now)
            m = self.core.machines[j]
            if conn.ready_held is not None:
                # The puller asked for ``held.slots`` (held by the rate), then this Done adds the slot it frees:
                # it counts held.slots + 1 asked. Applied at a heartbeat after this, the held request would
                # take the count back down by one (or be a "repeat"), and a slot would stay idle for good.
                (held, _), conn.ready_held = conn.ready_held, None
                self._ready(identity, j, now, held.share, min(held.slots + 1, m.slots))
            else:
                want = min(m.asking + 1, m.slots)
                if not self._ready_changes(j, want):
                    return  # it asks for every slot it can already (a replayed result): a repeat journals nothing
                self._ready(identity, j, now, None, want)

    def _failed(self, identity: bytes, j: int, msg: P.Failed, now: float) -> None:
        live = self.core.replica(msg.replica)
        if live is None or live.machine != j:
            r = self.journal.replicas.get(msg.replica)
            mine = r is not None and r.machine == j  # its own, already over: a replay
            self._bad(identity, P.Drop.FINISHED_REPLICA if mine else P.Drop.NOT_ITS_REPLICA, f"failed {msg.replica}",
                      _LATE if mine else logging.WARNING)
            return
        name = self.experiment.machines[j].name
        outcome = "refused" if msg.code == P.FAIL_REFUSED else "failed"
        self.journal.end(outcome, msg.replica)
        # %r: the puller's text, its control characters escaped (they would rewrite the operator's terminal)
        log.warning("%s: replica %d %s: %r", name, msg.replica, outcome, msg.reason[:200])
        self.feed(now, ReplicaFailed(msg.replica, f"{msg.code}: {msg.reason[:200]}"))
        if msg.code == P.FAIL_REFUSED:
            conn = self.conns[j]
            conn.refusals += 1
            if conn.refusals >= REFUSE_LIMIT:
                log.error("%s refused this run's commands %d times: taken out of the run (check its allow-list)",
                          name, conn.refusals)
                self.send(identity, P.Bye("your allow-list refuses this run's commands"), None)
                self.journal.machine_expelled(j, now, f"its allow-list refused this run's commands {conn.refusals} "
                                                      "times")
                self.machine_gone(j, now, False)

    def hello(self, identity: bytes, msg: P.Hello, key: str | None, now: float) -> None:
        """A puller asks to serve a machine (with CURVE key ``key``): admitted and welcomed, or refused."""
        if msg.version != P.PROTOCOL_VERSION:
            self._refuse(identity, P.Drop.VERSION, f"protocol version {msg.version}; this mapper speaks "
                                                   f"{P.PROTOCOL_VERSION}", True)
            return
        j = self.names.get(msg.machine)
        if j is None:
            self._refuse(identity, P.Drop.UNKNOWN_MACHINE, f"unknown machine {msg.machine[:64]!r}; this experiment "
                                                           f"has {some_names(self.names)}", True)
            return
        slots = self.experiment.machines[j].slots
        if msg.slots < slots:
            self._refuse(identity, P.Drop.SLOTS, f"machine {msg.machine[:64]!r} has {slots} slots in this "
                                                 f"experiment; the puller offers {msg.slots} (start it with "
                                                 f"--slots {slots})", True)
            return
        if self.executor not in msg.executors:
            self._refuse(identity, P.Drop.EXECUTOR, f"this run needs the {self.executor!r} executor"
                         + (" (enable it with an allow-list)" if self.executor == "command" else ""), True)
            return
        conn = self.conns[j]
        mlog = self.journal.machines[j]
        holder = Holder(
            # The key folder's own key for the name wins over the one the journal saw (keys made anew for a
            # resume, as `mgst run --resume` does: the old ones are no longer admitted at all).
            bound_key=self.prebound_keys.get(j) or mlog.key, incarnations=tuple(mlog.incarnations),
            identity=conn.identity,
            # (a connection a send found gone is not live, though its verdict waits for what is read)
            live=(conn.identity is not None and now - conn.last_seen <= self.liveness * self.heartbeat_interval
                  and not self.unreachable.gone(j, conn.identity)),
            key_shared=key is not None and bool(self.machines_of_key.get(key, set()) - {j}),
        )
        refusal = admit(msg.machine, holder, key, msg.incarnation, identity)
        if refusal is not None:
            self._refuse(identity, refusal.drop, refusal.reason, refusal.fatal, level=logging.ERROR)
            return
        if not self.hello_rate.allow((key, j), now):  # a registration journals events: at a bounded rate
            self._refuse(identity, P.Drop.HELLO_RATE, f"too many hellos for machine {msg.machine[:64]!r}; "
                                                      "try again later", False)
            return
        conn.ready_held = conn.share_held = None  # what its previous registration said
        m = self.experiment.machines[j]
        restarted = conn.incarnation is not None and conn.incarnation != msg.incarnation
        if restarted and self.core.machines[j].state is not MachineState.DOWN:
            # The machine restarted: whatever it ran is gone, even if we had not noticed.
            self.journal.machine_down(j, now)
            self.feed(now, MachineDown(j))
        same_connection = conn.identity == identity
        if conn.identity is not None and conn.identity != identity:
            self.by_identity.pop(conn.identity, None)
            if conn.superseded is not None:
                self.superseded.pop(conn.superseded, None)  # (its one before: long over)
            conn.superseded = conn.identity
            self.superseded[conn.identity] = j
        self.superseded.pop(identity, None)
        conn.identity = identity
        conn.key = key
        conn.incarnation = msg.incarnation
        conn.last_seen = now
        self.by_identity[identity] = j
        if self.core.machines[j].silent:  # back from a failure no time-out noticed
            self.feed(now, MachineHeard(j))
        # (journalled once per incarnation, and again at each reconnection of it: a hello on a new connection)
        reconnected = bool(mlog.incarnations) and mlog.incarnations[-1] == msg.incarnation and not same_connection
        if (not mlog.incarnations or mlog.incarnations[-1] != msg.incarnation or mlog.key != key
                or mlog.speed != msg.speed or reconnected):
            self._index_key(j, mlog.key, key)
            self.journal.registered(j, msg.incarnation, msg.speed, key)
        # No failure law while a resumed mapper holds its clock for its pullers: one welcomed then would play it in
        # wall time while model time stands still (going down and up, journalled at the held instant, and away when
        # the others are back); it is given the law, from the model time, by the Begin sent when the clock runs.
        self.send(identity, P.Welcome(P.PROTOCOL_VERSION, j, self.time_unit, self.heartbeat_interval,
                                      m.availability, self.executor,
                                      (self.failure_law(j, self.clock.model_now(now))
                                       if self.clock.t0 is not None and self.clock.held is None else None),
                                      m.slots,
                                      self.experiment.simulation.checkpoint_interval or 0.0), j)
        if self.rebase_on_welcome and self.clock.t0 is not None and self.clock.held is None:
            self.send(identity, P.Begin(self.failure_law(j), self.clock.model_now(now)), j)
        if self.core.machines[j].state is MachineState.DOWN:
            self.journal.machine_up(j, now)
            self.feed(now, MachineUp(j, m.availability))
        else:
            if not mlog.periods or mlog.periods[-1][1] is not None:  # back after the mapper's own outage
                self.journal.machine_up(j, now)
            core_m = self.core.machines[j]
            if core_m.state is MachineState.READY:
                # Its previous connection's request is over with it: a welcomed puller asks again for every free
                # slot, and a job sent on the old request would cross the new one ("ready while busy"). (First: a
                # replica found lost below goes back to the queue, not onto the old request.)
                self.feed(now, MachineReady(j, None, 0))
            # Reconcile what it holds with what we think it runs.
            held = set(msg.holds) | set(msg.finished)
            for rid in [rid for rid in self.core.machines[j].replicas if rid not in held]:
                # (sent on the connection it left, as a rule: it reconnected after a silence of the mapper)
                log.info("%s no longer holds replica %d: lost", m.name, rid)
                self.journal.end("unheld", rid)
                self.feed(now, ReplicaFailed(rid, "not held by the puller after reconnecting"))
            # the welcome's share holds, UP, as on the puller, unless it says otherwise (a Share next)
            if core_m.cpu_share != m.availability or core_m.reclaimed:
                self.feed(now, MachineAvailability(j, Availability.UP, m.availability))
        live = self.core.machines[j].replicas
        for rid in msg.holds:
            if rid not in live:
                self.send(identity, P.CancelMsg(rid), j)  # it runs something that is no longer its job
            elif live[rid].phase == WAITING or self.core.machines[j].cpus < self.core.machines[j].slots:
                # its pace as the core has it: a Pace sent before an outage of the mapper may not have arrived
                self.send(identity, P.Pace(rid, 0.0 if live[rid].phase == WAITING else 1.0), j)
        log.info("%s registered (incarnation %x)", m.name, msg.incarnation & 0xFFFFFFFF)

    def _index_key(self, j: int, old: str | None, new: str | None) -> None:
        """Machine ``j`` registers with key ``new`` instead of ``old``: keep ``machines_of_key`` up to date."""
        if old == new:
            return
        if old is not None:
            holders = self.machines_of_key.get(old)
            if holders is not None:
                holders.discard(j)
                if not holders:
                    del self.machines_of_key[old]
        if new is not None:
            self.machines_of_key.setdefault(new, set()).add(j)

    def failure_law(self, j: int, since: float = 0.0) -> tuple | None:
        """Machine ``j``'s availability for its puller, playing it from model time ``since`` (mgst.availability),
        or None. From the run's start (Begin) it is the form made before the run."""
        forms = self.availability_forms
        if forms is None or since <= 0.0:
            return forms[j] if forms is not None else None
        return availability.to_wire(self.experiment, j, self.seed, self.availability_until, since)

    def _refuse(self, identity: bytes, drop: str, reason: str, fatal: bool,
                level: int = logging.WARNING) -> None:
        reason = reason[:P.MAX_STR]  # (every reason here is a line; this bounds any future one)
        self.drops.drop(drop, self.sender(identity), reason, level=level)
        self.send(identity, P.Refused(reason, fatal), None)

