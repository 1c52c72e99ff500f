"""Exponential draws from a numpy generator, buffered: one numpy call per batch, a list pop per draw.

Compiled with mypyc in the compiled build (mgst.build_info): the workloads draw twice per job.
"""

from __future__ import annotations

from typing import Any


class ExpStream:
    """Exponential draws with a given mean, generated in batches (one numpy call per 1024)."""

    __slots__ = ("_rng", "_mean", "_buf", "_batch")

    def __init__(self, rng: Any, mean: float, batch: int = 1024):  # rng: a numpy Generator
        self._rng = rng
        self._mean = mean
        self._batch = batch
        self._buf: list[float] = []

    def draw(self) -> float:
        """The next draw (compiled callers call this: a native call, where ``stream()`` is not)."""
        buf = self._buf
        if not buf:
            buf.extend(self._rng.exponential(self._mean, self._batch)[::-1].tolist())
        return buf.pop()

    def __call__(self) -> float:
        return self.draw()
