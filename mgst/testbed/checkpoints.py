"""Progress coalescing: a replica's checkpoints reach the core at most once per interval, the latest kept."""

from __future__ import annotations

from collections.abc import Callable

# The shortest interval between two checkpoints of one replica that the mapper records (wall
# seconds), whatever the experiment's checkpoint interval: a checkpoint 0.1 s after the last
# carries little a job's restart would miss, and at 10 a second per replica a puller's checkpoints
# stay a bounded, small part of the journal. (A puller sends them at most every 0.01 s.)
MIN_INTERVAL = 0.1


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
