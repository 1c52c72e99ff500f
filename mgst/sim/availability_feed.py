"""The simulator's side of availability: each machine's process, the events that end its periods, share changes."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mgst.availability.process import Period, State
from mgst.availability.registry import make_process
from mgst.core.state import MachineState
from mgst.model import Experiment

if TYPE_CHECKING:
    from mgst.core.scheduler import Scheduler


class PeriodEvents:
    """Every machine's availability process in one replication, and the heap events that end its periods.

    A machine's next period is drawn when the current one begins, to know the kind of the event that ends
    the current one (``kinds``: the simulator's down, back-up and share-change kinds). Each machine draws
    from its own streams, so its draws, and their order, are those of drawing each period as it begins.
    """

    __slots__ = ("procs", "entering", "down", "up", "share", "done", "event_seq")

    def __init__(self, experiment: Experiment, seed: int, replication: int, kinds: tuple[int, int, int, int]):
        n = len(experiment.machines)
        self.procs = [make_process(experiment, seed, replication, j) for j in range(n)]  # None: always up
        self.entering: list[Any] = [None] * n  # the period each machine enters at its next availability event
        self.down, self.up, self.share, self.done = kinds  # (down, back up, share change, completion) event kinds
        # The seq of each machine's pending availability event (-1: none): a driver that ends a period itself (the
        # overlay's hosts leaving, mgst.sim.overlay) makes the pending one stale.
        self.event_seq = [-1] * n

    def start(self, push: Callable[[Any], None], seq: int) -> tuple[list[Period | None], int]:
        """Every machine's first period (None: always up at its a_j), the events that end them pushed; and the
        next seq."""
        firsts: list[Period | None] = []
        for j, proc in enumerate(self.procs):
            if proc is None:
                firsts.append(None)
                continue
            first = proc.next()
            after = proc.next()
            self.entering[j] = after
            firsts.append(first)
            if first.duration < math.inf:
                push((first.duration, self._kind(first, after), seq, j))
                self.event_seq[j] = seq
                seq += 1
        return firsts, seq

    def advance(self, t: float, j: int, push: Callable[[Any], None], seq: int) -> int:
        """Machine ``j`` entered ``entering[j]`` at ``t``: draw the period after it and push the event that ends
        it (none if it lasts for good); the next seq."""
        period: Period = self.entering[j]
        after = self.procs[j].next()  # type: ignore[union-attr]
        self.entering[j] = after
        if period.duration < math.inf:
            push((t + period.duration, self._kind(period, after), seq, j))
            self.event_seq[j] = seq
            seq += 1
        else:
            self.event_seq[j] = -1
        return seq

    def _kind(self, period: Period, after: Period) -> int:
        if after.state is State.DOWN:
            return self.down
        if period.state is State.DOWN:
            return self.up
        return self.share

    def share_changed(self, core: Scheduler, t: float, j: int, a: float, share: list[float], pending: list) -> None:
        """Machine ``j``'s CPU share becomes ``a`` at ``t`` (0 suspends): the core moves its replicas' ends (its Eta
        decisions go to ``pending``, with the rest of its outputs), and a machine given CPU again asks for its free
        slots not asked for (as a puller does)."""
        m = core.machines[j]
        could_ask = share[j] > 0.0 and not m.reclaimed
        share[j] = a
        pending.extend(core.cpu_share_changed(t, j, a))
        if not could_ask and a > 0.0 and not m.reclaimed:
            _ask_again(core, t, j, pending)

    def availability_changed(
        self, core: Scheduler, t: float, j: int, state: State, a: float, share: list[float], pending: list
    ) -> None:
        """Machine ``j`` is UP or RECLAIMED at share ``a`` from ``t``: the core moves its replicas' ends (Eta decisions
        into ``pending``) and withdraws its request if it has no CPU to give; one UP with a share again asks."""
        m = core.machines[j]
        could_ask = share[j] > 0.0 and not m.reclaimed
        share[j] = a
        pending.extend(core.machine_availability(t, j, state, a))
        if not could_ask and a > 0.0 and state is State.UP:
            _ask_again(core, t, j, pending)


def _ask_again(core: Scheduler, t: float, j: int, pending: list) -> None:
    """Machine ``j`` has CPU to give again: it asks for its free slots not asked for (as a puller does)."""
    m = core.machines[j]
    if m.state is not MachineState.DOWN and m.slots - len(m.replicas) > m.asking:
        pending.extend(core.machine_ready(t, j, m.cpu_share, m.slots - len(m.replicas)))


def held_end(t: float, end: float, held: tuple[float, float, float]) -> float:
    """The completion of a replica held with overheads, ``end`` the core's: the rest of its pre-compute delay, its
    overrun and its post-compute delay added. The core counted the pre-compute delay as computing at the old share:
    exact when the share does not change while the replica runs, an approximation when it does."""
    computing_from, overrun, post = held
    return max(t, end + max(0.0, computing_from - t) + overrun) + post


__all__ = ["PeriodEvents", "held_end"]
