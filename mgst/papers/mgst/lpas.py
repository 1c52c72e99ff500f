"""LPAS_DG: LP-based affinity scheduling for desktop grids (Al-Azzoni & Down; MGST section 4.1)."""

from __future__ import annotations

import logging
import math
import random
import typing
from collections.abc import Hashable, Sequence

from mypy_extensions import mypyc_attr

from mgst.core.decisions import Decision, SetTimer
from mgst.core.events import Event, JobArrived
from mgst.core.state import JobQueue, JobRecord, MachineRecord, ReplicaRecord
from mgst.core.view import View
from mgst.papers.mgst.lpas_fixes import LpasFixes
from mgst.papers.mgst.lpas_options import LpasOptions
from mgst.policies import register
from mgst.policies.allocation import Allocation, AllocationError, solve_allocation
from mgst.policies.base import NOTHING, Decisions, Policy

log = logging.getLogger(__name__)

_RESOLVE: typing.Final = ("lpas_dg", "resolve")
_DEBOUNCED: typing.Final = ("lpas_dg", "debounced")  # the re-solve a debounced capacity change waits for
_ARRIVALS: typing.Final = ("lpas_dg", "arrivals")  # arrival_check_period's check
# The re-solve a completion asks for (a learnt rate or p_ij moved), due at once: a timer is followed by the
# core's full matching pass, so that every ready machine is offered work under the new plan (the matching
# after a completion offers the asking machine alone).
_LEARNT: typing.Final = ("lpas_dg", "learnt")
# resolve_debounce = "auto" debounces from this many machines: each solve then takes 10 ms or more (17 ms at 1,000
# machines, 34 ms at 3,000, one class), every machine up or down makes one, and a mapper solving at each of
# thousands of hellos falls silent long enough for its pullers to give it up (docs/benchmarks.md).
AUTO_DEBOUNCE_MACHINES: typing.Final = 500
# ... to at most one solve per this fraction of the shortest mean job time (a plan a tenth of a job late).
AUTO_DEBOUNCE_JOB_FRACTION: typing.Final = 0.1


def auto_debounce(view: View) -> float | None:
    """resolve_debounce = "auto": None (every change re-solves) below AUTO_DEBOUNCE_MACHINES machines; from
    there, AUTO_DEBOUNCE_JOB_FRACTION of the shortest mean job time of any class on any machine (granularity
    over mu'_ij), or None if no machine can run any class."""
    if len(view.machines) < AUTO_DEBOUNCE_MACHINES:
        return None
    fastest = math.inf
    for i, c in enumerate(view.classes):
        top = max((m.rates[i] for m in view.machines), default=0.0)
        if top > 0.0:
            fastest = min(fastest, c.granularity / top)
    return AUTO_DEBOUNCE_JOB_FRACTION * fastest if math.isfinite(fastest) else None


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (mgst.build_info); researchers subclass it
class LpasDG(Policy):
    """LPAS_DG: machines serve the classes the allocation LP gives them, the most overdue first.

    - The allocation LP is solved over the machines that are up (a machine that
      is down has a_j = 0), at start and whenever a machine goes up or down or
      its a_j changes; optionally also every ``resolve_period``. With ``resolve_debounce``, such
      a change re-solves at most once per that interval (at its end), unless it leaves a class
      with a positive arrival rate no eligible machine that is up: then at once. Its default,
      "auto", debounces from AUTO_DEBOUNCE_MACHINES machines only (auto_debounce).
    - Class i is eligible on machine j iff delta*_ij > tolerance.
    - A machine j that asks gets the head-of-line job of the eligible, non-empty
      class i maximising mu_ij * D_i(t), with mu_ij = mu'_ij a_j and D_i(t) the
      head job's waiting time since submission (a resubmitted job keeps its
      submission time). a_j is the same for every class on machine j, so the
      argmax is taken over mu'_ij * D_i(t). Ties go to the lower class index.
    - Server choice is the core's rotating ready queue: an arriving job goes to
      the first waiting machine eligible for it; a machine that can take none of
      the queued jobs moves to the back.
    - MGST section 4.3's fixes, each an option and off by default (mgst.papers.mgst.lpas_fixes):
      arrival-rate checks, learnt rates, delay correction, time-outs with suspicion, LPAS's
      server choice, periodic re-solves only (docs/policies.md).
    """

    name = "lpas_dg"
    hooks = frozenset({"start", "on_capacity_change", "on_timer", "choose", "choose_groups",
                       "on_event", "on_replica_start", "on_replica_end"})
    Options = LpasOptions

    @classmethod
    def check_experiment(cls, experiment: typing.Any) -> None:
        """Called when an experiment file is loaded: ValueError if no class has an arrival rate (a Bag-of-Tasks
        workload, say) and the rates are not measured either (arrival_check_period): the LP would then give every
        class no machine, and no job would ever run."""
        if any(rate > 0.0 for rate in experiment.arrival_rates):
            return
        if experiment.policy.options.get("arrival_check_period") is not None:
            return
        raise ValueError(f"policy {cls.name} gives each job class machines by its arrival rate (its LP), and no class "
                         f"of this workload ({type(experiment.workload).__name__}) has one: no job would run. Use a "
                         "policy that needs no arrival rates (fcfs, a Bag-of-Tasks policy: 'mgst policies'), or "
                         "measure the rates as jobs arrive (arrival_check_period)")

    def __init__(self, options: LpasOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)  # None: the class's Options() (a subclass may have its own)
        self.allocation: Allocation | None = None
        self.eligible: tuple[tuple[bool, ...], ...] = ()
        # The last LP's inputs: rates (classes x machines) and arrival rates
        self.lp_rates: tuple[tuple[float, ...], ...] = ()
        self.lp_alpha: tuple[float, ...] = ()
        self._classes_of: list[list[int]] = []  # per machine: its eligible classes
        self._group_of: list[int] = []  # per machine: an id of its set of eligible classes
        self._machines_of: list[list[int]] = []  # per class: its eligible machines
        self._solved_at = -math.inf  # model time of the last solve
        self._debounced = False  # a capacity change waits for the debounced re-solve
        self.debounce: float | None = None  # resolve_debounce in time units, as start() settled "auto" (None: off)
        # Each class's queue (None: none yet), as of the core's queues and queues_version below:
        # choose() reads a list, not the dict, once per class of the machine at every offer.
        self._queue_of: list[JobQueue | None] = []
        self._queues_seen: dict[Hashable, JobQueue] | None = None
        self._queues_version = -1
        self.solves = 0
        # The fixes' state (None: every fix off, the belief is the file's: the paper's policy)
        self.fixes: LpasFixes | None = LpasFixes(self.lp_options) if self.lp_options.fixes else None
        # The believed mu'_ij by machine (None: the machines' nominal rates)
        self._belief: list[tuple[float, ...]] | None = None
        # choose()'s mu_ij by machine then class: the believed mu'_ij over the class's mean size X_i (jobs per time
        # unit; the paper's classes have X_i = 1), as of the last solve (which follows every change of the belief)
        self._job_rates: list[tuple[float, ...]] = []

    @property
    def lp_options(self) -> LpasOptions:
        """``self.options``, typed as this policy's (a compiled subclass may not narrow the attribute)."""
        return typing.cast(LpasOptions, self.options)

    def active_hooks(self, declared: frozenset[str]) -> frozenset[str]:
        """The fixes' hooks only when their options are on: with every fix off, the paper's policy costs
        what it did."""
        o = self.lp_options
        unused: set[str] = set()
        if o.arrival_check_period is None and o.server_choice == "fcfs" and o.timeout_factor is None:
            unused.add("on_event")
        if o.timeout_factor is None:
            unused.add("on_replica_start")
        if o.rate_threshold is None and not o.delay_correction and o.timeout_factor is None:
            unused.add("on_replica_end")
        return declared - unused

    def start(self, view: View) -> Decisions:
        o = self.lp_options
        if self.fixes is not None:
            self.fixes.begin(view)
            self._belief = self.fixes.belief
        self.debounce = self._settle_debounce(view)
        self._solve(view)
        timers: list[SetTimer] = []
        if o.resolve_period is not None:
            timers.append(SetTimer(_RESOLVE, view.now + o.resolve_period))
        if o.arrival_check_period is not None:
            timers.append(SetTimer(_ARRIVALS, view.now + o.arrival_check_period))
        return timers

    def _settle_debounce(self, view: View) -> float | None:
        """resolve_debounce in time units for this run (None: every capacity change re-solves)."""
        value = self.lp_options.resolve_debounce
        if value == "auto":
            if not self.lp_options.resolve_on_events:  # (nothing to debounce: T_system re-solves on its period)
                return None
            debounce = auto_debounce(view)
            if debounce is not None:
                log.info("lpas_dg: %d machines: at most one re-solve per %.4g time units when machines go up or "
                         "down (resolve_debounce = \"auto\"; a number sets it, \"off\" re-solves at every change, "
                         "as the paper)", len(view.machines), debounce)
            return debounce
        return None if value is None or value == "off" else float(value)

    def on_capacity_change(self, view: View) -> Decisions:
        if not self.lp_options.resolve_on_events:  # T_system: the periodic re-solve takes the change in
            if self._starved(view):  # ... unless the plan leaves a class nothing that is up
                self._solve(view)
            return NOTHING
        debounce = self.debounce
        if debounce is None or view.now >= self._solved_at + debounce or self._starved(view):
            self._solve(view)
            return NOTHING
        if self._debounced:
            return NOTHING
        self._debounced = True
        return (SetTimer(_DEBOUNCED, self._solved_at + debounce),)

    def _starved(self, view: View) -> bool:
        """Whether the plan leaves some class with a positive arrival rate no eligible machine that is up,
        while one that is up could run it (so that re-solving helps)."""
        machines = view.machines
        for i, c in enumerate(view.classes):
            if c.arrival_rate <= 0.0:
                continue
            if any(machines[j].is_up for j in self._machines_of[i]):
                continue
            if any(m.is_up and m.rates[i] > 0.0 for m in machines):
                return True
        return False

    def on_event(self, view: View, event: Event) -> Decisions:
        fixes = self.fixes
        if fixes is None:
            return NOTHING
        fixes.on_event(view, event)
        if type(event) is JobArrived and self.lp_options.server_choice == "lpas":
            c = event.job.job_class  # type: ignore[union-attr]
            return fixes.holds_for(view, c, self.eligible[c])
        return NOTHING

    def on_replica_start(self, view: View, replica: ReplicaRecord) -> Decisions:
        fixes = self.fixes
        if fixes is None or fixes.timeouts is None:
            return NOTHING
        return fixes.timeouts.on_replica_start(view, replica)

    def on_replica_end(self, view: View, replica: ReplicaRecord) -> Decisions:
        fixes = self.fixes
        if fixes is None:
            return NOTHING
        if replica.late:
            fixes.late_result(replica)
        decisions: list[Decision] = []
        if fixes.learn(view, replica) and _LEARNT not in view.timers:
            decisions.append(SetTimer(_LEARNT, view.now))
        if fixes.timeouts is not None:
            decisions.extend(fixes.timeouts.on_replica_end(view, replica))
        return decisions

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        fixes = self.fixes
        if fixes is not None and fixes.timeouts is not None and fixes.timeouts.owns(key):
            return fixes.timed_out(view, fixes.timeouts.on_timer(view, key))
        if key == _LEARNT:
            if fixes is not None:
                self._belief = fixes.belief
                self._solve(view)
            return NOTHING
        if key == _ARRIVALS:
            if fixes is None or self.lp_options.arrival_check_period is None:
                return NOTHING
            if fixes.check_arrivals(view):
                self._solve(view)
            return (SetTimer(_ARRIVALS, view.now + self.lp_options.arrival_check_period),)
        if key == _DEBOUNCED:
            if self._debounced:  # (else a change since solved at once)
                self._solve(view)
            return NOTHING
        if key != _RESOLVE:
            return super().on_timer(view, key)
        if self.lp_options.resolve_period is None:
            return NOTHING
        self._solve(view)
        return (SetTimer(_RESOLVE, view.now + self.lp_options.resolve_period),)

    def _solve(self, view: View) -> None:
        reported = self.lp_options.reported_share
        share = tuple(
            (m.cpu_share if reported else m.availability) if m.is_up else 0.0 for m in view.machines
        )
        sizes = [c.granularity for c in view.classes]
        belief = self._belief
        self._job_rates = [
            tuple(r / x for r, x in zip(m.rates if belief is None else belief[m.index], sizes)) for m in view.machines
        ]
        # The LP's rates are jobs per time unit (mu'_ij over X_i: the paper's classes have X_i = 1)
        if self.fixes is None:
            rates = tuple(tuple(m.rates[i] / x for m in view.machines) for i, x in enumerate(sizes))
            believed = tuple(c.arrival_rate for c in view.classes)
        else:
            rates, believed = self.fixes.lp_inputs(view, share)
        # A class that no up machine can run would make lambda* = 0 and leave every
        # class without an eligible machine; plan for the others and let it wait.
        alpha = tuple(
            believed[i] if any(r > 0.0 and a > 0.0 for r, a in zip(rates[i], share)) else 0.0
            for i in range(len(view.classes))
        )
        self.lp_rates = rates
        self.lp_alpha = alpha
        try:
            self.allocation = solve_allocation(rates, alpha, share, self.lp_options.lp_method)
        except AllocationError as err:
            raise AllocationError(f"lpas_dg at time {view.now:g}: {err}", err.argument) from None
        self.eligible = self.allocation.eligible(self.lp_options.tolerance)
        self._classes_of = [
            [i for i in range(len(self.eligible)) if self.eligible[i][j]] for j in range(len(view.machines))
        ]
        ids: dict[tuple[int, ...], int] = {}
        self._group_of = [ids.setdefault(tuple(c), len(ids)) for c in self._classes_of]
        self._machines_of = [[j for j, e in enumerate(row) if e] for row in self.eligible]
        self._solved_at = view.now
        self._debounced = False
        self.solves += 1
        log.debug("t=%s allocation LP: lambda*=%.4f eligible=%s", view.now, self.allocation.lam, self.eligible)

    def choose_groups(self, view: View) -> Sequence[Hashable] | None:
        """By eligible classes: choose() refuses a machine iff their queues are all empty."""
        return self._group_of

    def choose(self, view: View, machine: MachineRecord) -> JobRecord | None:
        if view.queues_version != self._queues_version or view.queues is not self._queues_seen:
            queues = view.queues
            self._queue_of = [queues.get(i) for i in range(len(view.classes))]
            self._queues_seen = queues
            self._queues_version = view.queues_version
        queue_of = self._queue_of
        now = view.now
        rates = self._job_rates[machine.index]
        best: JobRecord | None = None
        best_value = -1.0
        for i in self._classes_of[machine.index]:
            q = queue_of[i]
            if q is not None and q.head is not None:
                head = q.head
                value = rates[i] * (now - head.job.submitted)
                if value > best_value:
                    best, best_value = head, value
        return best

    def report(self) -> dict[str, float]:
        """The fixes' counts (solves: every LP solve; the others: docs/policies.md); {} with every fix off."""
        if self.fixes is None:
            return {}
        return {"solves": self.solves, **self.fixes.report()}


register(LpasDG)  # a call, not a class decorator: mypyc compiles only undecorated classes natively
