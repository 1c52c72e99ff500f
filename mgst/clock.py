"""Per-puller clock offsets, estimated from heartbeat exchanges (NTP's minimum-delay filter)."""

from __future__ import annotations

import bisect
import math
from collections import deque

# An offset estimate uses the exchanges within this many seconds of the time it corrects:
# wide enough to find a quiet exchange, narrow enough to follow a drifting clock.
SPAN = 30.0


class OffsetEstimator:
    """Estimates ``remote_clock - local_clock`` for one peer.

    A sample has NTP's four timestamps: our heartbeat left at t1 (our clock), the
    peer got it at t2 and sent its own at t3 (its clock), which reached us at t4.
    If both legs take equal time, offset = ((t2 - t1) + (t3 - t4)) / 2, with an
    error of at most half the delay (t4 - t1) - (t3 - t2). As NTP does, the
    estimate is the sample with the smallest delay (queueing only ever adds to
    a delay) among those near the time in question.
    """

    def __init__(self, window: int = 32):
        self._recent: deque[tuple[float, float]] = deque(maxlen=window)  # (delay, offset)
        self._times: list[float] = []  # t4 of every sample, increasing
        self._all: list[tuple[float, float]] = []  # (delay, offset), same order
        self.samples = 0

    def add(self, t1: float, t2: float, t3: float, t4: float) -> None:
        delay = (t4 - t1) - (t3 - t2)
        if delay < 0 or t3 < t2 or t4 < t1 or (self._times and t4 < self._times[-1]):
            return  # not a consistent exchange (or a clock step): ignore
        sample = (delay, ((t2 - t1) + (t3 - t4)) / 2)
        self._recent.append(sample)
        self._times.append(t4)
        self._all.append(sample)
        self.samples += 1

    @property
    def offset(self) -> float:
        """Best estimate from the latest samples; 0.0 before any (same host, or no data)."""
        return min(self._recent)[1] if self._recent else 0.0

    @property
    def rtt(self) -> float | None:
        """Smallest network delay (round trip less the peer's holding time) among the latest samples."""
        return min(self._recent)[0] if self._recent else None

    def offset_at(self, local_time: float, span: float = SPAN) -> float:
        """Best estimate from the samples within ``span`` seconds of ``local_time``."""
        lo = bisect.bisect_left(self._times, local_time - span)
        hi = bisect.bisect_right(self._times, local_time + span)
        if lo < hi:
            return min(self._all[lo:hi])[1]
        return self.offset

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
