"""Per-puller clock offsets, estimated from heartbeat exchanges (NTP's minimum-delay filter), in bounded memory."""

from __future__ import annotations

import math
from collections import deque

# An offset estimate uses the exchanges within this many seconds of the time it corrects:
# wide enough to find a quiet exchange, narrow enough to follow a drifting clock.
SPAN = 30.0
# Of a peer's exchanges, one is kept per period of this many seconds (of our clock): the one with
# the smallest delay, which is the one the filter would pick. At the default heartbeat (0.2 s) it is
# the best of 25; a SPAN then holds 6 of them. It is also the most the journal records: at most one
# clock event per peer per PERIOD (plus its first), however fast the peer answers.
PERIOD = 5.0
# The estimator keeps the samples of this many seconds before its latest one: an instant is put on
# our clock when it is recorded, a little after it happened (a job's start, reported when it ends,
# may be a few seconds old), and the SPAN before it is still there.
KEEP = 2 * SPAN
# At most one sample per PERIOD within KEEP (and a partial period at each end).
MAX_KEPT = math.ceil(KEEP / PERIOD) + 2
# How fast a peer's clock may drift from ours, seconds a second (500 ppm: five times a common crystal's
# tolerance): a bound on its offset that one message sets at one instant holds at another d seconds away,
# widened by MAX_DRIFT * d.
MAX_DRIFT = 500e-6


def exchange_delay(t1: float, t2: float, t3: float, t4: float) -> float | None:
    """The network delay of an exchange (its round trip less the peer's holding time), or None if the
    four instants are not consistent (a negative leg: a clock step, or a made-up exchange)."""
    delay = (t4 - t1) - (t3 - t2)
    if delay < 0 or t3 < t2 or t4 < t1:
        return None
    return delay


class OffsetEstimator:
    """Estimates ``remote_clock - local_clock`` for one peer, from its recent exchanges.

    A sample has NTP's four timestamps: our heartbeat left at t1 (our clock), the
    peer got it at t2 and sent its own at t3 (its clock), which reached us at t4.
    If both legs take equal time, offset = ((t2 - t1) + (t3 - t4)) / 2, with an
    error of at most half the delay (t4 - t1) - (t3 - t2). As NTP does, the
    estimate is the sample with the smallest delay (queueing only ever adds to
    a delay) among those near the time in question.

    Memory is bounded whatever the number of samples: one per :data:`PERIOD` (the
    smallest delay of it) over the last :data:`KEEP` seconds, at most :data:`MAX_KEPT`.
    """

    def __init__(self) -> None:
        self._kept: deque[tuple[float, float, float]] = deque(maxlen=MAX_KEPT)  # (delay, offset, t4), t4 increasing
        self._last = -math.inf  # t4 of the latest sample taken
        self.samples = 0  # samples taken in all (a count, not kept)

    def add(self, t1: float, t2: float, t3: float, t4: float) -> None:
        delay = exchange_delay(t1, t2, t3, t4)
        offset = ((t2 - t1) + (t3 - t4)) / 2
        if delay is None or t4 < self._last or not (math.isfinite(delay) and math.isfinite(offset)):
            return  # not a consistent exchange (or a clock step, or a clock beyond arithmetic): ignore
        self._last = t4
        self.samples += 1
        sample = (delay, offset, t4)
        kept = self._kept
        if kept and math.floor(kept[-1][2] / PERIOD) == math.floor(t4 / PERIOD):
            if sample < kept[-1]:  # the same period: the smaller delay stays
                kept[-1] = sample
        else:
            kept.append(sample)
        while kept[0][2] < t4 - KEEP:
            kept.popleft()

    def __len__(self) -> int:
        """Samples held (at most :data:`MAX_KEPT`)."""
        return len(self._kept)

    @property
    def offset(self) -> float:
        """Best estimate from the samples held; 0.0 before any (same host, or no data)."""
        return min(self._kept)[1] if self._kept else 0.0

    @property
    def rtt(self) -> float | None:
        """Smallest network delay (round trip less the peer's holding time) among the samples held."""
        return min(self._kept)[0] if self._kept else None

    def offset_at(self, local_time: float, span: float = SPAN) -> float:
        """Best estimate from the samples held within ``span`` seconds of ``local_time``.

        A time outside the samples held is taken as the nearest one held (a start reported in a
        result more than :data:`KEEP` later gets the oldest estimate still held); 0.0 before any.
        """
        kept = self._kept
        if not kept:
            return 0.0
        t = min(max(local_time, kept[0][2]), kept[-1][2])
        return min(s for s in kept if abs(s[2] - t) <= span)[1]

    def to_local(self, remote_time: float, low: float = -math.inf, high: float = math.inf) -> float:
        """A time stamped on the peer's clock, on ours (with the estimate for around that time).

        ``low`` and ``high`` bound the offset at that time, from a message that crossed then and
        cannot have arrived before it left: one we sent at ``s`` that the peer received at ``r``
        (its clock) gives offset <= r - s; one the peer sent at ``s`` (its clock) that we
        received at ``r`` gives offset >= s - r. An estimate outside them is wrong by at least its
        distance to the bound, so it is moved to the bound. Bounds that contradict each other (a
        clock that stepped) are not used.
        """
        offset = self.offset_at(remote_time - self.offset)
        if low <= high:
            offset = min(max(offset, low), high)
        return remote_time - offset


class PeriodBest:
    """Thins one peer's exchanges to the smallest-delay one per :data:`PERIOD`, for the journal.

    :meth:`offer` returns the exchange to record, or None. In the peer's first period every
    exchange that beats the ones recorded is recorded at once (an exchange taken while the mapper
    registers everyone may be slow; the peer's first instants are corrected with the best so far);
    then each period's best, once a later period has begun. At most 1 + PERIOD / heartbeat interval
    in the first period, then one per period. The estimator fed with what it returns holds what it
    would hold fed with everything, up to the period not yet over; a replay rebuilds it exactly.
    """

    __slots__ = ("_held", "_delay", "_start")

    def __init__(self) -> None:
        self._held: tuple[float, float, float, float] | None = None
        self._delay = math.inf  # of the exchange held, or in the first period of the best recorded
        self._start: float | None = None  # t4 of the first exchange

    def offer(self, t1: float, t2: float, t3: float, t4: float) -> tuple[float, float, float, float] | None:
        delay = exchange_delay(t1, t2, t3, t4)
        if delay is None:
            return None
        sample = (t1, t2, t3, t4)
        if self._start is None or t4 - self._start < PERIOD:  # the first period: each improvement at once
            if self._start is None:
                self._start = t4
            if delay < self._delay:
                self._delay = delay
                return sample
            return None
        held = self._held
        if held is not None and math.floor(held[3] / PERIOD) != math.floor(t4 / PERIOD):
            self._held, self._delay = sample, delay
            return held
        if held is None or delay < self._delay:
            self._held, self._delay = sample, delay
        return None
