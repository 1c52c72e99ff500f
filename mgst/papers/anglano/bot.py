"""Anglano and Canonico's Bag-of-Tasks schedulers: Fig. 1 on the core, and the two FCFS policies."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
from collections.abc import Iterator
from typing import Any

from mgst.core.decisions import Assign, Decision
from mgst.core.hooks import PolicyError
from mgst.core.state import BagRecord, JobRecord, JobStatus, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.bag_workload import require_bag_workload
from mgst.policies.base import NOTHING, Decisions, Policy, PolicyOptions

log = logging.getLogger(__name__)

# RR and RR-NRF live in bot_circular.py, LongIdle in bot_idle.py; all five register as built-ins.

# FCFS-Excl's "potentially unlimited" RepThresh. The core needs a number: this one no run reaches
# (a task can never have more live replicas than there are slots).
UNLIMITED = 2**31


@dataclasses.dataclass(frozen=True)
class BotOptions(PolicyOptions):
    # RepThresh: a task is a candidate while it has fewer live replicas than this (the paper: 2).
    replicas: int = 2
    # A new replica resumes from the task's best checkpoint (WQR-FT's Select_Best_Checkpoint).
    checkpoints: bool = True
    # mgst's earlier rule: a bag's requeued tasks (they have a checkpoint) restart before its
    # never-started ones, each in submission order (the queue's head). Off: the paper's "in case of
    # tie, random selection is used", a uniform pick among every waiting task of the bag.
    requeued_first: bool = False

    def validate(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"replicas: must be >= 1, got {self.replicas}")


@dataclasses.dataclass(frozen=True)
class ExclOptions(BotOptions):
    # None (the default; TOML cannot spell it): unlimited, i.e. UNLIMITED live replicas.
    replicas: int | None = None

    def validate(self) -> None:
        if self.replicas is not None:
            super().validate()


class BotPolicy(Policy):
    """Fig. 1 of Anglano and Canonico: a bag selection policy (the variable part) over WQR-FT.

    After every event, while some machine asks for work and some bag has a candidate:

    1. :meth:`select` a bag (the variable part, one subclass per policy) among the
       incomplete bags whose candidate set CS(B) -- its tasks not done with fewer
       than RepThresh live replicas -- is non-empty. When none has one, the loop
       stops and the machines still asking stay held (the printed loop,
       ``while Q != {} and M != {}``, would spin: docs/readings.md).
    2. Take the task of CS(B) with the fewest live replicas, "in case of tie, random
       selection" (the paper). A waiting task has none, so while the bag's queue is
       not empty the task is drawn uniformly (``self.rng``) among all of the bag's
       waiting tasks, requeued (they have a checkpoint) and never-started alike
       (:meth:`waiting_task`). With the ``requeued_first`` option it is the queue's
       head instead: requeued tasks first, then never-started ones in submission
       order (mgst's earlier rule). When nothing of the bag waits, its
       running tasks are scanned (at most one per busy slot) and a tie on the
       fewest replicas is broken with ``self.rng``.
    3. Pick a machine uniformly at random (``self.rng``) among those asking, each
       machine once whatever its number of free slots (Random_Select).
    4. Yield ``Assign``: the core starts the replica at once, from the task's best
       checkpoint when ``checkpoints`` (Select_Best_Checkpoint), so the next round
       sees it.

    Every round yields one Assign, passes a bag over, or stops; there are
    finitely many asking slots and bags, so the loop ends. A machine whose
    nominal rate for the task's class is 0 never gets the task, nor does a
    machine with several slots that already runs a replica of it. The paper's
    machines have one slot and run every class; otherwise (:meth:`_place`) the
    task is the candidate with the fewest replicas that some asking machine can
    take, and the machine is drawn among those that can; a bag none of whose
    candidates fits an asking machine is passed over until the next event (of its
    waiting tasks only the one drawn is tried).

    The first replica to finish wins and the core cancels its siblings; a task that
    loses its last replica goes back to its bag's queue (the core).

    Per decision: O(1) amortised for the task while the bag has waiting tasks (plus
    its requeued waiting tasks, few), else the bag's running tasks; O(1) for the
    machine (in the general case, O(the bag's running tasks x asking machines) for
    both); plus the selection's cost (each subclass).
    """

    Options = BotOptions
    options: BotOptions
    hooks = frozenset({"dispatch"})
    incremental = False  # it dispatches: the core's incremental matching is not used

    @classmethod
    def check_experiment(cls, experiment: Any) -> None:
        """When the file is loaded: a Bag-of-Tasks workload (jobs without a bag failed the run once the first
        waited)."""
        require_bag_workload(cls.name, experiment)

    def __init__(self, options: BotOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        replicas = self.options.replicas
        self.max_replicas = UNLIMITED if replicas is None else replicas
        self.resume_from_checkpoint = self.options.checkpoints
        self.requeued_first = self.options.requeued_first
        # bag id -> its never-started tasks, in no order, and how many of bag.tasks were added: an entry
        # that has started since is dropped when drawn (see waiting_task)
        self._unstarted: dict[int, list[JobRecord]] = {}
        self._unstarted_seen: dict[int, int] = {}
        self._view: View | None = None
        self._everywhere = True  # every machine runs every class (no nominal rate is 0)
        self._one_slot = True  # every machine has one slot: one that asks runs nothing
        self._blocked: set[int] = set()  # bags passed over in this round: no asking machine runs their task

    # ------------------------------------------------------------------ the variable part

    def select(self, view: View) -> BagRecord | None:
        """The bag to serve next, among those that are :meth:`eligible`; None if there is none."""
        raise NotImplementedError

    def attach(self, view: View) -> None:
        """A new core drives this policy (a policy object serves one run): reset per-run state."""

    def begin(self, view: View) -> None:
        """A dispatch round starts; nothing but this round's Assigns changes the view until it ends."""

    def served(self, view: View, bag: BagRecord, task: JobRecord) -> None:
        """The round just started a replica of ``task`` of ``bag`` (the bag :meth:`select` returned)."""

    # ------------------------------------------------------------------ the fixed part: WQR-FT

    def eligible(self, bag: BagRecord) -> bool:
        """Whether CS(bag) is non-empty (and the bag was not passed over in this round)."""
        if self._blocked and bag.id in self._blocked:
            return False
        if bag.queue.head is not None:
            return True
        limit = self.max_replicas
        for rec in bag.running.values():
            if len(rec.replicas) < limit:
                return True
        return False

    def waiting_task(self, bag: BagRecord) -> JobRecord:
        """A task of the bag's queue (it must not be empty): all have no live replica, so they tie.

        The paper's tie rule: uniform among them, one draw of ``self.rng``. The bag's never-started
        waiting tasks are kept here, per bag, in a list (:meth:`_unstarted_tasks`); the queue holds
        them and the bag's requeued tasks (a draw past the list reads those, few, from the queue).
        A never-started task leaves the queue only when assigned, and every Assign of one comes
        from this draw, which takes it out of the list: so the list holds exactly the bag's
        never-started waiting tasks (checked, and rebuilt if it does not). ``requeued_first``:
        the queue's head, no draw.
        """
        queue = bag.queue
        if self.requeued_first:
            head = queue.head
            if head is None:
                raise PolicyError(f"{self.name}: {bag} has no waiting task")
            return head
        pool = self._unstarted.get(bag.id)
        if pool is None or self._unstarted_seen[bag.id] < len(bag.tasks):
            pool = self._unstarted_tasks(bag)
        waiting = len(queue)
        fresh = len(pool)
        # floor(u * n): uniform on 0..n-1 but for a bias of n / 2**53, and 4 times faster than randrange
        i = int(self.rng.random() * waiting) if waiting > 1 else 0
        if i < fresh:
            task = pool[i]
            if task.attempts or task.status is not JobStatus.QUEUED:
                return self._resync(bag)
            pool[i] = pool[-1]
            pool.pop()
            return task
        requeued = [t for t in queue.requeued() if t.attempts]  # (an out-of-order arrival is never-started)
        if len(requeued) != waiting - fresh:
            return self._resync(bag)
        return requeued[i - fresh]

    def _unstarted_tasks(self, bag: BagRecord) -> list[JobRecord]:
        """The bag's never-started waiting tasks, in no order (see :meth:`waiting_task`)."""
        pool = self._unstarted.get(bag.id)
        if pool is None:
            pool = self._unstarted[bag.id] = []
        tasks = bag.tasks
        seen = self._unstarted_seen.get(bag.id, 0)
        if seen < len(tasks):  # the bag's tasks so far (a task may arrive on its own, after its bag)
            pool.extend(t for t in itertools.islice(tasks, seen, None) if not t.attempts)
            self._unstarted_seen[bag.id] = len(tasks)
        return pool

    def _resync(self, bag: BagRecord) -> JobRecord:
        """The list of never-started tasks was out of step (a task assigned by other means): rebuilt, drawn again."""
        log.warning("%s: the never-started tasks of %s were out of step; rebuilt", self.name, bag)
        self._unstarted[bag.id] = [t for t in bag.tasks if not t.attempts and t.status is JobStatus.QUEUED]
        self._unstarted_seen[bag.id] = len(bag.tasks)
        pool = self._unstarted[bag.id]
        requeued = [t for t in bag.queue.requeued() if t.attempts]
        if len(pool) + len(requeued) != len(bag.queue):
            raise PolicyError(f"{self.name}: {bag} has {len(bag.queue)} waiting tasks, {len(pool)} never started "
                              f"and {len(requeued)} requeued")
        return self.waiting_task(bag)

    def _put_back(self, task: JobRecord) -> None:
        """A never-started task drawn by :meth:`waiting_task` and not assigned after all goes back to its list."""
        if not task.attempts and task.bag is not None and not self.requeued_first:
            self._unstarted_tasks(task.bag).append(task)

    def candidate(self, bag: BagRecord) -> JobRecord:
        """The task of CS(bag) with the fewest live replicas (see the class docstring); CS must not be empty."""
        if bag.queue.head is not None:
            return self.waiting_task(bag)
        limit = self.max_replicas
        fewest = limit
        ties: list[JobRecord] = []
        for rec in bag.running.values():
            n = len(rec.replicas)
            if n >= limit:
                continue
            if n < fewest:
                fewest = n
                ties = [rec]
            elif n == fewest:
                ties.append(rec)
        if not ties:
            raise PolicyError(f"{self.name} selected {bag}, which has no candidate")
        return ties[self.rng.randrange(len(ties))] if len(ties) > 1 else ties[0]

    def _place(self, bag: BagRecord, pool: list[MachineRecord]) -> tuple[JobRecord, int] | None:
        """The general case: the candidate with the fewest replicas that some asking machine can
        take (its class's rate there is positive, it runs no replica of the task yet), ties at
        random, and such a machine at random (its position in ``pool``); None if there is none.
        Of the waiting tasks only one is tried, drawn as in :meth:`candidate`."""
        waiting = self.waiting_task(bag) if bag.queue.head is not None else None
        limit = self.max_replicas
        fewest = limit
        options: list[tuple[JobRecord, list[int]]] = []
        for rec in (waiting,) if waiting is not None else bag.running.values():
            n = len(rec.replicas)
            if n > fewest or n >= limit:
                continue
            c = rec.job.job_class
            taken = {r.machine for r in rec.replicas.values()}
            able = [k for k, m in enumerate(pool) if m.rates[c] > 0.0 and m.index not in taken]
            if not able:
                continue
            if n < fewest:
                fewest = n
                options = []
            options.append((rec, able))
        if not options:
            if waiting is not None:
                self._put_back(waiting)
            return None
        rng = self.rng
        task, able = options[rng.randrange(len(options))] if len(options) > 1 else options[0]
        return task, able[rng.randrange(len(able))] if len(able) > 1 else able[0]

    def dispatch(self, view: View, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        if not view.bags:
            if view.queued_count:
                raise ValueError(f"policy {self.name} schedules Bags of Tasks; jobs without a bag are waiting")
            return NOTHING
        if not view.ready_count:
            return NOTHING
        if not view.queued_count and (self.max_replicas <= 1 or not view.running):
            return NOTHING
        if view is not self._view:
            self._view = view
            self._unstarted = {}
            self._unstarted_seen = {}
            self._everywhere = all(rate > 0.0 for m in view.machines for rate in m.rates)
            self._one_slot = all(m.slots == 1 for m in view.machines)
            self.attach(view)
        return self._round(view)

    def _round(self, view: View) -> Iterator[Decision]:
        pool = view.ready_machines()
        if self._blocked:
            self._blocked = set()
        if len(self._unstarted) > len(view.bags):  # bags completed: forget their tasks
            for gone in [b for b in self._unstarted if b not in view.bags]:
                del self._unstarted[gone]
                self._unstarted_seen.pop(gone, None)
        self.begin(view)
        rng = self.rng
        while pool:
            bag = self.select(view)
            if bag is None:
                return  # no bag has a candidate: the machines left asking stay held
            if self._everywhere and self._one_slot:  # the paper's grids: any asking machine takes any candidate
                task = self.candidate(bag)
                i = rng.randrange(len(pool)) if len(pool) > 1 else 0
            else:
                placed = self._place(bag, pool)
                if placed is None:
                    self._blocked.add(bag.id)
                    continue
                task, i = placed
            machine = pool[i]
            yield Assign(task.job, machine.index)
            self.served(view, bag, task)
            if not machine.asking:
                pool[i] = pool[-1]
                pool.pop()


@register
class FcfsExcl(BotPolicy):
    """FCFS-Excl: bags are served one at a time in arrival order, with unlimited replication.

    Only the oldest incomplete bag is ever selected; no task of another bag starts
    until it completes. RepThresh is unlimited (``UNLIMITED``; the ``replicas``
    option can set a bound, and then a machine the oldest bag cannot use stays
    held). Selection: O(1).
    """

    name = "fcfs_excl"
    Options = ExclOptions
    options: ExclOptions

    def select(self, view: View) -> BagRecord | None:
        for bag in view.bags.values():
            return bag if self.eligible(bag) else None
        return None


@register
class FcfsShare(BotPolicy):
    """FCFS-Share: the oldest bag whose candidate set is non-empty.

    The oldest bag thus gets its second replicas (RepThresh 2) before the next bag
    starts (docs/readings.md). Selection walks the bags in arrival order; within one
    round a bag without candidates gets none back, so the walk resumes where it
    stopped: O(bags passed over) per round, each check O(1) for a bag with waiting
    tasks, else O(its running tasks).
    """

    name = "fcfs_share"

    def begin(self, view: View) -> None:
        self._walk = iter(view.bags.values())
        self._bag: BagRecord | None = next(self._walk, None)

    def select(self, view: View) -> BagRecord | None:
        bag = self._bag
        while bag is not None and not self.eligible(bag):
            bag = next(self._walk, None)
        self._bag = bag
        return bag
