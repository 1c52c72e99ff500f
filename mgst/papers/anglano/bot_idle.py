"""LongIdle (Anglano and Canonico): the bag holding the candidate task that has been idle longest."""

from __future__ import annotations

import math
import random

from mgst.core.state import BagRecord, JobRecord, JobStatus, ReplicaRecord
from mgst.core.view import View
from mgst.papers.anglano.bot import BotOptions, BotPolicy
from mgst.policies import register
from mgst.policies.base import NOTHING, Decisions

NONE = -math.inf


@register
class LongIdle(BotPolicy):
    """LongIdle, built as written: the bag holding the candidate task with the largest idle time.

    A task's idle time is the total time it has had no running replica
    (``JobRecord.idle``: its wait before its first replica, plus every wait after
    losing its last one). Only candidates count (tasks not done with fewer than
    RepThresh live replicas), so the selected bag always has one. Ties go to the
    older bag. Within the bag, WQR-FT then takes the task with the fewest
    replicas, which need not be the longest-idle one (Fig. 1).

    As written this can pick a newer bag's never-started task over the oldest
    bag's second replica, so it need not match FCFS-Share (docs/readings.md): the
    oldest bag's running tasks keep the idle time they had when they started,
    while a newer bag's waiting task keeps accumulating.

    A bag's longest idle time among its candidates is the largest of:

    - its never-started tasks': the first one in ``bag.tasks`` (arrival order)
      has waited longest (idle = now - arrival); a pointer per bag moves past
      started tasks, O(1) amortised, so these tasks are never scanned;
    - its requeued tasks still waiting: noted in :meth:`on_replica_end` when a
      task goes back to the queue (the queue keeps them in a side list, with no
      public accessor);
    - its running tasks with fewer than RepThresh replicas, whose idle time is
      frozen while they run. Their largest is cached per bag, kept up to date
      when this policy starts a replica and dropped when a replica of the bag
      ends, then found again by a scan of ``bag.running``. The scan is skipped
      while no task of the bag started with more idle time than what the two
      parts above give: with a bag's tasks arriving together, a never-started
      task then always wins.

    Cost: O(bags + requeued waiting tasks) once per round (``now`` is fixed
    within a round), plus a scan of the running tasks of each bag a replica of
    which ended since the last round, only if it is needed (above); then per
    decision O(bags) for the maximum and O(1) to update the served bag (a scan
    of its running tasks if the task with the largest idle reached RepThresh).
    """

    name = "long_idle"
    hooks = frozenset({"on_replica_end"})  # notes the tasks that go back to their queue

    def __init__(self, options: BotOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        self.attach(None)

    def attach(self, view: View | None) -> None:
        self._fresh: dict[int, int] = {}  # bag id -> index in bag.tasks before which every task has started
        self._requeued: dict[int, dict[int, JobRecord]] = {}  # bag id -> tasks sent back to the queue
        self._started: dict[int, float] = {}  # bag id -> largest idle time a task of it had when it started
        self._running: dict[int, float] = {}  # bag id -> largest idle time of its running candidates (cache)
        self._idle: dict[int, tuple[float, BagRecord]] = {}  # this round: bag id -> (longest idle, bag)

    def on_replica_end(self, view: View, replica: ReplicaRecord) -> Decisions:
        task = replica.job
        bag = task.bag
        if bag is not None:
            self._running.pop(bag.id, None)  # its running tasks or their replica counts changed
            if task.status is JobStatus.QUEUED:
                self._requeued.setdefault(bag.id, {})[task.id] = task
        return NOTHING

    def longest_idle(self, bag: BagRecord, now: float) -> float | None:
        """The largest idle time among the bag's candidates at ``now`` (None: it has none)."""
        best = NONE
        tasks = bag.tasks
        i = self._fresh.get(bag.id, 0)
        n = len(tasks)
        while i < n and tasks[i].attempts:
            i += 1
        self._fresh[bag.id] = i
        if i < n:
            best = tasks[i].idle(now)
        requeued = self._requeued.get(bag.id)
        if requeued:
            for task in list(requeued.values()):
                if task.status is JobStatus.QUEUED:
                    best = max(best, task.idle(now))
                else:
                    del requeued[task.id]  # started again (or done by a late result): it may come back
        if self._started.get(bag.id, NONE) > best:  # a running task may have been idle longer
            running = self._running.get(bag.id)
            if running is None:
                limit = self.max_replicas
                running = max(
                    (t.idle_time for t in bag.running.values() if len(t.replicas) < limit), default=NONE
                )
                self._running[bag.id] = running
            best = max(best, running)
        return None if best == NONE else best

    def begin(self, view: View) -> None:
        bags = view.bags
        if len(self._fresh) > len(bags):  # bags completed: forget them
            for memo in (self._fresh, self._requeued, self._started, self._running):
                for b in [b for b in memo if b not in bags]:
                    del memo[b]
        now = view.now
        idle = {}
        for bag in bags.values():
            longest = self.longest_idle(bag, now)
            if longest is not None:
                idle[bag.id] = (longest, bag)
        self._idle = idle

    def select(self, view: View) -> BagRecord | None:
        chosen = None
        longest = NONE
        blocked = self._blocked
        for idle, bag in self._idle.values():  # arrival order: a tie goes to the older bag
            if idle > longest and not (blocked and bag.id in blocked):
                chosen = bag
                longest = idle
        return chosen

    def served(self, view: View, bag: BagRecord, task: JobRecord) -> None:
        idle = task.idle_time  # just updated by the core if the task had been waiting
        if idle > self._started.get(bag.id, NONE):
            self._started[bag.id] = idle
        running = self._running.get(bag.id)
        if running is not None:
            if len(task.replicas) < self.max_replicas:  # (still) a candidate
                if idle > running:
                    self._running[bag.id] = idle
            elif idle >= running:  # it left the candidates and may have been the largest
                del self._running[bag.id]
        longest = self.longest_idle(bag, view.now)
        if longest is None:
            del self._idle[bag.id]
        else:
            self._idle[bag.id] = (longest, bag)
