"""The availability process of one machine: its periods UP, RECLAIMED or DOWN, in order, from t = 0."""

from __future__ import annotations

import enum
from typing import NamedTuple, Protocol


class State(enum.IntEnum):
    """What the machine does during a period.

    UP: it computes at the period's ``cpu_share``. RECLAIMED: the owner took the CPU back;
    running work is kept, and computes at ``cpu_share`` (0: suspended). DOWN: the machine is
    gone, and so is its work (``cpu_share`` 0).
    """

    UP = 0
    RECLAIMED = 1
    DOWN = 2


class Period(NamedTuple):
    """One period of a machine: ``duration`` model time units in ``state`` at ``cpu_share`` (in [0, 1])."""

    duration: float
    state: State
    cpu_share: float


class AvailabilityProcess(Protocol):
    """A machine's availability: its periods in order, the first starting at t = 0.

    ``next()`` may return infinite durations (the machine stays in that state for good).
    """

    def next(self) -> Period: ...


__all__ = ["AvailabilityProcess", "Period", "State"]
