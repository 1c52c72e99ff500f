"""Alternating exponential up and down periods, independent per machine (MGST's FE settings)."""

from __future__ import annotations

from mgst.draws import ExpStream
from mgst.model import FailureModel
from mgst.streams import Purpose, generator


class ExponentialUpDown:
    """Up- and down-period lengths of one machine, from its own seeded stream."""

    def __init__(self, model: FailureModel, seed: int, replication: int, machine: int):
        rng = generator(seed, replication, Purpose.FAILURES, machine)
        self.next_up = ExpStream(rng, model.mean_up, batch=64)
        self.next_down = ExpStream(rng, model.mean_down, batch=64)
