"""GridBot's work dispatch (Silberstein et al., section 4.2): Algorithm 1 on every request, Algorithm 2 on a periodic
replication cycle (mgst.papers.gridbot.replication), and tail detection; each bag's policy is ClassAd expressions.

A replica past its deadline is not given up on with the core's ``TimeOut``: that frees its slot and CPU in the core
while the host still runs it (a pull client never learns of its deadline), so a host would compute more than its
CPUs, and one that waited for a CPU would hold its slot in the simulator for good. It runs on, marked expired
(``Job.Expired``), and its job gets a new replica; the host's ErrorRate does not count the miss.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Hashable, Iterator
from typing import Any, Final

from mgst.core.decisions import Assign, Decision, SetTimer
from mgst.core.state import BagRecord, JobRecord, JobStatus, MachineRecord
from mgst.core.view import View
from mgst.papers.gridbot.ads import hostless_reference, unknown_reference
from mgst.papers.gridbot.bags import BagState, check_bag_attributes, misspelt, policy_attribute
from mgst.papers.gridbot.classads import (
    GRID_POLICY,
    JOB_REQUIREMENTS,
    POLICY_ATTRIBUTES,
    RANK,
    RANK_FALLBACK,
    REPLICATION_REQUIREMENTS,
    expression_text,
    parse,
)
from mgst.papers.gridbot.evaluation import Evaluation
from mgst.papers.gridbot.options import GridBotOptions
from mgst.papers.gridbot.replication import Replication
from mgst.policies import ExperimentKeyError, register
from mgst.policies.bag_workload import require_bag_workload
from mgst.policies.base import NOTHING, Decisions, Policy

log = logging.getLogger(__name__)

# The replication cycle's timer (a string and an int: the mapper's journal stores it).
CYCLE: Final = ("gridbot_cycle", 0)
# Where a candidate of Algorithm 1 comes from: a bag's waiting tasks, or a replica the cycle enqueued.
_QUEUED: Final = 0
_PENDING: Final = 1

Candidate = tuple[float, int, int, int, float, float, BagState, JobRecord, bool]


@register
class GridBot(Policy):
    """GridBot: each bag's policy is ClassAd expressions; Algorithm 1 per request, Algorithm 2 per cycle.

    - Algorithm 1, when a host asks: the candidates are the jobs whose ``JobRequirements`` hold (of the bags whose
      ``GridPolicy`` takes the host's grid), ordered by ``Rank``, highest first (ties: older bag, then the bag's
      pending replicas before its waiting tasks, ``replicas_first``, or after them; each in order); the host then
      holds at most the top candidate's ``Concurrency`` jobs, lowered by each candidate taken, and each job sent is
      stamped with its ``Deadline``.
    - Algorithm 2, every ``cycle``: a replica past its deadline is marked expired and its job gets a new replica
      (enqueued; the expired one runs on, its result still counts if it comes first); then, for a bag whose queue
      holds fewer than ``replicate_below`` jobs, its running jobs are drawn in a weighted sample (weight 1 / their
      replicas, from ``self.rng``) and each whose ``ReplicationRequirements`` holds gets a replica enqueued, until
      the queue is full again; a job never has more than ``max_replicas`` (live and pending).
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
        self.kinds = (1, 0) if o.replicas_first else (0, 1)  # the tie order of a bag's waiting tasks, its replicas
        self.counts = {"requests": 0, "sent": 0, "replicas_sent": 0, "deadline_expired": 0, "replicas_enqueued": 0,
                       "tail_starts": 0}
        self.view: View | None = None
        self.ev: Evaluation | None = None  # the run's bags, ads and evaluations (made when the run begins)
        self.replication = Replication(o.max_replicas, self.replicate_below, self.rng, self.counts)
        self.armed = False  # the cycle's timer is set
        self.wake = True  # ask every waiting host at the next dispatch
        self.queued_seen = -1  # the jobs waiting, and the capacity version, at the last dispatch
        self.capacity_seen = -1

    @classmethod
    def check_experiment(cls, experiment: Any) -> None:
        """When the file is loaded: a Bag-of-Tasks workload, and each bag's own expressions parse (the error names the
        bag and the attribute: ``workload.bags[2].attributes.Rank``)."""
        from mgst.model import BagList  # noqa: PLC0415 (only when an experiment is checked)

        require_bag_workload(cls.name, experiment)
        w = experiment.workload
        bag_lists = enumerate(w.attributes) if isinstance(w, BagList) else ()
        said: set[str] = set()
        try:
            for i, pairs in bag_lists:
                try:
                    check_bag_attributes(pairs)
                except ValueError as err:
                    name, _, problem = str(err).partition(": ")
                    raise ExperimentKeyError(f"workload.bags[{i}].attributes.{name}",
                                             f"bag {i} (at {w.bags[i][0]:g}): {problem}") from None
                for name, _ in pairs:  # (free-form, a bag's own: a slip for one GridBot reads is said, once a name)
                    meant = misspelt(name)
                    if meant is not None and name not in said:
                        said.add(name)
                        log.warning("workload.bags[%d].attributes.%s: not an attribute GridBot reads (did you mean "
                                    "%r?): it stays the bag's own, and the policy's %s stands for the bag's", i, name,
                                    meant, meant)
            cls._check_references(experiment)
        except ImportError as err:
            raise ExperimentKeyError("policy.name", f"the gridbot policy cannot run here: {err}") from None

    @staticmethod
    def _check_references(experiment: Any) -> None:
        """Each expression, [policy]'s and each bag's own, reads only attributes its ads have (a misspelt
        ``Job.Replikas`` is refused naming its key, not UNDEFINED at every evaluation of the run); a host's ad has
        the machine file's attributes too."""
        from mgst.model import BagList  # noqa: PLC0415 (only when an experiment is checked)

        host_attributes = dict.fromkeys(k for m in experiment.machines for k, _ in m.attributes)
        expressions = [(f"policy.{name}", "", name, value) for name, value in experiment.policy.options.items()
                       if name in POLICY_ATTRIBUTES and value is not None]
        w = experiment.workload
        if isinstance(w, BagList):
            for i, pairs in enumerate(w.attributes):
                for name, value in pairs:
                    canonical = policy_attribute(name)
                    if canonical is not None:
                        expressions.append((f"workload.bags[{i}].attributes.{name}",
                                            f"bag {i} (at {w.bags[i][0]:g}): the bag's ", canonical, value))
        for key, whose, name, value in expressions:
            tree = parse(value)
            problem = unknown_reference(tree, host_attributes)
            if problem is None and name == REPLICATION_REQUIREMENTS:
                problem = hostless_reference(tree)
            if problem is not None:
                raise ExperimentKeyError(key, f"{whose}{name} {expression_text(value)!r} {problem}")

    def report(self) -> dict[str, float]:
        out: dict[str, float] = dict(self.counts)
        if self.ev is not None:
            out["fallbacks"] = self.ev.fallbacks.total
            for name, n in self.ev.fallbacks.counts.items():
                if n:
                    out[f"fallbacks_{name}"] = n
        return out

    @property
    def evaluations(self) -> dict[str, int]:
        """Expressions evaluated so far, by attribute (constants are not)."""
        return self.ev.evaluations if self.ev is not None else dict.fromkeys(POLICY_ATTRIBUTES, 0)

    def _attach(self, view: View) -> None:
        """A new run drives this policy (one policy object serves one run)."""
        self.view = view
        o = self.options
        self.ev = Evaluation(view, self.defaults, o.tail_threshold, o.tail_sticky, self.counts,
                             per_job=self.per_job)
        self.replication = Replication(o.max_replicas, self.replicate_below, self.rng, self.counts)
        self.armed = False
        self.wake = True

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
        ev = self.ev
        assert ev is not None
        pending_total = ev.pending_total()
        if not view.queued_count and not pending_total:
            return
        self.counts["requests"] += 1
        ev.ads.host(m)
        ev.ads.queue(pending_total)
        candidates: list[Candidate] = []
        # A GridPolicy that reads only this host, its grid and the queue, by its tree: its value for this request
        # (the community grid's hosts, refused by every bag, cost one evaluation a request, not one a bag).
        per_host: dict[int, bool] = {}
        for order, bag in enumerate(view.bags.values()):
            state = ev.state(bag)
            pending = state.pending_jobs()
            head = bag.queue.head
            if head is None and not pending:
                continue
            shared = state.policy.grid_policy_per_host
            takes = per_host.get(id(shared)) if shared is not None else None
            if takes is False:
                ev.in_tail(state)  # (its tail noticed at this request all the same: a sticky tail decides later)
                continue
            ev.set_bag(state)
            if takes is None:
                takes = ev.holds(GRID_POLICY, state)
                if shared is not None:
                    per_host[id(shared)] = takes
            if not takes:
                continue
            if head is not None:
                if self.per_job:
                    for job in bag.queue:
                        self._consider(candidates, m, state, order, _QUEUED, job, False)
                else:  # the paper's section 6.4: a bag's waiting tasks are alike, evaluated once, as its head
                    self._consider(candidates, m, state, order, _QUEUED, head, True)
            for job in dict.fromkeys(pending):  # (a job with two pending replicas is one candidate)
                if self._takes_replica(job, m):
                    self._consider(candidates, m, state, order, _PENDING, job, False)
        if not candidates:
            return
        candidates.sort(key=lambda c: c[:4])
        bound = candidates[0][4]
        for _, _, _, _, concurrency, deadline, state, job, whole in candidates:
            bound = min(bound, concurrency)
            # The paper prints "If Concurrency < assigned + #running jobs on h": the bound, inverted (docs/readings.md).
            if not m.asking or len(m.replicas) >= bound:
                return
            if whole:  # the bag's waiting tasks, in queue order (those assigned leave the queue as it is read)
                for task in state.bag.queue:
                    if not m.asking or len(m.replicas) >= bound:
                        return
                    if m.rates[task.job_class] > 0.0:
                        yield Assign(task.job, m.index)
                        self._sent(task, deadline)
            elif job.status is JobStatus.QUEUED:
                yield Assign(job.job, m.index)
                self._sent(job, deadline)
            elif job.status is JobStatus.RUNNING and self._takes_replica(job, m):
                yield Assign(job.job, m.index)
                self._sent(job, deadline)
                state.sent(job)
                self.counts["replicas_sent"] += 1

    def _takes_replica(self, job: JobRecord, m: MachineRecord) -> bool:
        """Whether host ``m`` may run another replica of running ``job``: under the cap, and none of it there yet."""
        return len(job.replicas) < self.max_replicas and all(r.machine != m.index for r in job.replicas.values())

    def _consider(self, candidates: list[Candidate], m: MachineRecord, state: BagState, order: int, kind: int,
                  job: JobRecord, whole: bool) -> None:
        """Evaluate ``job`` for host ``m`` (the host, bag and queue ads set); a candidate if its requirements hold."""
        if not whole and m.rates[job.job_class] <= 0.0:
            return
        ev = self.ev
        assert ev is not None
        ev.set_job(state, job, self.replication.expired)
        if not ev.holds(JOB_REQUIREMENTS, state):
            return
        rank = ev.number(RANK, state, RANK_FALLBACK)
        concurrency = ev.concurrency(state, m.cpus)
        deadline = ev.deadline(state)
        candidates.append((-rank, order, self.kinds[kind], len(candidates), concurrency, deadline, state, job, whole))

    def _sent(self, job: JobRecord, deadline: float) -> None:
        """A replica of ``job`` was just sent (the core applied the Assign): its deadline stamped."""
        self.counts["sent"] += 1
        self.replication.stamp(job, deadline)

    # ------------------------------------------------------------------ the overlay's question

    def takes_grid(self, view: View, bag: BagRecord, grid: str) -> bool:
        """Whether ``bag``'s GridPolicy takes ``grid``, evaluated in the grid's ad alone (``Grid.Name``; ``Host`` is
        UNDEFINED): the simulator's overlay grows only the grids some queued bag may use (mgst.sim.overlay)."""
        if view is not self.view:
            self._attach(view)
        ev = self.ev
        assert ev is not None
        state = ev.state(bag)
        ev.ads.grid_only(grid)
        # A replay of a testbed run feeds the core its inputs alone and asks no overlay: this look starts no sticky
        # tail and counts no fallback (it logs one as any), so that what the policy decides and reports is the same.
        ev.set_bag(state, note=False)
        return ev.holds(GRID_POLICY, state, note=False)

    def held_jobs(self, view: View, bag: BagRecord) -> int:
        """The replicas of ``bag`` the cycle enqueued and not yet sent: GridBot's job queue holds them beside the
        bag's waiting tasks (the core's), so the overlay counts them as work for a grid (``overlay_demand =
        "queue"``; 0 with ``"tasks"``)."""
        if self.options.overlay_demand != "queue":
            return 0
        if view is not self.view:
            self._attach(view)
        ev = self.ev
        assert ev is not None
        state = ev.states.get(bag.id)
        return len(state.pending_jobs()) if state is not None else 0

    # ------------------------------------------------------------------ Algorithm 2: the replication cycle

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if key != CYCLE:
            return super().on_timer(view, key)
        if view is not self.view:
            self._attach(view)
        self.armed = False
        assert self.ev is not None
        self.replication.cycle(view, self.ev)
        self.wake = True  # every waiting host is asked again after the cycle (a pull client asking again)
        if view.bags or self.replication.deadlines:
            self.armed = True
            return (SetTimer(CYCLE, view.now + self.options.cycle),)
        return NOTHING
