"""GridBot's overlay constructor in the simulator: it grows a grid while work it may take is queued, and lets a host
whose client finds no work leave (the grids whose table gives ``start_hosts``: mgst.availability.grid_size).

The driver side of the simulation, beside the core: it reads the core's :class:`View` (the queue, the hosts' jobs) and
turns hosts on and off through their availability (a host not granted, or gone, is DOWN), which the event loop carries
out (mgst.sim.loop). The core learns nothing of grids: it sees machines come up and go down, as with any availability.
Which grids a bag's queued jobs may use is the policy's to say (``takes_grid``, GridBot's ``GridPolicy``); a policy
without it lets every bag use every grid.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from mgst.availability.grid_size import OverlayGrid, overlay_stream
from mgst.core.state import BagRecord
from mgst.core.view import View

# A policy's answer to "may this bag's queued jobs run in this grid?" (its view, the bag, the grid's name).
TakesGrid = Callable[[View, BagRecord, str], bool]
# A policy's count of a bag's jobs it holds queued beside the core's (its view, the bag): GridBot's enqueued replicas.
HeldJobs = Callable[[View, BagRecord], int]


class GridSample(NamedTuple):
    """One grid's size when the overlay looked at it: hosts up, hosts granted and not arrived yet, and whether work
    it may take was queued."""

    time: float
    grid: str
    up: int
    granted: int
    demand: bool


class Overlay:
    """The overlay of one replication: every ``request_every`` of a grid (:meth:`cycle`), one host asked for if work
    it may take is queued and it holds fewer than ``max_hosts`` (up or granted); a granted host arrives after an
    exponential delay of mean ``join`` drawn from the grid's own stream. :meth:`watch`, after every event, notes the
    hosts that hold no job and gives each a leave time ``idle_leave`` later, which :meth:`leave_due` confirms.

    ``samples`` keeps each grid's size at each of its cycles (what a run reports of its grids' sizes over time).
    """

    def __init__(self, grids: Sequence[OverlayGrid], n_machines: int, seed: int, replication: int,
                 takes_grid: TakesGrid | None, held_jobs: HeldJobs | None = None):
        self.grids = tuple(grids)
        self.takes_grid = takes_grid
        self.held_jobs = held_jobs
        self.rngs = [overlay_stream(seed, replication, g.index) for g in self.grids]
        self.grid_of: list[int] = [-1] * n_machines  # position in self.grids of the machine's grid (-1: not sized)
        for i, g in enumerate(self.grids):
            for j in g.machines:
                self.grid_of[j] = i
        # The sized hosts that may be up (all at the start; a host found down leaves it, one that arrives joins it):
        # what watch looks at after each event. A dict: its order, and so the leave events' seqs, is the run's own.
        self.watching: dict[int, None] = dict.fromkeys(j for g in self.grids for j in g.machines)
        self.granted = [False] * n_machines  # asked for, not arrived yet
        self.idle_token: list[int] = [-1] * n_machines  # the seq of the host's pending leave event (-1: none)
        self.samples: list[GridSample] = []
        self.requests = [0] * len(self.grids)  # hosts asked for, per grid
        self.leaves = [0] * len(self.grids)  # hosts that left idle, per grid

    # ---------------------------------------------------------------- growth

    def demand(self, view: View, grid: OverlayGrid) -> bool:
        """Whether work the grid may take is queued: a queued job of no bag, or of a bag the policy lets use it (its
        waiting tasks, and the jobs the policy holds queued beside them: ``held_jobs``)."""
        in_bags = 0
        takes = self.takes_grid
        held = self.held_jobs
        for bag in view.bags.values():
            if bag.queued > 0 or (held is not None and held(view, bag) > 0):
                if takes is None or takes(view, bag, grid.name):
                    return True
                in_bags += bag.queued
        return view.queued_count > in_bags

    def cycle(self, t: float, position: int, view: View, up: Sequence[bool]) -> int:
        """Grid ``position``'s turn at ``t``: the machine it is asked to grant (-1: none), whose arrival delay
        :meth:`arrival_delay` then draws."""
        grid = self.grids[position]
        granted = self.granted
        n_up = sum(1 for j in grid.machines if up[j])
        n_granted = sum(1 for j in grid.machines if granted[j])
        demand = self.demand(view, grid)
        self.samples.append(GridSample(t, grid.name, n_up, n_granted, demand))
        if not demand or n_up + n_granted >= grid.max_hosts:
            return -1
        free = [j for j in grid.machines if not up[j] and not granted[j]]
        if not free:
            return -1
        j = free[0] if len(free) == 1 else self.rngs[position].choice(free)  # (a new client lands on any free host)
        granted[j] = True
        self.requests[position] += 1
        return j

    def arrival_delay(self, j: int) -> float:
        """The delay before granted host ``j`` arrives: the grid's queue wait (exponential, mean ``join``)."""
        position = self.grid_of[j]
        mean = self.grids[position].join
        return self.rngs[position].expovariate(1.0 / mean) if mean > 0 else 0.0

    def arrived(self, j: int) -> None:
        """Machine ``j`` is up (a granted host arrived, or a host of a grid without a size came back)."""
        self.granted[j] = False
        if self.grid_of[j] >= 0:
            self.watching[j] = None

    def every(self, position: int) -> float:
        return self.grids[position].size.request_every

    # ---------------------------------------------------------------- idle hosts leave

    def watch(self, t: float, up: Sequence[bool], machines: Sequence[Any], seq: int,
              push: Callable[[Any], None], kind: int) -> int:
        """After an event at ``t``: a sized host up and holding no job gets a leave event ``idle_leave`` from now
        (unless it has one); one that holds a job again loses it. Returns the next seq."""
        token = self.idle_token
        gone: list[int] = []
        for j in self.watching:
            if not up[j]:
                token[j] = -1
                gone.append(j)
            elif machines[j].replicas:
                token[j] = -1
            elif token[j] < 0:
                token[j] = seq
                push((t + self.grids[self.grid_of[j]].size.idle_leave, kind, seq, j))
                seq += 1
        for j in gone:
            del self.watching[j]
        return seq

    def leave_due(self, j: int, s: int) -> bool:
        """Whether leave event ``s`` of host ``j`` stands (the host stayed up holding no job since it was set)."""
        if self.idle_token[j] != s:
            return False
        self.idle_token[j] = -1
        self.leaves[self.grid_of[j]] += 1
        return True

    # ---------------------------------------------------------------- what a run reports

    def sizes(self) -> list[GridSample]:
        return list(self.samples)



__all__ = ["GridSample", "HeldJobs", "Overlay", "TakesGrid"]
