"""How long a replica stages (fetches its checkpoint, downloads program and data) before it computes."""

from __future__ import annotations

import numpy as np

from mgst.model import StagingModel
from mgst.streams import Purpose, generator


class _UniformStream:
    __slots__ = ("_rng", "_low", "_high", "_buf")

    def __init__(self, rng: np.random.Generator, low: float, high: float):
        self._rng, self._low, self._high = rng, low, high
        self._buf: list[float] = []

    def __call__(self) -> float:
        if not self._buf:
            self._buf.extend(self._rng.uniform(self._low, self._high, 256)[::-1].tolist())
        return self._buf.pop()


class StagingSampler:
    """Staging durations of one replication (model time).

    ``duration(resume)`` is U[a, b] of the model's ``resume`` range when the replica resumes
    from a checkpoint (it fetches the checkpoint first: Anglano & Canonico's U[240, 720] s), plus
    U[a, b] of the ``start`` range for every replica; 0 when nothing stages. The two ranges
    draw from their own streams (STAGING, index 0 and 1), in the order replicas start.
    """

    def __init__(self, model: StagingModel | None, seed: int, replication: int = 0):
        self._resume = self._start = None
        for index, bounds in enumerate((None, None) if model is None else (model.resume, model.start)):
            if bounds is None:
                continue
            low, high = float(bounds[0]), float(bounds[1])
            if not 0 <= low <= high:
                raise ValueError(f"a staging range needs 0 <= a <= b, got {bounds!r}")
            stream = _UniformStream(generator(seed, replication, Purpose.STAGING, index), low, high)
            if index == 0:
                self._resume = stream
            else:
                self._start = stream

    @property
    def stages(self) -> bool:
        """Whether any replica ever stages."""
        return self._resume is not None or self._start is not None

    def duration(self, resume: bool) -> float:
        d = 0.0
        if resume and self._resume is not None:
            d += self._resume()
        if self._start is not None:
            d += self._start()
        return d
