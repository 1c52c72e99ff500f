"""The puller's clock: wall time that never steps back or jumps (the wall clock read once, then carried forward by the
kernel's boot-time clock, which counts a suspend but no NTP step)."""

from __future__ import annotations

import time
from collections.abc import Callable


def steady_wall_clock() -> Callable[[], float]:
    """A clock in wall-clock seconds since the epoch, as ``time.time`` reads at the call, that then advances with the
    boot-time clock (monotonic, suspends counted: a suspended laptop is seen as its own pause) and not with steps of
    the wall clock: a clock set back 5 s (an NTP step at boot) silenced a puller's heartbeats until the wall clock
    caught up, and the mapper took it for a failure. The mapper estimates each puller's offset from its stamps, so a
    clock that drifts from the system's after a step reads as an offset, steady, not as a jump."""
    ticks = getattr(time, "CLOCK_BOOTTIME", None)
    if ticks is None:  # (not Linux: the monotonic clock, which may not count a suspend)
        now = time.monotonic
    else:
        def now() -> float:
            return time.clock_gettime(ticks)
    base = time.time() - now()
    return lambda: base + now()
