"""Rate-limited log lines: at most one per interval, the next one saying how many were suppressed."""

from __future__ import annotations

import logging
import math
import time
from typing import Any


class Throttled:
    """Logs at most one line per ``interval`` seconds; the next line says how many were suppressed."""

    def __init__(self, interval: float, logger: logging.Logger):
        self.interval = interval
        self.logger = logger
        self.next_at = -math.inf
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: Any) -> None:
        now = time.monotonic()
        if now < self.next_at:
            self.suppressed += 1
            return
        if self.suppressed:
            msg += " (%d more like this suppressed)"
            args += (self.suppressed,)
        self.logger.log(level, msg, *args)
        self.suppressed = 0
        self.next_at = now + self.interval
