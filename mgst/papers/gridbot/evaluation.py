"""The bags of one GridBot run and the evaluation of their expressions: the ads set (mgst.papers.gridbot.ads), a bag's
expression evaluated through a reference from the top ad, its value converted or the attribute's fallback used
(counted, logged once), and tail detection."""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Mapping
from typing import Any

from mgst.core.state import BagRecord, JobRecord
from mgst.core.view import View
from mgst.papers.gridbot.ads import Ads
from mgst.papers.gridbot.bags import BagPolicy, BagState
from mgst.papers.gridbot.classads import (
    BOOLEAN_FALLBACK,
    CONCURRENCY,
    DEADLINE,
    JOB_REQUIREMENTS,
    NO_DEADLINE,
    POLICY_ATTRIBUTES,
    Fallbacks,
    as_boolean,
    as_concurrency,
    as_deadline,
    as_number,
)

log = logging.getLogger(__name__)


class Evaluation:
    """One run's bags (a :class:`BagState` each, made at its first sight from its attributes over ``defaults``), its
    ads, and the evaluation of the bags' expressions in them.

    ``evaluations`` counts the expressions evaluated, by attribute (a constant is not evaluated: it was, once, when
    the bag's policy was made); ``fallbacks`` those that gave no value of the attribute's type.
    """

    def __init__(self, view: View, defaults: Mapping[str, Any], tail_threshold: int, tail_sticky: bool,
                 counts: dict[str, int], per_job: bool = False):
        self.view = view
        # Whether each waiting task's JobRequirements is evaluated (evaluate = "job"); if not, a bag whose
        # JobRequirements reads the job is warned of once a run (its other tasks go where the first's holds).
        self.warn_per_bag = not per_job
        self.ads = Ads(view)
        self.defaults = dict(defaults)
        self.tail_threshold = tail_threshold
        self.tail_sticky = tail_sticky
        self.counts = counts  # the policy's counts (tail_starts here)
        self.states: dict[int, BagState] = {}
        self.evaluations = dict.fromkeys(POLICY_ATTRIBUTES, 0)
        self.fallbacks = Fallbacks()

    def state(self, bag: BagRecord) -> BagState:
        state = self.states.get(bag.id)
        if state is None:
            state = self.states[bag.id] = BagState(bag, BagPolicy(self.defaults, bag.attributes))
            if self.warn_per_bag and state.policy.requirements_read_job:
                self.warn_per_bag = False
                log.warning("gridbot: bag %d's JobRequirements %s reads the job (Job.*), but evaluate = \"bag\" checks "
                            "it once a request for the bag's first waiting task, and sends its other tasks with it: "
                            "set evaluate = \"job\" in [policy] to check each task (logged once)", bag.id,
                            state.policy.trees[JOB_REQUIREMENTS])
        return state

    def forget_completed(self) -> None:
        """Drop the states of the bags that completed."""
        bags = self.view.bags
        for gone in [b for b in self.states if b not in bags]:
            del self.states[gone]
            self.ads.forget(gone)

    def pending_total(self) -> int:
        """Pending replicas over every bag."""
        return sum(len(s.pending_jobs()) for s in self.states.values())

    def in_tail(self, state: BagState, note: bool = True) -> bool:
        """Tail detection: the bag's queue holds fewer than ``tail_threshold`` jobs (``tail_sticky``: or did once).
        Without ``note``, a look that changes nothing (the overlay's, which no input of the core makes: a replay of
        the run, which feeds the core its inputs alone, must find the same tails)."""
        if state.tail and self.tail_sticky:
            return True
        tail = state.queue_length() < self.tail_threshold
        if note:
            if tail and not state.tail:
                self.counts["tail_starts"] += 1
            state.tail = tail
        return tail

    def set_bag(self, state: BagState, note: bool = True) -> None:
        """The top ad's ``Bag``: the bag's ad, its Tail as detected now (``note``: see in_tail)."""
        self.ads.bag(state, self.in_tail(state, note), len(state.pending_jobs()))

    def set_job(self, state: BagState, job: JobRecord, expired: Container[int], cycle: bool = False) -> None:
        """The top ad's ``Job``, if the bag's expressions about to be evaluated read it (else whatever is there is
        never read): those of a request, or with ``cycle`` its ReplicationRequirements."""
        if state.policy.cycle_reads_job if cycle else state.policy.reads_job:
            self.ads.job(job, expired, state)

    def _value(self, attribute: str, state: BagState) -> Any:
        """The attribute's value (the bag's ad set in the top ad: :meth:`set_bag`)."""
        constants = state.policy.constants
        if attribute in constants:
            return constants[attribute]
        self.evaluations[attribute] += 1
        return state.refs[attribute].eval(self.ads.top)

    def _typed(self, attribute: str, state: BagState, convert: Callable[[Any], Any], fallback: Any,
               why: str = "", note: bool = True) -> Any:
        """The attribute's value as ``convert`` reads it; ``fallback`` (logged, and counted unless ``note`` is False:
        see in_tail) where it reads None (``why``: what a value of the right type must be, for the log)."""
        value = self._value(attribute, state)
        typed = convert(value)
        if typed is None:
            if why and as_number(value) is None:
                why = ""  # (no number at all: the type says why)
            self.fallbacks.note(attribute, state.policy.trees[attribute], value, fallback, state.bag.id, why,
                                counted=note)
            return fallback
        return typed

    def holds(self, attribute: str, state: BagState, note: bool = True) -> bool:
        """A requirement of ``state``'s bag, in the ads as set: a boolean (a number: not 0); else false (logged, and
        counted unless ``note`` is False: see in_tail)."""
        return self._typed(attribute, state, as_boolean, BOOLEAN_FALLBACK, note=note)

    def number(self, attribute: str, state: BagState, fallback: float) -> float:
        """A number of ``state``'s bag, in the ads as set; ``fallback`` if it is not one (counted), or if the bag has
        no such expression (Deadline)."""
        if attribute not in state.policy.trees:
            return fallback
        return self._typed(attribute, state, as_number, fallback)

    def concurrency(self, state: BagState, cpus: int) -> float:
        """``state``'s bag's Concurrency, in the ads as set: a number >= 1; the host's ``cpus`` (the default) if the
        bag has no such expression, and, counted and logged as a fallback, if it gives no number or one below 1
        (no host would take a job of it, nor of any bag ranked below it: the run starved, and said nothing)."""
        if CONCURRENCY not in state.policy.trees:
            return float(cpus)
        return self._typed(CONCURRENCY, state, as_concurrency, float(cpus), "not a job count >= 1")

    def deadline(self, state: BagState) -> float:
        """``state``'s bag's Deadline, in the ads as set: a number > 0; none (NO_DEADLINE) if the bag has no Deadline,
        and, counted and logged as a fallback, if it gives no number or one <= 0 (a replica past its deadline as it
        is sent: the expression is wrong, not the replica late)."""
        if DEADLINE not in state.policy.trees:
            return NO_DEADLINE
        return self._typed(DEADLINE, state, as_deadline, NO_DEADLINE, "not a time span > 0")
