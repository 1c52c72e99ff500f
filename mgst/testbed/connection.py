"""What the mapper knows of the puller serving one machine (a Connection per machine)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mgst.testbed.clock_offsets import OffsetEstimator, PeriodBest
from mgst.wire import protocol as P


@dataclass(slots=True)
class Connection:
    """What the mapper knows of the puller serving one machine."""

    identity: bytes | None = None  # ZeroMQ routing id, None while not registered
    key: str | None = None  # the CURVE key (Z85) its admitted hello came with: every message on identity must carry it
    superseded: bytes | None = None  # the routing id its latest hello replaced (its late messages are dropped)
    incarnation: int | None = None
    last_seen: float = 0.0
    remote_clock: float = -1.0  # the puller's last heartbeat clock, to echo
    remote_received: float = -1.0  # when it arrived (our clock)
    clock: OffsetEstimator = field(default_factory=OffsetEstimator)  # the machine's, shared with the journal
    clock_samples: PeriodBest = field(default_factory=PeriodBest)  # thins its exchanges for the journal
    ready_held: tuple[P.Ready, float] | None = None  # its latest request for work and when it came, held
    pending: tuple[float | None, float | None] = (None, None)  # (t1 on its clock, t2) of its latest request
    hb_seq: int = 0
    hb_sent: float | None = None  # the clock of our last heartbeat to it, until its echo comes back once
    share_held: tuple[float, int] | None = None  # the latest CPU share (and state) it reported, held by the rate
    refusals: int = 0  # commands its allow-list refused
