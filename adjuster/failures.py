"""Availability injection: a machine's periods UP, RECLAIMED and DOWN in wall time, from the simulator's process."""

from __future__ import annotations

import math
from typing import Any

from mgst.availability import registry as availability
from mgst.availability.process import Period

# The shortest period a puller plays, in wall seconds; a shorter draw lasts this long instead.
# Going down and coming back is a new socket, a CURVE handshake, a hello and a welcome: about 1 ms on
# loopback (measured, median; 2.4 ms the worst of 200), a few ms on a LAN. A period shorter than that round
# cannot be played (the machine would be back before the mapper could hear it), and a law drawing periods of
# microseconds made the puller cycle ~700 times a second until ZeroMQ ran out of sockets. At 10 ms a puller
# cycles at most 50 times a second (measured: no socket or descriptor left over). The simulation beside a run
# draws the unclamped law, so the two differ only for laws whose periods, times the time unit, can be this short.
MIN_PERIOD = 0.01
# The most periods a schedule passes over to start at a model time past the law's start (a resumed run re-basing
# its pullers): at most 0.6 s of draws on this machine (markov3's, the dearest, 3 us a period; exponential 0.9 us).
# A mapper asking for more is refused, the schedule kept.
MAX_SKIPPED_PERIODS = 200_000


class AvailabilitySchedule:
    """One machine's availability periods in wall time, the first starting at ``now``.

    The periods are those the simulator plays for machine ``machine`` of replication 0 of the
    same seed and law (``mgst.availability``: ``failures`` is the wire form the mapper sent),
    scaled to wall seconds by ``time_unit``: a testbed run and its simulation fail, reclaim and
    slow the same machines at the same model times. ``share`` is the welcome's a_j (a law's UP
    share). ``at``: the model time ``now`` is in the law (0: its start); the period under way then
    is played for what is left of it. A period shorter than MIN_PERIOD wall seconds lasts MIN_PERIOD.
    ValueError, naming what is wrong, for a law that cannot be played (or more than
    MAX_SKIPPED_PERIODS periods before ``at``).
    """

    def __init__(self, failures: Any, machine: int, time_unit: float, now: float, share: float,
                 at: float = 0.0):
        if not (isinstance(time_unit, int | float) and math.isfinite(time_unit) and time_unit > 0):
            raise ValueError(f"time_unit must be a positive number of seconds, not {time_unit!r}")
        if not (isinstance(at, int | float) and math.isfinite(at) and at >= 0):
            raise ValueError(f"the model time to start at must be a finite number >= 0, not {at!r}")
        self.failures = tuple(failures) if isinstance(failures, list | tuple) else failures
        self._process = availability.process_from_wire(failures, machine, share)
        self.time_unit = time_unit
        self.period: Period = self._process.next()  # the current one
        end = self.period.duration  # model time the current period ends at, in the law
        if at > 0:
            for _ in range(MAX_SKIPPED_PERIODS):
                if end > at:
                    break
                self.period = self._process.next()
                end += self.period.duration
            else:
                raise ValueError(f"more than {MAX_SKIPPED_PERIODS:,} periods of the law before model time {at:.6g}")
        self.ends_at = now + self._wall(end - at)
        # Where it is in the law's model time: ``_anchor`` at wall time ``_anchor_wall``, to ``_end`` (model_time)
        self._anchor, self._anchor_wall, self._end = at, now, end

    def _wall(self, duration: float) -> float:
        """A period's length (model time) in wall seconds, at least MIN_PERIOD (inf stays inf)."""
        return max(MIN_PERIOD, duration * self.time_unit)

    def advance(self, now: float) -> Period:
        """The current period ended at ``now``: the next one, which begins now (its end is ``ends_at``)."""
        self.period = self._process.next()
        self.ends_at = now + self._wall(self.period.duration)
        self._anchor, self._anchor_wall = self._end, now
        self._end += self.period.duration
        return self.period

    def model_time(self, now: float) -> float:
        """The model time of the law it plays at wall time ``now`` (within the current period: a period lengthened
        to MIN_PERIOD, or a late timer, holds it at the period's end)."""
        return min(self._end, self._anchor + max(0.0, now - self._anchor_wall) / self.time_unit)


class SlotSchedule:
    """A per-slot chain's periods on wall time with no drift: period ends at ``start + slots * time_unit``.

    For a gang run (tightly-coupled iterations, mgst.wire.gang_protocol): availability changes only at slot
    boundaries, and each boundary is placed from the run's start, not from when the previous change was played,
    so that a late loop never shifts the chain. ``failures`` is the markov3 wire form; its process is the one the
    simulation beside the run plays for machine ``machine`` (replication 0 of the form's seed). ``slot`` counts
    the slots since the start at the current period's beginning.
    """

    def __init__(self, failures: Any, machine: int, time_unit: float, start: float):
        if not (isinstance(time_unit, int | float) and math.isfinite(time_unit) and time_unit >= MIN_PERIOD):
            raise ValueError(f"time_unit must be at least {MIN_PERIOD} s, not {time_unit!r}")
        self._process = availability.process_from_wire(failures, machine, 1.0)
        self.time_unit = time_unit
        self.start = start
        self.slot = 0.0
        self.period: Period = self._process.next()
        self.ends_at = start + self.period.duration * time_unit

    def advance(self) -> Period:
        """The current period ended (at ``ends_at``): the next one, which begins there."""
        self.slot += self.period.duration
        self.period = self._process.next()
        self.ends_at = self.start + (self.slot + self.period.duration) * self.time_unit
        return self.period


__all__ = ["MIN_PERIOD", "AvailabilitySchedule", "SlotSchedule"]
