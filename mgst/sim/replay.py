"""Availability realisations drawn once and replayed: runs that must see the same periods share one draw.

Casanova et al.'s experiment runs its 17 heuristics on one realisation of each worker's chain (common random
numbers); each run used to draw the same periods again from the same stream. A :class:`Recording` draws a
machine's periods from its process on demand, once, and each :meth:`Recording.replay` hands them out from the
first, as the process would have: a run sees exactly the periods it would have drawn itself.
"""

from __future__ import annotations

from mgst.availability.process import AvailabilityProcess, Period


class Recording:
    """One machine's periods, drawn from ``source`` as far as any replay has asked."""

    __slots__ = ("source", "periods")

    def __init__(self, source: AvailabilityProcess):
        self.source = source
        self.periods: list[Period] = []

    def replay(self) -> Replay:
        """A process giving this machine's periods from the first."""
        return Replay(self)


class Replay:
    """An :class:`~mgst.availability.process.AvailabilityProcess` reading a :class:`Recording` from its start."""

    __slots__ = ("_recording", "_next")

    def __init__(self, recording: Recording):
        self._recording = recording
        self._next = 0

    def next(self) -> Period:
        periods = self._recording.periods
        if self._next == len(periods):
            periods.append(self._recording.source.next())
        period = periods[self._next]
        self._next += 1
        return period


__all__ = ["Recording", "Replay"]
