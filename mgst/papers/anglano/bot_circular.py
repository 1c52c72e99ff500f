"""RR and RR-NRF (Anglano and Canonico): bags served in turn, in a circle kept across events."""

from __future__ import annotations

import itertools
import random

from mgst.core.state import BagRecord, JobRecord
from mgst.core.view import View
from mgst.papers.anglano.bot import BotOptions, BotPolicy
from mgst.policies import register


class Circle:
    """The incomplete bags in arrival order, and where the turn stands.

    ``next`` is the position after the bag served last (0 at first: the oldest
    bag). It may equal ``len(bags)``: the next bag is then the oldest, unless a
    bag arrives first, which joins the circle at the end and is next.
    """

    __slots__ = ("bags", "next", "seen")

    def __init__(self) -> None:
        self.bags: list[BagRecord] = []
        self.next = 0
        self.seen = 0  # how many of view.all_bags have joined

    def sync(self, view: View) -> None:
        """Add the bags that arrived, drop those that completed (the turn stays with the bag after)."""
        n = len(view.all_bags)
        if n != self.seen:
            fresh = itertools.islice(view.all_bags.values(), self.seen, None)
            self.bags.extend(bag for bag in fresh if bag.completed is None)
            self.seen = n
        if len(self.bags) != len(view.bags):  # the circle holds every incomplete bag: some completed
            keep: list[BagRecord] = []
            after = self.next
            for i, bag in enumerate(self.bags):
                if bag.completed is None:
                    keep.append(bag)
                elif i < self.next:
                    after -= 1
            self.bags = keep
            self.next = after


@register
class RoundRobin(BotPolicy):
    """RR: the bags are served in turn, in circular arrival order, starting from the oldest.

    The turn persists across events: the next selection is the first bag after
    the one served last, in arrival order, wrapping, whose candidate set is not
    empty (bags without a candidate are skipped and keep their place). A bag
    that arrives joins the circle at the end; a completed bag leaves it. Selection
    walks the circle from the turn: O(1) checks while bags have waiting tasks,
    O(bags) per decision at worst (when most bags have no candidate), plus
    O(bags) once per round after a bag completed.
    """

    name = "rr"

    def __init__(self, options: BotOptions | None = None, rng: random.Random | None = None):
        super().__init__(options, rng)
        self._circle = Circle()
        self._turn: int | None = None  # position of the bag select() returned

    def attach(self, view: View) -> None:
        self._circle = Circle()

    def begin(self, view: View) -> None:
        self._circle.sync(view)

    def select(self, view: View) -> BagRecord | None:
        bags = self._circle.bags
        n = len(bags)
        start = self._circle.next
        for k in range(n):
            i = (start + k) % n
            if self.eligible(bags[i]):
                self._turn = i
                return bags[i]
        return None

    def served(self, view: View, bag: BagRecord, task: JobRecord) -> None:
        if self._turn is not None:
            self._circle.next = self._turn + 1


@register
class RoundRobinNrf(RoundRobin):
    """RR-NRF: RR, but a bag with no running task goes first.

    While some bag has no task with a live replica, the circular order is
    suspended and those bags are selected, in circular order from the turn,
    until every bag has one; the turn does not move meanwhile, and RR resumes
    where it stood ("restored"). Within a round bags only gain running tasks, so
    the search for one without resumes where it stopped: O(bags) per round, then
    RR's cost.
    """

    name = "rr_nrf"

    def begin(self, view: View) -> None:
        super().begin(view)
        self._nrf: int | None = 0  # offset from the turn where the search resumes; None: none left this round

    def select(self, view: View) -> BagRecord | None:
        if self._nrf is not None:
            bags = self._circle.bags
            n = len(bags)
            start = self._circle.next
            for k in range(self._nrf, n):
                bag = bags[(start + k) % n]
                if not bag.running and self.eligible(bag):
                    self._nrf = k
                    self._turn = None  # the circular order is suspended: the turn stays
                    return bag
            self._nrf = None
        return super().select(view)
