"""Test doubles for tightly-coupled iterations: scripted availability and a spread-over-UP policy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from mgst.availability.process import Period
from mgst.model import Availability


class Script:
    """A worker's availability from a script of (state, slots) periods; the last lasts for ever."""

    def __init__(self, periods: Sequence[tuple[int, float]] = ()):
        self.periods = list(periods) or [(0, math.inf)]
        self.i = 0

    def next(self) -> Period:
        state, length = self.periods[self.i] if self.i < len(self.periods) else (self.periods[-1][0], math.inf)
        if self.i == len(self.periods) - 1:
            length = math.inf
        self.i += 1
        return Period(length, Availability(state), 1.0)


class Spread:
    """Passive: tasks dealt one by one over the UP workers in index order (the first ``width`` of them)."""

    def __init__(self, width: int = 99):
        self.width = width

    def choose(self, app, now: float) -> Mapping[int, int]:
        up = app.up()[: self.width]
        config: dict[int, int] = {}
        for i in range(app.tasks):
            q = up[i % len(up)]
            config[q] = config.get(q, 0) + 1
        return config

    def reconsider(self, app, now: float) -> None:
        return None
