"""When each packet of one link direction leaves the relay: delay, jitter, loss and a bandwidth cap, FIFO (pure:
no clock, no I/O; the relay gives the times)."""

from __future__ import annotations

import random

from mgst.netem.spec import LinkSpec

# Packets held per direction at most (the kernel netem's default limit); more are dropped at the tail, as a full
# router queue would. At 10 mbit/s this is 1.2 s of 1500-byte packets.
QUEUE_LIMIT = 1000


class DirectionSchedule:
    """One direction of one link. A packet of ``size`` bytes arriving at ``now`` is serialised at ``rate`` after
    those before it (a queue, as a router's), then travels ``delay`` +- ``jitter`` (uniform, as netem without a
    distribution table; never below 0). Departures keep the arrival order (FIFO): a packet whose jitter draw would
    overtake the one before it leaves right after it instead (netem reorders unless a rate is set; TCP does not
    need reordering to see jitter). ``loss``: each packet is dropped independently with that probability."""

    def __init__(self, link: LinkSpec, rng: random.Random, queue_limit: int = QUEUE_LIMIT):
        self.link = link
        self.rng = rng
        self.queue_limit = queue_limit
        self.busy_until = 0.0  # when the serialiser (the rate cap) is free
        self.last_departure = 0.0
        self.held = 0  # packets admitted and not yet sent (the relay calls sent() for each)
        self.dropped = 0  # by loss
        self.overflowed = 0  # by the queue limit

    def admit(self, now: float, size: int) -> float | None:
        """The departure time of a packet of ``size`` bytes arriving at ``now``, or None if it is dropped."""
        link = self.link
        if link.loss > 0 and self.rng.random() < link.loss:
            self.dropped += 1
            return None
        if self.held >= self.queue_limit:
            self.overflowed += 1
            return None
        ready = now
        if link.rate is not None:
            ready = max(now, self.busy_until) + size * 8 / link.rate
            self.busy_until = ready
        delay = link.delay
        if link.jitter > 0:
            delay = max(0.0, delay + self.rng.uniform(-link.jitter, link.jitter))
        departure = max(ready + delay, self.last_departure)
        self.last_departure = departure
        self.held += 1
        return departure

    def sent(self) -> None:
        """A packet admitted has left."""
        self.held -= 1
