"""A grid's size over time under GridBot's overlay (opt-in per grid): its parameters, and the periods of its hosts.

With ``start_hosts`` in a grid's table, the grid is no longer a fixed set of hosts: it starts with its first
``start_hosts`` machines, and the overlay (the simulator's, mgst.sim.overlay) asks it for one more host every
``request_every`` while work it may take is queued, up to ``max_hosts`` granted at once; a granted host arrives after
the grid's queue wait (``join``, exponential), and leaves once its client has held no job for ``idle_leave``. A host
not granted, or gone, is DOWN: its machine is declared in the experiment up front, and the availability layer turns
it on and off (docs/models.md, "A grid's size over time").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from mgst.availability.process import Period, State
from mgst.streams import Purpose, python_random

# The keys of a grid's table that drive its size; start_hosts opts in, the others need it.
SIZE_KEYS: Final = ("start_hosts", "max_hosts", "request_every", "idle_leave")
# Their defaults (model time units are seconds in GridBot's experiments); docs/models.md says why.
DEFAULT_REQUEST_EVERY: Final = 60.0  # one client submitted per grid per minute while work is queued
DEFAULT_IDLE_LEAVE: Final = 600.0  # a client that got no job for ten minutes commits suicide


@dataclass(frozen=True, slots=True)
class GridSize:
    """How the overlay sizes one grid: hosts at the start, at most granted at once (None: every machine of the grid),
    the time between two requests for a host while work is queued, and the idle time after which a host leaves."""

    start_hosts: int
    max_hosts: int | None
    request_every: float
    idle_leave: float

    def to_plain(self) -> list[Any]:
        return [self.start_hosts, self.max_hosts, self.request_every, self.idle_leave]

    @classmethod
    def from_plain(cls, plain: Any) -> GridSize | None:
        if plain is None:
            return None
        start, most, every, idle = plain
        return cls(start, most, every, idle)


@dataclass(frozen=True, slots=True)
class OverlayGrid:
    """What the simulator's overlay needs of one grid whose size it drives: its name, its machines (indices, in
    order: the first ``start_hosts`` are there at the start; a request grants one of those neither up nor granted,
    drawn from the grid's stream), its size parameters and its queue wait (the mean of a granted host's arrival
    delay, exponential; 0: at once)."""

    index: int
    name: str
    machines: tuple[int, ...]
    size: GridSize
    join: float

    @property
    def max_hosts(self) -> int:
        return len(self.machines) if self.size.max_hosts is None else self.size.max_hosts


class SizeError(ValueError):
    """A grid's size that does not fit its machines (``key``: the experiment file's key to blame)."""

    def __init__(self, key: str, problem: str):
        super().__init__(problem)
        self.key = key


def check_size(size: GridSize, key: str, name: str, machines: int) -> None:
    """SizeError if the grid has fewer machines than its size asks for (checked once the machines are known)."""
    if size.start_hosts > machines:
        raise SizeError(f"{key}.start_hosts", f"grid {name!r} has {machines} machines, fewer than its start_hosts "
                                              f"({size.start_hosts}): declare every host it may have in [machines]")
    if size.max_hosts is not None and size.max_hosts > machines:
        raise SizeError(f"{key}.max_hosts", f"grid {name!r} has {machines} machines, fewer than its max_hosts "
                                            f"({size.max_hosts}): declare every host it may have in [machines]")


def overlay_stream(seed: int, replication: int, grid: int) -> Any:
    """The stream a grid's granted hosts' arrival delays are drawn from (one per grid)."""
    return python_random(seed, replication, Purpose.OVERLAY, grid)


class OverlayHostProcess:
    """One host of a grid whose size the overlay drives: UP for an up period of its law (``mean_up``, exponential;
    preempted or failed at its end), then DOWN for good until the overlay grants it again (the simulator then ends the
    DOWN period itself); it starts UP if it is one of the grid's ``start_hosts``, else DOWN (not granted yet)."""

    __slots__ = ("_rng", "_mean_up", "_share", "_up_next")

    def __init__(self, rng: Any, mean_up: float, share: float, starts_up: bool):
        self._rng = rng
        self._mean_up = mean_up
        self._share = share
        self._up_next = starts_up

    def next(self) -> Period:
        if not self._up_next:
            self._up_next = True
            return Period(math.inf, State.DOWN, 0.0)
        self._up_next = False
        mean = self._mean_up
        up = math.inf if math.isinf(mean) else max(self._rng.expovariate(1.0 / mean), 1e-9)
        return Period(up, State.UP, self._share)


__all__ = ["SIZE_KEYS", "GridSize", "OverlayGrid", "OverlayHostProcess", "SizeError", "check_size", "overlay_stream"]
