"""GridBot's overlay on the testbed: the mapper takes the simulator's overlay turns (mgst.sim.overlay) on its own core,
and a granted host's puller is started once the grid's queue wait is over; a puller that gets no work leaves by
itself (``--idle-exit``, the grid's ``idle_leave``).

The decisions are the simulator's, made on the mapper's core at model times: every ``request_every`` of a grid, one
host asked for if work it may take is queued and the grid holds fewer than ``max_hosts`` (up, or granted and not
registered yet); its arrival delay is drawn from the grid's stream, as in the simulation. Where the simulation turns
an idle host off itself, the testbed's host leaves as a real client does: its puller exits after ``idle_leave`` with
no work, and says so (a Bye the mapper takes as the machine gone). The pullers are started by the driver that owns
the processes (mgst.testbed.local_run: ``launch``).
"""

from __future__ import annotations

import csv
import heapq
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mgst.availability.grid_size import OverlayGrid
from mgst.core.state import MachineRecord, MachineState
from mgst.core.view import View
from mgst.model import Experiment
from mgst.sim.overlay import GridSample, Overlay

log = logging.getLogger(__name__)


def first_hosts(experiment: Experiment, grids: Sequence[OverlayGrid]) -> list[int]:
    """The machines whose pullers start with the run: every machine of a grid without a size, and the first
    ``start_hosts`` of each sized grid (those the availability layer starts up: mgst.availability.grid_size)."""
    later = {j for g in grids for j in g.machines[g.size.start_hosts:]}
    return [j for j in range(len(experiment.machines)) if j not in later]


def idle_exit(grids: Sequence[OverlayGrid], n_machines: int, time_unit: float) -> list[float | None]:
    """Each machine's puller ``--idle-exit`` in wall seconds: its sized grid's ``idle_leave`` (None: it stays)."""
    out: list[float | None] = [None] * n_machines
    for g in grids:
        for j in g.machines:
            out[j] = g.size.idle_leave * time_unit
    return out


class MapperOverlay:
    """The overlay of one testbed run (``policy``: the core's, asked as the simulator asks it): :meth:`next_at`
    gives the model time of its next turn or arrival, and :meth:`due` (the mapper's loop, at model time ``t``) takes
    every turn and arrival due by then, calling ``launch`` with each machine whose puller is to be started.

    A granted host counts as granted until its puller registers (``registrations`` grows), so that a turn before
    it registers does not ask for it again, unless ``alive`` says its puller is not running (it could not start, or
    died before it registered): then the grant lapses, with a warning, and a later turn may ask again. A machine that
    is down (never started, preempted, or gone idle) may be granted again, and ``launch`` then replaces its puller.
    """

    def __init__(self, grids: Sequence[OverlayGrid], n_machines: int, seed: int, policy: object,
                 launch: Callable[[int], None], alive: Callable[[int], bool], registrations: Callable[[int], int]):
        self.overlay = Overlay(grids, n_machines, seed, 0, getattr(policy, "takes_grid", None),
                               getattr(policy, "held_jobs", None))
        self.launch = launch
        self.alive = alive
        self.registrations = registrations  # how many times machine j's pullers have registered so far
        # granted machines whose puller was started and has not registered yet, with their registrations before
        self.started: dict[int, int] = {}
        self.lapsed_by_grid = [0] * len(grids)  # grants whose puller was not running before it registered
        self.turns = [0.0] * len(grids)  # the model time of each grid's next turn
        self.arrivals: list[tuple[float, int]] = []  # (model time, machine): granted hosts not started yet
        self.launched = [0] * len(grids)  # pullers started by the overlay, per grid

    def next_at(self) -> float:
        """The model time of the next turn or arrival."""
        turn = min(self.turns)
        return min(turn, self.arrivals[0][0]) if self.arrivals else turn

    def due(self, t: float, machines: Sequence[MachineRecord], view: View) -> None:
        """Take every turn and arrival due by model time ``t`` (``machines``: the core's records, ``view``: its
        View)."""
        overlay = self.overlay
        up = [m.state is not MachineState.DOWN for m in machines]
        for j, before in list(self.started.items()):
            if self.registrations(j) > before:  # (it registered: up, or already gone again)
                del self.started[j]
                overlay.arrived(j)
            elif not self.alive(j):
                del self.started[j]
                overlay.granted[j] = False
                self.lapsed_by_grid[overlay.grid_of[j]] += 1
                log.warning("overlay: the puller of machine %d, granted to grid %r, is not running and never "
                            "registered: the grant lapses", j, overlay.grids[overlay.grid_of[j]].name)
        while self.arrivals and self.arrivals[0][0] <= t:
            _, j = heapq.heappop(self.arrivals)
            position = overlay.grid_of[j]
            self.launched[position] += 1
            log.info("overlay: a host of grid %r arrives (machine %d)", overlay.grids[position].name, j)
            before = self.registrations(j)
            self.launch(j)
            self.started[j] = before
        for position, at in enumerate(self.turns):
            while at <= t:
                j = overlay.cycle(at, position, view, up)
                if j >= 0:
                    heapq.heappush(self.arrivals, (at + overlay.arrival_delay(j), j))
                at += overlay.every(position)
            self.turns[position] = at

    def samples(self) -> list[GridSample]:
        """Each grid's size at each of its turns (up, granted and not arrived, demand)."""
        return self.overlay.sizes()


def simulated_overlay(experiment: Experiment, seed: int) -> Overlay:
    """The overlay of the run's setting simulated (replication 0, the run's seed): what the testbed's is set beside."""
    from mgst.sim.loop import Simulation  # noqa: PLC0415 (the simulator, only for a run with an overlay)

    sim = Simulation(experiment, replication=0, seed=seed)
    sim.run()
    assert sim.overlay is not None  # (the experiment has sized grids)
    return sim.overlay


def side_by_side(testbed: MapperOverlay, simulated: Overlay) -> dict[str, dict[str, Any]]:
    """Per sized grid: its maximum, and on the testbed and in simulation the hosts asked for and the most up at a
    turn; on the testbed, the pullers started and the grants that lapsed (summary.json's ``overlay``)."""
    def most_up(overlay: Overlay, name: str) -> int:
        return max((s.up for s in overlay.samples if s.grid == name), default=0)

    tb = testbed.overlay
    return {g.name: {"max_hosts": g.max_hosts,
                     "testbed": {"requests": tb.requests[i], "most_up": most_up(tb, g.name),
                                 "started": testbed.launched[i], "lapsed": testbed.lapsed_by_grid[i]},
                     "simulation": {"requests": simulated.requests[i], "most_up": most_up(simulated, g.name)}}
            for i, g in enumerate(tb.grids)}


def write_grid_sizes(path: Path, testbed: Overlay, simulated: Overlay | None, time_unit: float) -> None:
    """The grids' sizes at each of the overlays' turns, the testbed's then the simulation's (model time, its wall
    seconds from the run's start on the testbed, grid, hosts up, hosts granted and not arrived, whether work the grid
    may take was queued)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Source", "Time", "Seconds", "Grid", "Up", "Granted", "Demand"])
        for source, overlay in (("testbed", testbed), ("simulation", simulated)):
            for s in overlay.samples if overlay is not None else ():
                w.writerow([source, f"{s.time:g}", f"{s.time * time_unit:.3f}", s.grid, s.up, s.granted,
                            int(s.demand)])


__all__ = ["MapperOverlay", "first_hosts", "idle_exit", "side_by_side", "simulated_overlay", "write_grid_sizes"]
