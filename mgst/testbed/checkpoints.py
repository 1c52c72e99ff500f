"""Progress coalescing: a replica's checkpoints reach the core at most once per interval, the latest kept."""

from __future__ import annotations

from collections.abc import Callable

from mgst.core.events import (
    Event,
    MachineDown,
    MachineReady,
    MachineSilent,
    ReplicaCheckpoint,
    ReplicaDone,
    ReplicaFailed,
    TimerFired,
)
from mgst.core.scheduler import Scheduler
from mgst.model import Experiment

# The shortest interval between two checkpoints of one replica that the mapper records (wall
# seconds), whatever the experiment's checkpoint interval: a checkpoint 0.1 s after the last
# carries little a job's restart would miss, and at 10 a second per replica a puller's checkpoints
# stay a bounded, small part of the journal. (A puller sends them at most every 0.01 s.)
MIN_INTERVAL = 0.1
# Core inputs before which a replica's held checkpoint is recorded (it ends, fails, or its machine goes):
# the checkpoint a puller sent is never lost to coalescing.
RELEASE_CHECKPOINTS_BEFORE = frozenset({ReplicaDone, ReplicaFailed, MachineDown, MachineSilent, MachineReady,
                                        TimerFired})


class CheckpointCoalescer:
    """One machine's replicas' checkpoints: which to record now, which to hold for later.

    A checkpoint arriving ``interval`` or more after its replica's last recorded one is recorded
    at once; one arriving sooner is held as the replica's pending checkpoint (a later one replaces
    it: the latest is kept), to be recorded once the interval has passed (:meth:`due`), or before
    the replica ends, fails or its machine goes down (:meth:`take`), so that no checkpoint an
    honest puller sends is lost. It holds an entry per replica the machine runs (pruned).
    """

    __slots__ = ("interval", "_last", "_held")

    def __init__(self, interval: float):
        # Half the experiment's interval: an honest puller sends one checkpoint per interval, so each is
        # recorded as it comes, jitter and all (a gate at the full interval held nearly every one until
        # the next heartbeat); a flood still reaches the core at most twice per interval per replica.
        self.interval = max(interval / 2, MIN_INTERVAL)
        self._last: dict[int, float] = {}  # replica -> when its last checkpoint was recorded (wall)
        self._held: dict[int, float] = {}  # replica -> its pending progress

    def offer(self, replica: int, progress: float, now: float) -> bool:
        """True if ``progress`` is to be recorded now (its time is noted); else it is held."""
        last = self._last.get(replica)
        if last is None or now - last >= self.interval:
            self._last[replica] = now
            self._held.pop(replica, None)
            return True
        if progress > self._held.get(replica, -1.0):
            self._held[replica] = progress
        return False

    def due(self, now: float) -> list[tuple[int, float]]:
        """The held checkpoints whose interval has passed, to record now (their times are noted)."""
        if not self._held:
            return []
        out = [(r, p) for r, p in self._held.items() if now - self._last[r] >= self.interval]
        for r, _ in out:
            del self._held[r]
            self._last[r] = now
        return out

    def take(self, replica: int | None = None) -> list[tuple[int, float]]:
        """The held checkpoint of ``replica`` (of every replica if None), now, whatever the interval."""
        if replica is None:
            out = list(self._held.items())
            self._held.clear()
            return out
        p = self._held.pop(replica, None)
        return [] if p is None else [(replica, p)]

    def prune(self, alive: Callable[[int], bool], keep: int) -> None:
        """Forget the replicas that ``alive`` says are over, once more than ``keep`` are remembered."""
        if len(self._last) > keep:
            for r in [r for r in self._last if not alive(r)]:
                del self._last[r]
                self._held.pop(r, None)

    @property
    def holding(self) -> bool:
        """Whether any checkpoint is held."""
        return bool(self._held)

    def __len__(self) -> int:
        return len(self._last)


class MachineCheckpoints:
    """The mapper's checkpoints, machine by machine: each machine's :class:`CheckpointCoalescer` (made at its
    first checkpoint), and the machines that held one back since the last timer recorded them all.

    ``feed(now, event)`` gives the core an input as the mapper does (journalled, its decisions
    carried out); the mapper calls :meth:`release` before each core input of RELEASE_CHECKPOINTS_BEFORE.
    """

    def __init__(self, core: Scheduler, experiment: Experiment, time_unit: float, feed: Callable[..., None]):
        self.core = core
        self.machines = experiment.machines
        self.interval = (experiment.simulation.checkpoint_interval or 0.0) * time_unit  # wall s
        self.feed = feed
        self.coalescers: list[CheckpointCoalescer | None] = [None] * len(experiment.machines)
        # Machines that held back a checkpoint since the last timer recorded them all: every machine that holds
        # one is here (a heartbeat of any other has nothing due; a timer takes them all, then clears it).
        self.holding: set[int] = set()

    def offer(self, j: int, rid: int, progress: float, now: float) -> None:
        """Machine ``j``'s replica ``rid`` checkpointed: recorded now, or held (one per interval per replica)."""
        cp = self.coalescers[j]
        if cp is None:
            cp = self.coalescers[j] = CheckpointCoalescer(self.interval)
        cp.prune(lambda r: (x := self.core.replica(r)) is not None and x.machine == j, 2 * self.machines[j].slots)
        if cp.offer(rid, progress, now):
            self.feed(now, ReplicaCheckpoint(rid, progress))
        else:
            self.holding.add(j)

    def record_due(self, j: int, now: float) -> None:
        """Record machine ``j``'s held checkpoints whose interval has passed (at its heartbeat)."""
        cp = self.coalescers[j]
        if cp is not None:
            for rid, progress in cp.due(now):
                self._record(j, rid, progress, now)

    def _record(self, j: int, rid: int, progress: float, now: float) -> None:
        """Record a held checkpoint, if its replica still runs on ``j`` and it is news."""
        live = self.core.replica(rid)
        if live is not None and live.machine == j and progress > live.checkpoint:
            self.feed(now, ReplicaCheckpoint(rid, progress))

    def release(self, event: Event, now: float) -> None:
        """Before ``event`` ends a replica or takes its machine: record what checkpoints it holds."""
        t = type(event)
        if t is TimerFired:  # a time-out may end any replica: every held checkpoint first
            for j in self.holding:  # (the machines that held one since; O(them), not O(machines))
                cp = self.coalescers[j]
                for r, progress in cp.take() if cp is not None else ():
                    self._record(j, r, progress, now)
            self.holding.clear()
            return
        if t is MachineDown or t is MachineSilent or t is MachineReady:
            j, rid = event.machine, None  # type: ignore[union-attr]
        else:
            replica: int = event.replica  # type: ignore[union-attr]
            live = self.core.replica(replica)
            if live is None:
                return
            j, rid = live.machine, replica
        cp = self.coalescers[j]
        if cp is not None:
            for r, progress in cp.take(rid):
                self._record(j, r, progress, now)
