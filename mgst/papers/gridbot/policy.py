"""GridBot's work dispatch (Silberstein et al., section 4.2): Algorithm 1 on every request, Algorithm 2 on a periodic
replication cycle, and tail detection, each bag's policy given as ClassAd expressions."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Hashable, Iterator
from typing import Any, Final

from mgst.core.decisions import Assign, Decision, SetTimer, TimeOut
from mgst.core.state import JobRecord, JobStatus, MachineRecord
from mgst.core.view import View
from mgst.papers.gridbot.ads import Ads
from mgst.papers.gridbot.bags import BagPolicy, BagState, check_bag_attributes
from mgst.papers.gridbot.classads import (
    BOOLEAN_FALLBACK,
    CONCURRENCY,
    DEADLINE,
    GRID_POLICY,
    JOB_REQUIREMENTS,
    NO_DEADLINE,
    POLICY_ATTRIBUTES,
    RANK,
    RANK_FALLBACK,
    REPLICATION_REQUIREMENTS,
    Fallbacks,
    as_boolean,
    as_number,
    parse,
)
from mgst.policies import ExperimentKeyError, register
from mgst.policies.base import NOTHING, Decisions, Policy, PolicyOptions

# The replication cycle's timer (a string and an int: the mapper's journal stores it).
CYCLE: Final = ("gridbot_cycle", 0)
# Where a candidate of Algorithm 1 comes from: a bag's waiting tasks, or a replica the cycle enqueued.
_QUEUED: Final = 0
_PENDING: Final = 1
_UNSET: Final = object()

Expression = str | int | float | bool  # a ClassAd expression's text, or a literal


@dataclasses.dataclass(frozen=True)
class GridBotOptions(PolicyOptions):
    """[policy] keys of ``gridbot``: every bag's expressions unless its own attributes give them, and the mechanisms'
    parameters (docs/policies.md, "GridBot")."""

    JobRequirements: Expression = "true"
    Rank: Expression = "Priority"
    Concurrency: Expression = "Host.NumCpus"
    Deadline: Expression | None = None  # none: a replica never expires
    ReplicationRequirements: Expression = "false"
    GridPolicy: Expression = "true"
    cycle: float = 60.0  # model time between two replication cycles (Algorithm 2)
    max_replicas: int = 5  # the most replicas of one job that exist at once (live and pending)
    tail_threshold: int = 100  # a bag is in its tail while its queue holds fewer jobs than this
    tail_sticky: bool = False  # once in its tail, a bag stays there (no flapping)
    replicate_below: int | None = None  # ReplicationRequirements is evaluated only below this queue (None: tail's)
    run_on_losers: bool = True  # a job's other replicas run on once it is done: their results discarded (waste)
    evaluate: str = "bag"  # "bag": a bag's waiting tasks evaluated once, as its queue's head; "job": each of them
    replicas_first: bool = False  # at equal Rank, a bag's pending replicas before its waiting tasks
    checkpoints: bool = False  # a new replica resumes from the job's best checkpoint (GridBot's restart from scratch)

    def validate(self) -> None:
        try:
            for name in POLICY_ATTRIBUTES:
                value = getattr(self, name)
                if value is None:
                    if name != DEADLINE:
                        raise ValueError(f"{name}: needs an expression")
                    continue
                try:
                    parse(value)
                except ValueError as err:
                    raise ValueError(f"{name}: {err}") from None
        except ImportError as err:
            raise ValueError(f"the gridbot policy cannot run here: {err}") from None
        if not (self.cycle > 0.0 and math.isfinite(self.cycle)):
            raise ValueError(f"cycle: must be a positive number of time units, got {self.cycle}")
        if self.max_replicas < 1:
            raise ValueError(f"max_replicas: must be >= 1, got {self.max_replicas}")
        if self.tail_threshold < 0:
            raise ValueError(f"tail_threshold: must be >= 0, got {self.tail_threshold}")
        if self.replicate_below is not None and self.replicate_below < 0:
            raise ValueError(f"replicate_below: must be >= 0, got {self.replicate_below}")
        if self.evaluate not in ("bag", "job"):
            raise ValueError(f"evaluate: must be 'bag' or 'job', got {self.evaluate!r}")


class GridBot(Policy):
    """GridBot: each bag's policy is ClassAd expressions; Algorithm 1 per request, Algorithm 2 per cycle.

    - Algorithm 1, when a host asks: the candidates are the jobs whose ``JobRequirements`` hold (of the bags whose
      ``GridPolicy`` takes the host's grid), ordered by ``Rank``, highest first (ties: older bag, then the bag's
      waiting tasks in queue order before its pending replicas); the host then holds at most the top candidate's
      ``Concurrency`` jobs, lowered by each candidate taken, and each job sent is stamped with its ``Deadline``.
    - Algorithm 2, every ``cycle``: a replica past its deadline is given up on (``TimeOut``: the host's error) and
      its job gets a new replica (the core requeues a job left with none; else one is enqueued); then, for a bag
      whose queue holds fewer than ``replicate_below`` jobs, its running jobs are drawn in a weighted sample (weight
      1 / their replicas, from ``self.rng``) and each whose ``ReplicationRequirements`` holds gets a replica
      enqueued, until the queue is full again; a job never has more than ``max_replicas``.
    - A bag is in its tail while its queue holds fewer than ``tail_threshold`` jobs (``tail_sticky``: for good).
    """

    name = "gridbot"
    hooks = frozenset({"dispatch"})  # (on_timer, the cycle's, is the base's)
    incremental = False
    Options = GridBotOptions
    options: GridBotOptions

    def __init__(self, options: GridBotOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        o = self.options
        self.max_replicas = o.max_replicas
        self.cancel_losers = not o.run_on_losers
        self.resume_from_checkpoint = o.checkpoints
        self.defaults = {name: getattr(o, name) for name in POLICY_ATTRIBUTES}
        self.replicate_below = o.tail_threshold if o.replicate_below is None else o.replicate_below
        self.per_job = o.evaluate == "job"
        self.kinds = (_PENDING, _QUEUED) if o.replicas_first else (_QUEUED, _PENDING)
        # The references the top ad is asked for: a bag's expressions evaluated in its ad (mgst.papers.gridbot.ads).
        self.refs = {name: parse(f"Bag.{name}") for name in POLICY_ATTRIBUTES}
        self.fallbacks = Fallbacks()
        self.evaluations = dict.fromkeys(POLICY_ATTRIBUTES, 0)  # expressions evaluated (constants not counted)
        self.counts = {"requests": 0, "sent": 0, "replicas_sent": 0, "deadline_expired": 0, "replicas_enqueued": 0,
                       "tail_starts": 0}
        self.view: View | None = None
        self.ads: Ads | None = None
        self.states: dict[int, BagState] = {}
        self.deadlines: list[tuple[float, int]] = []  # (expiry, replica id) of the replicas sent with a deadline
        self.armed = False  # the cycle's timer is set
        self.wake = True  # ask every waiting host at the next dispatch
        self.queued_seen = -1  # the jobs waiting, and the capacity version, at the last dispatch
        self.capacity_seen = -1

    @classmethod
    def check_experiment(cls, experiment: Any) -> None:
        """When the file is loaded: a Bag-of-Tasks workload, and each bag's own expressions parse (the error names the
        bag and the attribute: ``workload.bags[2].attributes.Rank``)."""
        from mgst.model import BagList, BagStream, SwfTrace  # noqa: PLC0415 (only when an experiment is checked)

        w = experiment.workload
        if not (isinstance(w, BagList | BagStream) or (isinstance(w, SwfTrace) and w.bags != "none")):
            raise ValueError(f"policy {cls.name} schedules Bags of Tasks: it needs a bag workload "
                             f"(workload.kind = \"bag_list\" or \"bags\"), not {type(w).__name__}")
        if isinstance(w, BagList):
            for i, pairs in enumerate(w.attributes):
                try:
                    check_bag_attributes(pairs)
                except ValueError as err:
                    name, _, problem = str(err).partition(": ")
                    raise ExperimentKeyError(f"workload.bags[{i}].attributes.{name}",
                                             f"bag {i} (at {w.bags[i][0]:g}): {problem}") from None
                except ImportError as err:
                    raise ExperimentKeyError("policy.name", str(err)) from None

    def report(self) -> dict[str, float]:
        out: dict[str, float] = dict(self.counts)
        out["fallbacks"] = self.fallbacks.total
        for name, n in self.fallbacks.counts.items():
            if n:
                out[f"fallbacks_{name}"] = n
        return out

    # ------------------------------------------------------------------ the ads and their evaluation

    def _attach(self, view: View) -> None:
        """A new run drives this policy (one policy object serves one run)."""
        self.view = view
        self.ads = Ads(view)
        self.states = {}
        self.deadlines = []
        self.armed = False
        self.wake = True

    def _state(self, bag: Any) -> BagState:
        state = self.states.get(bag.id)
        if state is None:
            state = self.states[bag.id] = BagState(bag, BagPolicy(self.defaults, bag.attributes))
        return state

    def _value(self, attribute: str, state: BagState) -> Any:
        fixed = state.policy.constants.get(attribute, _UNSET)
        if fixed is not _UNSET:
            return fixed
        self.evaluations[attribute] += 1
        return self.refs[attribute].eval(self.ads.top)  # type: ignore[union-attr]

    def holds(self, attribute: str, state: BagState) -> bool:
        """A requirement, in the ads as set: a boolean (a number: not 0); anything else falls back to false."""
        value = self._value(attribute, state)
        b = as_boolean(value)
        if b is None:
            self.fallbacks.note(attribute, state.policy.trees[attribute], value, BOOLEAN_FALLBACK, state.bag.id)
            return BOOLEAN_FALLBACK
        return b

    def number(self, attribute: str, state: BagState, fallback: float) -> float:
        """A number, in the ads as set; anything else falls back to ``fallback``."""
        if attribute not in state.policy.trees:
            return fallback
        value = self._value(attribute, state)
        x = as_number(value)
        if x is None:
            self.fallbacks.note(attribute, state.policy.trees[attribute], value, fallback, state.bag.id)
            return fallback
        return x

    def in_tail(self, state: BagState) -> bool:
        """Tail detection: the bag's queue holds fewer than ``tail_threshold`` jobs (``tail_sticky``: or did once)."""
        if state.tail and self.options.tail_sticky:
            return True
        tail = state.queue_length() < self.options.tail_threshold
        if tail and not state.tail:
            self.counts["tail_starts"] += 1
        state.tail = tail
        return tail

    def _pending_total(self) -> int:
        return sum(len(s.pending) for s in self.states.values())

    # ------------------------------------------------------------------ Algorithm 1: each request

    def dispatch(self, view: View, new_job: JobRecord | None, asking: MachineRecord | None) -> Decisions:
        if new_job is not None and new_job.bag is None:
            raise ValueError(f"policy {self.name} schedules Bags of Tasks; job {new_job.id} has no bag")
        if view is not self.view:
            self._attach(view)
        arm: Decision | None = None
        if not self.armed and view.bags:
            self.armed = True
            arm = SetTimer(CYCLE, view.now + self.options.cycle)
        # A host that got nothing stays asking; it is asked again when work enters a queue, when capacity changes,
        # or at the next cycle (a pull client asking again), else only when it asks anew.
        wake = (self.wake or new_job is not None or view.queued_count > self.queued_seen
                or view.capacity_version != self.capacity_seen)
        if not view.ready_count or (asking is None and not wake):
            self.queued_seen = view.queued_count
            return (arm,) if arm is not None else NOTHING
        return self._requests(view, arm, wake, asking)

    def _requests(self, view: View, arm: Decision | None, wake: bool,
                  asking: MachineRecord | None) -> Iterator[Decision]:
        if arm is not None:
            yield arm
        self.wake = False
        self.capacity_seen = view.capacity_version
        hosts = view.ready_machines() if wake or asking is None else [asking]
        for m in hosts:
            if m.asking:
                yield from self.algorithm1(view, m)
        self.queued_seen = view.queued_count

    def algorithm1(self, view: View, m: MachineRecord) -> Iterator[Decision]:
        """Serve host ``m``'s request: the candidates, by Rank; at most Concurrency jobs on the host; deadlines."""
        if not view.queued_count and not self._pending_total():
            return
        self.counts["requests"] += 1
        ads = self.ads
        assert ads is not None
        ads.host(m)
        ads.queue(self._pending_total())
        candidates: list[tuple[Any, ...]] = []
        for order, bag in enumerate(view.bags.values()):
            state = self._state(bag)
            pending = state.pending_jobs()
            head = bag.queue.head
            if head is None and not pending:
                continue
            ads.bag(state, self.in_tail(state), len(pending))
            if not self.holds(GRID_POLICY, state):
                continue
            if head is not None:
                if self.per_job:
                    for job in bag.queue:
                        self._consider(candidates, m, state, order, _QUEUED, job, False)
                else:  # the paper's section 6.4: a bag's waiting tasks are alike, evaluated once, as its head
                    self._consider(candidates, m, state, order, _QUEUED, head, True)
            for job in dict.fromkeys(pending):  # (a job with two pending replicas is one candidate)
                if len(job.replicas) < self.max_replicas and all(r.machine != m.index for r in job.replicas.values()):
                    self._consider(candidates, m, state, order, _PENDING, job, False)
        if not candidates:
            return
        candidates.sort(key=lambda c: c[:4])
        bound = candidates[0][4]
        for _, _, _, _, concurrency, deadline, state, job, whole in candidates:
            bound = min(bound, concurrency)
            # The paper prints "If Concurrency < assigned + #running jobs on h": the bound, inverted (POLICIES.md).
            if not m.asking or len(m.replicas) >= bound:
                return
            if whole:  # the bag's waiting tasks, in queue order (those assigned leave the queue as it is read)
                for task in state.bag.queue:
                    if not m.asking or len(m.replicas) >= bound:
                        return
                    if m.rates[task.job_class] > 0.0:
                        yield Assign(task.job, m.index)
                        self._sent(task, deadline)
            elif job.status is JobStatus.QUEUED or (
                    job.status is JobStatus.RUNNING and len(job.replicas) < self.max_replicas
                    and all(r.machine != m.index for r in job.replicas.values())):
                pending = job.status is JobStatus.RUNNING
                yield Assign(job.job, m.index)
                self._sent(job, deadline)
                if pending:
                    state.sent(job)
                    self.counts["replicas_sent"] += 1

    def _consider(self, candidates: list[tuple[Any, ...]], m: MachineRecord, state: BagState, order: int, kind: int,
                  job: JobRecord, whole: bool) -> None:
        """Evaluate ``job`` for host ``m`` (the host, bag and queue ads set); a candidate if its requirements hold."""
        if not whole and m.rates[job.job_class] <= 0.0:
            return
        self.ads.job(job)  # type: ignore[union-attr]
        if not self.holds(JOB_REQUIREMENTS, state):
            return
        rank = self.number(RANK, state, RANK_FALLBACK)
        concurrency = self.number(CONCURRENCY, state, float(m.cpus))
        deadline = self.number(DEADLINE, state, NO_DEADLINE) if state.policy.has_deadline else NO_DEADLINE
        candidates.append((-rank, order, self.kinds[kind], len(candidates), concurrency, deadline, state, job, whole))

    def _sent(self, job: JobRecord, deadline: float) -> None:
        """A replica of ``job`` was just sent (the core applied the Assign): stamp its deadline."""
        self.counts["sent"] += 1
        if deadline < NO_DEADLINE:
            r = job.history[-1]
            heapq.heappush(self.deadlines, (r.sent + max(0.0, deadline), r.id))

    # ------------------------------------------------------------------ Algorithm 2: the replication cycle

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if key != CYCLE:
            return super().on_timer(view, key)
        self.armed = False
        return self.algorithm2(view)

    def algorithm2(self, view: View) -> Iterator[Decision]:
        """The replication cycle: replicas past their deadline, then speculative replicas for bags running low."""
        if view is not self.view:
            self._attach(view)
        now = view.now
        self.wake = True  # every waiting host is asked again after the cycle
        for gone in [b for b in self.states if b not in view.bags]:
            del self.states[gone]
        deadlines = self.deadlines
        while deadlines and deadlines[0][0] < now:
            _, rid = heapq.heappop(deadlines)
            r = view.live.get(rid)
            if r is None or r.job.status is not JobStatus.RUNNING:
                continue  # ended, or a loser of a job already done
            job = r.job
            yield TimeOut(rid)  # "mark j as failed": the host's error; its result, if it comes, still counts once
            self.counts["deadline_expired"] += 1
            if job.status is JobStatus.RUNNING and job.bag is not None:  # (left with none: the core requeued it)
                state = self._state(job.bag)
                state.pending_jobs()
                if state.copies(job) < self.max_replicas:
                    state.enqueue(job)
                    self.counts["replicas_enqueued"] += 1
        self._speculate(view)
        if view.bags or deadlines:
            self.armed = True
            yield SetTimer(CYCLE, now + self.options.cycle)

    def _speculate(self, view: View) -> None:
        """Replicas for the bags whose queue runs low: running jobs in a weighted sample, each whose
        ReplicationRequirements holds, until the queue is full again."""
        ads = self.ads
        assert ads is not None
        below = self.replicate_below
        prepared = False
        for bag in view.bags.values():
            state = self._state(bag)
            if state.queue_length() >= below or state.policy.constants.get(REPLICATION_REQUIREMENTS) is False:
                continue
            state.pending_jobs()
            rng = self.rng
            draws = []
            for job in bag.running.values():
                copies = state.copies(job)
                if copies < self.max_replicas:
                    # Efraimidis and Spirakis: u^(1/w) with w = 1 / copies, the largest first, is a weighted sample
                    # without replacement: the fewer replicas a job has, the likelier it comes early
                    draws.append((-(rng.random() ** copies), len(draws), job))
            if not draws:
                continue
            draws.sort(key=lambda d: d[:2])
            if not prepared:
                ads.no_host()
                ads.queue(self._pending_total())
                prepared = True
            for _, _, job in draws:
                if state.queue_length() >= below:
                    break
                ads.bag(state, self.in_tail(state), len(state.pending))
                ads.job(job)
                if self.holds(REPLICATION_REQUIREMENTS, state):
                    state.enqueue(job)
                    self.counts["replicas_enqueued"] += 1


register(GridBot)
