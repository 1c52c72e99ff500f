"""Bag-of-Tasks workloads: a Poisson stream of bags (Anglano & Canonico, section IV-B) and an explicit list."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from itertools import repeat

import numpy as np

from mgst.draws import ExpStream
from mgst.model import Bag, BagList, BagStream, Job
from mgst.streams import Purpose, generator


def normalised_mix(mix: Sequence[float]) -> np.ndarray:
    """``mix`` as fractions summing to 1 (Table III's rows sum to 98.9 %; percentages work too)."""
    p = np.asarray(mix, dtype=float)
    if p.ndim != 1 or p.size == 0 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"mix must be non-negative numbers with a positive sum, got {list(mix)!r}")
    return p / p.sum()


def mean_task_size(mix: Sequence[float], granularity: Sequence[float]) -> float:
    """E[task size] = sum_i p_i X_i (the uniform law around X_i is symmetric)."""
    return float(normalised_mix(mix) @ np.asarray(granularity, dtype=float))


def make_tasks(first: int, classes: Sequence[int], t: float, sizes: Sequence[float], bag: int) -> tuple[Job, ...]:
    """The tasks of a bag as Jobs with ids first, first + 1, ... (3x faster than calling Job per task:
    tuple.__new__ skips the NamedTuple's Python-level __new__; the fields are plain ints and floats)."""
    n = len(sizes)
    new = tuple.__new__
    return tuple([new(Job, f) for f in zip(range(first, first + n), classes, repeat(t, n), sizes, repeat(bag, n))])


def bag_attributes(sizes: Sequence[float] | np.ndarray) -> tuple[tuple[str, object], ...]:
    return (("application_size", float(np.sum(sizes))), ("tasks", len(sizes)))


class _Uniforms:
    """One named stream of U[0, 1) draws, read in order; ``view`` looks ahead without consuming.

    The draws come in fixed-size numpy batches, so the sequence a seed gives does not
    depend on how callers cut it.
    """

    __slots__ = ("_rng", "_batch", "_buf", "_pos")

    def __init__(self, rng: np.random.Generator, batch: int):
        self._rng = rng
        self._batch = batch
        self._buf = np.empty(0)
        self._pos = 0

    def view(self, n: int) -> np.ndarray:
        left = self._buf.size - self._pos
        if left < n:
            batches = -(-(n - left) // self._batch)  # whole batches only: the sequence is fixed
            self._buf = np.concatenate((self._buf[self._pos:], self._rng.random(batches * self._batch)))
            self._pos = 0
        return self._buf[self._pos:self._pos + n]

    def skip(self, n: int) -> None:
        self._pos += n


class BagStreamWorkload:
    """Bags arriving as a Poisson stream; each bag draws tasks until its work reaches the application size.

    Bag inter-arrival times are Exp(1 / bag_rate) (stream BAG_ARRIVALS). Tasks form one
    infinite i.i.d. sequence that bags cut in turn: task k's class comes from the k-th draw
    of TASK_CLASSES (inverse CDF of the normalised mix) and its size from the k-th draw u
    of TASK_SIZES, X_c (1 - spread + 2 spread u), i.e. U[X_c (1 - spread), X_c (1 + spread)].
    A bag takes tasks until their total work is >= application_size: the last task
    overshoots by less than one task (the paper's "until the sum matches AS"). Changing
    the mix leaves the arrival times and the size draws unchanged; nothing depends on the
    policy.
    """

    def __init__(
        self, spec: BagStream, granularity: Sequence[float], seed: int, replication: int = 0, start: float = 0.0
    ):
        if not spec.bag_rate > 0 or not math.isfinite(spec.bag_rate):
            raise ValueError(f"bag_rate must be positive, got {spec.bag_rate!r}")
        if not spec.application_size > 0 or not math.isfinite(spec.application_size):
            raise ValueError(f"application_size must be positive, got {spec.application_size!r}")
        if not 0 <= spec.spread < 1:
            raise ValueError(f"spread must be in [0, 1), got {spec.spread!r}")
        p = normalised_mix(spec.mix)
        x = np.asarray(granularity, dtype=float)
        if x.shape != p.shape or not np.all(x > 0):
            raise ValueError(f"need one positive granularity per class of the mix, got {list(granularity)!r}")
        self._spec = spec
        self._cum = np.cumsum(p)
        self._cum[np.flatnonzero(p > 0)[-1]:] = 1.0  # u < 1 never falls in a class of weight 0 (rounding)
        self._x = x
        expected = spec.application_size / float(p @ x)
        # Look ahead about one bag (plus 4 sd) at a time; more is wasted work, less a second pass.
        self._chunk = int(min(expected + 4.0 * math.sqrt(expected) + 16.0, 1 << 20))
        batch = max(4096, self._chunk)
        self._classes = _Uniforms(generator(seed, replication, Purpose.TASK_CLASSES, 0), batch)
        self._sizes = _Uniforms(generator(seed, replication, Purpose.TASK_SIZES, 0), batch)
        self._gap = ExpStream(generator(seed, replication, Purpose.BAG_ARRIVALS, 0), 1.0 / spec.bag_rate)
        self._next_time = start + self._gap()
        self._bag_id = 0
        self._job_id = 0

    def peek_time(self) -> float:
        """When the next bag arrives (inf after max_bags bags)."""
        if self._spec.max_bags is not None and self._bag_id >= self._spec.max_bags:
            return math.inf
        return self._next_time

    def _draw_tasks(self) -> tuple[np.ndarray, np.ndarray]:
        spread = self._spec.spread
        need = self._spec.application_size
        classes: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        while True:
            n = self._chunk
            cls = np.searchsorted(self._cum, self._classes.view(n), side="right")
            x = self._x[cls]
            size = x * (1.0 - spread) + (2.0 * spread) * x * self._sizes.view(n)
            total = np.cumsum(size)
            k = int(np.searchsorted(total, need, side="left"))  # first task whose running total reaches need
            take = min(k + 1, n)
            self._classes.skip(take)
            self._sizes.skip(take)
            classes.append(cls[:take])
            sizes.append(size[:take])
            if k < n:
                return np.concatenate(classes), np.concatenate(sizes)
            need -= float(total[-1])

    def next(self) -> Bag:
        t = self.peek_time()
        if t == math.inf:
            raise StopIteration("the bag stream is exhausted (max_bags)")
        cls, size = self._draw_tasks()
        bag_id, first = self._bag_id, self._job_id
        tasks = make_tasks(first, cls.tolist(), t, size.tolist(), bag_id)
        self._bag_id += 1
        self._job_id += len(tasks)
        self._next_time = t + self._gap()
        return Bag(bag_id, t, tasks, bag_attributes(size))

    def __iter__(self) -> Iterator[Bag]:
        while self.peek_time() < math.inf:
            yield self.next()


class BagListWorkload:
    """The bags of a BagList, in time order (a stable sort: equal times keep the listed order).

    Bag ids count from 0 in that order, job ids over all tasks; times are shifted by ``start``.
    """

    def __init__(self, spec: BagList, start: float = 0.0):
        extra = spec.attributes or ((),) * len(spec.bags)  # the file's attributes of each bag, in the file's order
        self._bags = sorted(((at, tasks, more) for (at, tasks), more in zip(spec.bags, extra)), key=lambda b: b[0])
        self._start = start
        self._index = 0
        self._job_id = 0

    def peek_time(self) -> float:
        if self._index >= len(self._bags):
            return math.inf
        return self._start + self._bags[self._index][0]

    def next(self) -> Bag:
        if self._index >= len(self._bags):
            raise StopIteration("the bag list is exhausted")
        at, listed, more = self._bags[self._index]
        t = self._start + at
        tasks = make_tasks(self._job_id, [c for c, _ in listed], t, [float(s) for _, s in listed], self._index)
        bag = Bag(self._index, t, tasks, bag_attributes([s for _, s in listed]) + more)
        self._index += 1
        self._job_id += len(tasks)
        return bag

    def __iter__(self) -> Iterator[Bag]:
        while self.peek_time() < math.inf:
            yield self.next()
