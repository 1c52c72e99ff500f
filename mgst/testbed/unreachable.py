"""Sends that found a puller's connection gone, judged once what waits is read: a reconnection is not a failure.

With ROUTER_MANDATORY a send to a connection that is gone fails at once (EHOSTUNREACH), and a send to one whose
queue is full fails too (EAGAIN): the mapper takes either as its machine unreachable (down, or silent with
time-out detection). But a puller that found the mapper silent for its liveness window (a stall of the mapper: a
long decision, a busy machine) closed its connection and says hello on a new one, and that hello may be waiting in
the socket, or still in its handshake, when the mapper wakes and its first heartbeat fails. So a failed send is a
verdict pending: judged once a receive pass finds the socket empty (or a heartbeat interval later while messages
keep coming), and, after a gap in the mapper's heartbeats its pullers may have taken for silence, not before
that gap's grace (its pullers' liveness window) is over. A hello that replaced the connection meanwhile makes the
verdict void; the connection counts as gone for admission at once (a restarted puller is not refused as taking
a live machine's name).
"""

from __future__ import annotations

import math
from collections.abc import Callable


class PendingUnreachable:
    """The machines a send found unreachable, not judged yet, and the grace after a stall of the mapper.

    ``by_identity`` is the mapper's (a registered puller's routing id -> its machine); ``declare(machine, now,
    why)`` takes a machine unreachable (``Heartbeats.unreachable``). ``interval`` is the heartbeat interval and
    ``liveness`` the intervals of silence after which a puller says hello again.
    """

    def __init__(self, by_identity: dict[bytes, int], declare: Callable[[int, float, str], None], interval: float,
                 liveness: int):
        self.by_identity = by_identity
        self.declare = declare
        self.interval = interval
        self.liveness = liveness
        self.pending: dict[int, tuple[bytes, str, float]] = {}  # machine -> (the connection that failed, why, when)
        self.grace_until = -math.inf  # failures until then wait for it (a stall's reconnections)
        self.last_beat: float | None = None

    def __bool__(self) -> bool:
        return bool(self.pending)

    def beat(self, now: float) -> None:
        """A heartbeat slice goes out at ``now`` (after the gap since the last one is looked at)."""
        self._look_at_gap(now)
        self.last_beat = now

    def failed(self, identity: bytes, machine: int, why: str, now: float) -> None:
        """A send to ``identity``, machine ``machine``'s registered connection, failed (``why``)."""
        self._look_at_gap(now)
        if self.by_identity.get(identity) == machine and self.pending.get(machine, (None,))[0] != identity:
            self.pending[machine] = (identity, why, now)

    def _look_at_gap(self, now: float) -> None:
        """If the last heartbeat slice went out so long before ``now`` that a puller may have heard nothing for
        its liveness window (it hears one every interval: a gap over liveness - 1 intervals), the pullers may be
        saying hello on new connections: failures until a liveness window from now wait for it."""
        if self.last_beat is not None and now - self.last_beat > (self.liveness - 1) * self.interval:
            self.grace_until = max(self.grace_until, now + self.liveness * self.interval)

    def gone(self, machine: int, identity: bytes | None) -> bool:
        """A send to ``identity``, ``machine``'s connection, failed: whatever its last message, it is not live."""
        return identity is not None and self.pending.get(machine, (None,))[0] == identity

    def due(self, now: float) -> float:
        """When the mapper's loop should next look (``judge``): now, or the end of the grace; inf: nothing pending."""
        if not self.pending:
            return math.inf
        if now < self.grace_until and all(at <= self.grace_until for _, _, at in self.pending.values()):
            return self.grace_until
        return now

    def judge(self, now: float, backlog: bool, final: bool = False) -> None:
        """Declare unreachable each pending machine whose connection is still its puller's: once every message
        waiting has been read (``backlog`` False) or a heartbeat interval after the failure, and not within a
        stall's grace; ``final``: as they stand (the run is over, nothing more is read)."""
        for machine, (identity, why, failed_at) in list(self.pending.items()):
            if not final:
                if backlog and now - failed_at < self.interval:
                    continue
                if failed_at <= self.grace_until and now < self.grace_until:
                    continue
            del self.pending[machine]
            if self.by_identity.get(identity) == machine:
                self.declare(machine, now, why)


__all__ = ["PendingUnreachable"]
