"""The availability process of one machine: its periods UP, RECLAIMED or DOWN, in order, from t = 0."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from mgst.model import Availability

# What the machine does during a period: UP, RECLAIMED or DOWN (mgst.model.Availability, which the core reads too).
State = Availability


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
