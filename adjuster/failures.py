"""Failure injection: when a machine goes down and comes back, in wall time, from the simulator's streams."""

from __future__ import annotations

import math

from mgst.availability.exponential import ExponentialUpDown
from mgst.model import FailureModel


class FailureSchedule:
    """Alternating up and down periods for one machine.

    The periods are those the simulator draws for machine ``machine`` of replication 0
    with the same seed (exponential, in model time), scaled to wall seconds by
    ``time_unit``: a testbed run and its simulation fail the same machines at the
    same model times.
    """

    def __init__(self, mean_up: float, mean_down: float, seed: int, machine: int, time_unit: float, now: float):
        self._periods = ExponentialUpDown(FailureModel(mean_up, mean_down), seed, 0, machine)
        self.time_unit = time_unit
        self.down_at = now + self._periods.next_up() * time_unit
        self.up_at = math.inf

    def go_down(self, now: float) -> float:
        """The machine fails now; returns when it comes back."""
        self.up_at = now + self._periods.next_down() * self.time_unit
        self.down_at = math.inf
        return self.up_at

    def come_back(self, now: float) -> None:
        self.down_at = now + self._periods.next_up() * self.time_unit
        self.up_at = math.inf
