"""Rate-limited log lines: a burst, then at most one per interval, the next line saying how many were suppressed."""

from __future__ import annotations

import logging
import time
from typing import Any


class Throttled:
    """Logs up to ``burst`` lines at once, then one per ``interval`` seconds (a token bucket); the next line logged
    says how many were suppressed."""

    def __init__(self, interval: float, logger: logging.Logger, burst: int = 1):
        self.interval = interval
        self.logger = logger
        self.burst = burst
        self.tokens = float(burst)
        self.last: float | None = None
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: Any, exc_info: bool = False) -> None:
        now = time.monotonic()
        if self.last is not None:
            self.tokens = min(float(self.burst), self.tokens + (now - self.last) / self.interval)
        self.last = now
        if self.tokens < 1.0:
            self.suppressed += 1
            return
        self.tokens -= 1.0
        if self.suppressed:
            msg += " (%d more like this suppressed)"
            args += (self.suppressed,)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        self.suppressed = 0
