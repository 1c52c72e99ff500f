"""Anglano and Canonico's Bag-of-Tasks schedulers (seed 000): Fig. 1 on the core, and the two FCFS policies."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

from mgst.core.decisions import Assign, Decision
from mgst.core.hooks import PolicyError
from mgst.core.state import BagRecord, JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.base import NOTHING, Decisions, Policy, PolicyOptions

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
       ``while Q != {} and M != {}``, would spin: POLICIES.md).
    2. Take the task of CS(B) with the fewest live replicas. A waiting task has
       none, so while the bag's queue is not empty the task is the queue's head,
       in O(1): its never-started tasks are interchangeable (no replica, no
       checkpoint, sizes iid and unknown to the scheduler), so the head is, in
       distribution, the paper's random pick among them. A requeued task keeps
       its place in submission order and so sits at the head, ahead of the bag's
       never-started tasks: between a requeued task (it has a checkpoint) and a
       never-started one the paper's tie is broken in favour of the requeued task.
       When nothing of the bag waits, its running tasks are scanned (at most one
       per busy slot) and a tie on the fewest replicas is broken with ``self.rng``.
    3. Pick a machine uniformly at random (``self.rng``) among those asking, each
       machine once whatever its number of free slots (Random_Select).
    4. Yield ``Assign``: the core starts the replica at once, from the task's best
       checkpoint when ``checkpoints`` (Select_Best_Checkpoint), so the next round
       sees it.

    Every round yields one Assign, passes a bag over, or stops; there are
    finitely many asking slots and bags, so the loop ends. A machine whose
    nominal rate for the task's class is 0 never gets the task, nor does a
    machine with several slots that already runs a replica of it. Seed 000's
    machines have one slot and run every class; otherwise (:meth:`_place`) the
    task is the candidate with the fewest replicas that some asking machine can
    take, and the machine is drawn among those that can; a bag none of whose
    candidates fits an asking machine is passed over until the next event (of its
    waiting tasks only the head is tried).

    The first replica to finish wins and the core cancels its siblings; a task that
    loses its last replica goes back to its bag's queue (the core).

    Per decision: O(1) for the task while the bag has waiting tasks, else the bag's
    running tasks; O(1) for the machine (in the general case, O(the bag's running
    tasks x asking machines) for both); plus the selection's cost (each subclass).
    """

    Options = BotOptions
    options: BotOptions
    hooks = frozenset({"dispatch"})
    incremental = False  # it dispatches: the core's incremental matching is not used

    def __init__(self, options: BotOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        replicas = self.options.replicas
        self.max_replicas = UNLIMITED if replicas is None else replicas
        self.resume_from_checkpoint = self.options.checkpoints
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

    def candidate(self, bag: BagRecord) -> JobRecord:
        """The task of CS(bag) with the fewest live replicas (see the class docstring); CS must not be empty."""
        head = bag.queue.head
        if head is not None:
            return head
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
        A waiting task is the queue's head only, as in :meth:`candidate`."""
        head = bag.queue.head
        limit = self.max_replicas
        fewest = limit
        options: list[tuple[JobRecord, list[int]]] = []
        for rec in (head,) if head is not None else bag.running.values():
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
            self._everywhere = all(rate > 0.0 for m in view.machines for rate in m.rates)
            self._one_slot = all(m.slots == 1 for m in view.machines)
            self.attach(view)
        return self._round(view)

    def _round(self, view: View) -> Iterator[Decision]:
        pool = view.ready_machines()
        if self._blocked:
            self._blocked = set()
        self.begin(view)
        rng = self.rng
        while pool:
            bag = self.select(view)
            if bag is None:
                return  # no bag has a candidate: the machines left asking stay held
            if self._everywhere and self._one_slot:  # seed 000: any asking machine takes any candidate
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
    starts (POLICIES.md). Selection walks the bags in arrival order; within one
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
