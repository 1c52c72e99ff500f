"""Kondo et al.'s host prioritisation: PRI-CR, PRI-CR-WAIT and PRI-HISTORY."""

from __future__ import annotations

import dataclasses
import math
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
        if not (self.wait >= 0.0 and math.isfinite(self.wait)):  # (an endless wait would start no task, ever)
            raise ValueError(f"wait: must be a number of seconds >= 0, got {self.wait}")


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


@dataclasses.dataclass(frozen=True)
class HistoryOptions(PolicyOptions):
    # What "expected operations per interval" counts (docs/readings.md, "PRI-HISTORY"): "interval_work", every
    # operation a host is expected to deliver per availability interval (the slides' words: a slow host up for
    # long scores high), or "capped_at_task", those operations up to one task's work (a host whose intervals
    # outlast a task gains nothing from longer ones: such hosts go by clock rate).
    score: str = "interval_work"

    def validate(self) -> None:
        if self.score not in HISTORY_SCORES:
            raise ValueError(f"score: must be one of {', '.join(HISTORY_SCORES)}, got {self.score!r}")


HISTORY_SCORES = ("interval_work", "capped_at_task")


class PriHistory(KondoPolicy):
    """PRI-HISTORY: a waiting task goes to the ready host expected to do the most work per availability interval,
    its clock rate times the mean CPU it delivered per interval (MachineHistory), with ``score = "capped_at_task"``
    counted up to one task's work; ties by clock rate."""

    name = "pri_history"
    knows_sizes = True  # (the capped score reads the task's size)
    Options = HistoryOptions
    options: HistoryOptions

    def __init__(self, options: HistoryOptions | None = None, rng=None):
        super().__init__(options, rng)
        self.task_work: dict[int, float] = {}  # bag id -> its largest task's work (the capped score's cap)

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        now = view.now
        cap = math.inf
        if self.options.score == "capped_at_task":
            cap = self.task_work.get(bag.id, 0.0)
            if not cap:
                cap = self.task_work[bag.id] = max(view.task_size(t) for t in bag.tasks)
        return sorted(hosts, key=lambda m: (-min(cap, power(m) * (m.history.mean_delivered_per_interval(now) or 0.0)),
                                            -power(m)))


register(PriCR)
register(PriCRWait)
register(PriHistory)
