"""LPAS_DG: LP-based affinity scheduling for desktop grids (Al-Azzoni & Down; MGST section 4.1)."""

from __future__ import annotations

import logging
import math
import random
import typing
from collections.abc import Hashable, Sequence

from mypy_extensions import mypyc_attr

from mgst.core.decisions import SetTimer
from mgst.core.state import JobQueue, JobRecord, MachineRecord
from mgst.core.view import View
from mgst.policies import register
from mgst.policies.allocation import Allocation, AllocationError, solve_allocation
from mgst.policies.base import NOTHING, Decisions, Policy
from mgst.policies.lpas_options import LpasOptions

log = logging.getLogger(__name__)

_RESOLVE: typing.Final = ("lpas_dg", "resolve")
_DEBOUNCED: typing.Final = ("lpas_dg", "debounced")  # the re-solve a debounced capacity change waits for


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (mgst.build_info); researchers subclass it
class LpasDG(Policy):
    """LPAS_DG: machines serve the classes the allocation LP gives them, the most overdue first.

    - The allocation LP is solved over the machines that are up (a machine that
      is down has a_j = 0), at start and whenever a machine goes up or down or
      its a_j changes; optionally also every ``resolve_period``. With ``resolve_debounce``, such
      a change re-solves at most once per that interval (at its end), unless it leaves a class
      with a positive arrival rate no eligible machine that is up: then at once.
    - Class i is eligible on machine j iff delta*_ij > tolerance.
    - A machine j that asks gets the head-of-line job of the eligible, non-empty
      class i maximising mu_ij * D_i(t), with mu_ij = mu'_ij a_j and D_i(t) the
      head job's waiting time since submission (a resubmitted job keeps its
      submission time). a_j is the same for every class on machine j, so the
      argmax is taken over mu'_ij * D_i(t). Ties go to the lower class index.
    - Server choice is the core's rotating ready queue: an arriving job goes to
      the first waiting machine eligible for it; a machine that can take none of
      the queued jobs moves to the back.
    """

    name = "lpas_dg"
    hooks = frozenset({"start", "on_capacity_change", "on_timer", "choose", "choose_groups"})
    Options = LpasOptions

    def __init__(self, options: LpasOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)  # None: the class's Options() (a subclass may have its own)
        self.allocation: Allocation | None = None
        self.eligible: tuple[tuple[bool, ...], ...] = ()
        self._classes_of: list[list[int]] = []  # per machine: its eligible classes
        self._group_of: list[int] = []  # per machine: an id of its set of eligible classes
        self._machines_of: list[list[int]] = []  # per class: its eligible machines
        self._solved_at = -math.inf  # model time of the last solve
        self._debounced = False  # a capacity change waits for the debounced re-solve
        # Each class's queue (None: none yet), as of the core's queues and queues_version below:
        # choose() reads a list, not the dict, once per class of the machine at every offer.
        self._queue_of: list[JobQueue | None] = []
        self._queues_seen: dict[Hashable, JobQueue] | None = None
        self._queues_version = -1
        self.solves = 0

    @property
    def lp_options(self) -> LpasOptions:
        """``self.options``, typed as this policy's (a compiled subclass may not narrow the attribute)."""
        return typing.cast(LpasOptions, self.options)

    def start(self, view: View) -> Decisions:
        self._solve(view)
        if self.lp_options.resolve_period is not None:
            return (SetTimer(_RESOLVE, view.now + self.lp_options.resolve_period),)
        return NOTHING

    def on_capacity_change(self, view: View) -> Decisions:
        debounce = self.lp_options.resolve_debounce
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

    def on_timer(self, view: View, key: Hashable) -> Decisions:
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
        rates = tuple(tuple(m.rates[i] for m in view.machines) for i in range(len(view.classes)))
        # A class that no up machine can run would make lambda* = 0 and leave every
        # class without an eligible machine; plan for the others and let it wait.
        alpha = tuple(
            c.arrival_rate if any(r > 0.0 and a > 0.0 for r, a in zip(rates[i], share)) else 0.0
            for i, c in enumerate(view.classes)
        )
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
        rates = machine.rates
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


register(LpasDG)  # a call, not a class decorator: mypyc compiles only undecorated classes natively
