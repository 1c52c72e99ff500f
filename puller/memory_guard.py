"""A bound on the memory a mapper can make a puller hold with a message it never ends.

ZeroMQ hands a message over whole, so it holds every frame of one until its last arrives: ``MAXMSGSIZE`` bounds
each frame (the puller sets it) and the high-water mark counts whole messages, but nothing bounds the frames of
one message still coming. A mapper (or whoever holds its key, or anyone with ``--insecure``) that sends frames
flagged "more" without end grows the puller until the machine runs out of memory, and ``recv`` never sees any of
it. The guard looks at the process's resident memory every ``every`` seconds: grown by more than ``limit`` bytes
since the connection was made, the puller drops the connection (ZeroMQ frees what it held) and connects again.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from typing import Final

import psutil

# Growth of the resident memory over the connection's start that drops it. A legitimate mapper's messages are single
# frames of at most 64 KiB (MAX_FRAME), held at most a thousand at once (the high-water mark): 64 MiB; a puller
# itself holds about 56 MiB. Four times that is never reached by a run, and bounds an attack to it (plus what
# arrives between two looks: at 1 Gbit/s, 30 MB).
RECEIVE_MEMORY_LIMIT: Final = 256 * 2**20
CHECK_EVERY: Final = 0.25  # seconds between two looks at the resident memory (a psutil call: some 20 us)


def resident_bytes() -> int:
    """This process's resident memory, in bytes."""
    return int(psutil.Process().memory_info().rss)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once in the process's own symbols (no library search, no child process);
    None where there is none (another C library)."""
    try:
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


def _give_back() -> None:
    """Ask glibc's malloc to return freed memory to the system (ZeroMQ's frames are small blocks of its heap); a
    no-op elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


class MemoryGuard:
    """Whether the memory grown since :meth:`reset` (a new connection) is over ``limit`` bytes, looked at most every
    ``every`` seconds of the puller's clock."""

    def __init__(self, limit: int = RECEIVE_MEMORY_LIMIT, every: float = CHECK_EVERY,
                 measure: Callable[[], int] = resident_bytes):
        if not limit > 0 or not every > 0:
            raise ValueError(f"the memory guard needs a positive limit and period, not {limit!r}, {every!r}")
        self.limit = limit
        self.every = every
        self._measure = measure
        self.baseline: int | None = None
        self.next_check = 0.0
        self.trips = 0  # connections dropped for what they held

    def reset(self, now: float) -> None:
        """A new connection: the baseline is taken at the next look (ZeroMQ frees what the last one held in its own
        thread, after the socket is closed), once freed memory is given back."""
        self.baseline = None
        self.next_check = now + self.every

    def grown_over(self, now: float) -> int | None:
        """The bytes grown since the baseline if over the limit (the connection must go), else None; looks only
        when a look is due."""
        if now < self.next_check:
            return None
        self.next_check = now + self.every
        if self.baseline is None:
            _give_back()
            self.baseline = self._measure()
            return None
        grown = self._measure() - self.baseline
        if grown > self.limit:
            self.trips += 1
            return grown
        return None


__all__ = ["CHECK_EVERY", "RECEIVE_MEMORY_LIMIT", "MemoryGuard", "resident_bytes"]
