"""Counts the messages a receiver drops, by a fixed set of reasons, and logs them at a bounded rate."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from mgst.wire.protocol import Drop

_REASONS = frozenset(v for k, v in vars(Drop).items() if k.isupper())


class DropLog:
    """Drop counters keyed by :class:`mgst.wire.protocol.Drop` reasons only, and a rate-limited log.

    A peer chooses the bytes it sends, never the counters' keys: an unknown
    reason is a bug and raises. The offending values go to the log, at most
    ``burst`` lines at once and then one per ``period`` seconds, each saying how
    many drops it did not log.
    """

    def __init__(self, logger: logging.Logger, *, burst: int = 10, period: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.counts: Counter[str] = Counter()
        self._log = logger
        self._burst = burst
        self._period = period
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._suppressed = 0

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def drop(self, reason: str, sender: str, detail: str = "", level: int = logging.WARNING) -> None:
        if reason not in _REASONS:
            raise ValueError(f"not a drop reason: {reason!r}")
        self.counts[reason] += 1
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._last) / self._period)
        self._last = now
        if self._tokens < 1.0:
            self._suppressed += 1
            return
        self._tokens -= 1.0
        more = f" ({self._suppressed} more dropped since the last line)" if self._suppressed else ""
        self._suppressed = 0
        self._log.log(level, "dropped a message from %s: %s%s%s", sender, reason,
                      f" ({detail[:200]})" if detail else "", more)
