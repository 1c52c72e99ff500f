"""Counts the messages a receiver drops, by a fixed set of reasons, and logs them at a bounded rate."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable

from mgst.wire.protocol import Drop

_REASONS = frozenset(v for k, v in vars(Drop).items() if k.isupper())


class _Budget:
    """A token bucket of log lines: ``burst`` at once, then one per ``period`` seconds; the lines it refused."""

    __slots__ = ("tokens", "last", "suppressed")

    def __init__(self, burst: int, now: float):
        self.tokens = float(burst)
        self.last = now
        self.suppressed = 0


class DropLog:
    """Drop counters keyed by :class:`mgst.wire.protocol.Drop` reasons only, and a rate-limited log.

    A peer chooses the bytes it sends, never the counters' keys: an unknown
    reason is a bug and raises. The offending values go to the log, at most
    ``burst`` lines at once and then one per ``period`` seconds, each saying how
    many drops it did not log. Drops logged below WARNING (what is not hostile) have a budget of their own: a
    flood of them cannot keep a warning out of the log.
    """

    def __init__(self, logger: logging.Logger, *, burst: int = 10, period: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.counts: Counter[str] = Counter()
        self._log = logger
        self._burst = burst
        self._period = period
        self._clock = clock
        now = clock()
        self._loud = _Budget(burst, now)  # WARNING and above
        self._quiet = _Budget(burst, now)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def drop(self, reason: str, sender: str, detail: str = "", level: int = logging.WARNING) -> None:
        if reason not in _REASONS:
            raise ValueError(f"not a drop reason: {reason!r}")
        self.counts[reason] += 1
        now = self._clock()
        budget = self._loud if level >= logging.WARNING else self._quiet
        budget.tokens = min(float(self._burst), budget.tokens + (now - budget.last) / self._period)
        budget.last = now
        if budget.tokens < 1.0:
            budget.suppressed += 1
            return
        budget.tokens -= 1.0
        more = f" ({budget.suppressed} more dropped since the last line)" if budget.suppressed else ""
        budget.suppressed = 0
        self._log.log(level, "dropped a message from %s: %s%s%s", sender, reason,
                      f" ({detail[:200]})" if detail else "", more)
