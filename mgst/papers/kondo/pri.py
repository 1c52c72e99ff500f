"""Kondo et al.'s host prioritisation: PRI-CR, PRI-CR-WAIT and PRI-HISTORY."""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from mgst.core.decisions import SetTimer
from mgst.core.state import BagRecord, MachineRecord
from mgst.core.view import View
from mgst.papers.kondo.base import KondoPolicy, fastest_first, power
from mgst.policies import register
from mgst.policies.base import NOTHING, Decisions, PolicyOptions


class PriCR(KondoPolicy):
    """PRI-CR: a waiting task goes to the ready host with the highest clock rate (ties: ready-queue order)."""

    name = "pri_cr"

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        return fastest_first(hosts)


@dataclasses.dataclass(frozen=True)
class WaitOptions(PolicyOptions):
    # How long the application's tasks wait, from its submission, for better hosts (model seconds):
    # the slides' 10 minutes.
    wait: float = 600.0

    def validate(self) -> None:
        if not self.wait >= 0.0:
            raise ValueError(f"wait: must be >= 0, got {self.wait}")


class PriCRWait(PriCR):
    """PRI-CR-WAIT: no task starts until ``wait`` after the application's submission, while the ready queue
    fills; then PRI-CR (the fastest ready hosts first), for every task, requeued ones too, without more waiting."""

    name = "pri_cr_wait"
    Options = WaitOptions
    options: WaitOptions

    def __init__(self, options: WaitOptions | None = None, rng=None):
        super().__init__(options, rng)
        self.released: set[int] = set()  # bags whose wait is over
        self.waiting: set[int] = set()  # bags whose wait timer is set

    def observe(self, view: View) -> Decisions:
        new = [b for b in view.bags.values() if b.id not in self.waiting]
        for bag in new:
            self.waiting.add(bag.id)
        return [SetTimer(("pri_cr_wait", b.id), b.submitted + self.options.wait) for b in new] or NOTHING

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "pri_cr_wait":
            self.released.add(key[1])  # the core matches after a timer: the tasks go out now
            return NOTHING
        return super().on_timer(view, key)

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        return fastest_first(hosts) if bag.id in self.released else []


class PriHistory(KondoPolicy):
    """PRI-HISTORY: a waiting task goes to the ready host expected to do the most work per availability interval,
    its clock rate times the mean CPU it delivered per interval (MachineHistory); ties by clock rate."""

    name = "pri_history"

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        now = view.now
        return sorted(hosts, key=lambda m: (-power(m) * (m.history.mean_delivered_per_interval(now) or 0.0),
                                            -power(m)))


register(PriCR)
register(PriCRWait)
register(PriHistory)
