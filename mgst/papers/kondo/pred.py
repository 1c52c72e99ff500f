"""Kondo et al.'s exclusion by predicted makespan (the slides): EXCL-PRED, EXCL-PRED-DUP and EXCL-PRED-TO."""

from __future__ import annotations

import math
from collections.abc import Hashable

from mgst.core.decisions import Decision, SetTimer
from mgst.core.scheduler import TIMER_SLACK
from mgst.core.state import BagRecord, JobRecord, MachineRecord
from mgst.core.view import View
from mgst.papers.kondo.base import KondoPolicy, dedicated_time, fastest_first, power
from mgst.policies import register
from mgst.policies.base import NOTHING, Decisions


def platform_rate(view: View) -> float:
    """r: the platform's mean work rate so far, over every host, from its history: power x CPU delivered / time
    (down time counts as 0). At time 0, the rate now (power x share of the hosts up); else the mean power."""
    machines = view.machines
    now = view.now
    if now > 0.0:
        r = sum(power(m) * m.history.delivered(now) for m in machines) / (now * len(machines))
    else:
        r = sum(power(m) * m.cpu_share for m in machines if m.is_up) / len(machines)
    return r if r > 0.0 else sum(power(m) for m in machines) / len(machines)


# A host that would finish by the predicted end to within this fraction of it finishes by it: the prediction is float
# arithmetic (r a sum over the hosts divided by the time), one ulp from its exact value, and a host free exactly when
# it can still finish by the end (in exact arithmetic) was excluded by the rounding, and the bag's last tasks went to
# the slowest hosts (an independent reference's EXCL-PRED makespan 22.2 against mgst's 39.9).
PREDICTION_TIE = 1e-9


def on_time_by(end: float) -> float:
    """The latest finish that counts as by ``end`` (PREDICTION_TIE of it later)."""
    return end + PREDICTION_TIE * max(1.0, abs(end))


def fallback_time(end: float, shortest: float) -> float:
    """The first time t (a float) at which t + ``shortest`` > ``end``: no host can finish a task by the end."""
    t = end - shortest
    while t + shortest <= end:
        t = math.nextafter(t, math.inf)
    return t


class ExclPred(KondoPolicy):
    """EXCL-PRED: predicted makespan ceil(T/N) s / r (N the platform's hosts, T the tasks left, s their size, r
    :func:`platform_rate`), at the bag's arrival and again after every N completions. A ready host gets a task
    (in ready-queue order) only if it would finish it, at its clock rate, by the predicted end; when no host of
    the platform could (a timer marks the moment), every ready host may, fastest first (never a deadlock)."""

    name = "excl_pred"
    knows_sizes = True
    # bag id -> [predicted end, completions at which to predict again, task size s]
    predictions: dict[int, list[float]]

    def __init__(self, options=None, rng=None):
        super().__init__(options, rng)
        self.predictions = {}
        self.count = 0
        self.first: dict[str, float] = {}
        self.shortest: dict[float, float] = {}  # task size -> its shortest dedicated time on the platform

    def observe(self, view: View) -> Decisions:
        out: list[Decision] = []
        n = len(view.machines)
        for bag in view.bags.values():
            p = self.predictions.get(bag.id)
            if p is None:
                s = sum(view.task_size(t) for t in bag.tasks) / len(bag.tasks)
                p = self.predictions[bag.id] = [0.0, 0.0, s]
            elif bag.done < p[1]:
                continue
            r = platform_rate(view)
            p[0] = view.now + math.ceil((bag.size - bag.done) / n) * p[2] / r
            p[1] = bag.done + n
            self.count += 1
            if not self.first:
                self.first = {"predicted_makespan": p[0] - bag.submitted, "predicted_rate": r, "excluded_hosts":
                              sum(1 for m in view.machines if view.now + dedicated_time(p[2], m) > on_time_by(p[0]))}
            # From end - (the platform's shortest task time) on, every host is excluded and the fallback lets the
            # ready ones work: a timer then, or a platform whose fast hosts are gone would wait for an event forever.
            fallback = max(view.now, fallback_time(on_time_by(p[0]), self._shortest(view, p[2])))  # (never past)
            out.append(SetTimer(("excl_pred_fallback", bag.id), fallback))
            out.extend(self.predicted(bag, p[0]))
        return out or NOTHING

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "excl_pred_fallback":
            return NOTHING  # the core matches after a timer: the fallback's hosts get tasks then
        return super().on_timer(view, key)

    def _shortest(self, view: View, s: float) -> float:
        """The platform's shortest dedicated time of a task of size ``s`` (found once: rank runs at every event)."""
        shortest = self.shortest.get(s)
        if shortest is None:
            shortest = self.shortest[s] = min(dedicated_time(s, m) for m in view.machines)
        return shortest

    def predicted(self, bag: BagRecord, end: float) -> Decisions:
        """A new prediction of ``bag``'s end was made (a subclass sets its time-out here)."""
        return NOTHING

    def rank(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[MachineRecord]:
        end, _, s = self.predictions[bag.id]
        end = on_time_by(end)
        now = view.now
        if now + self._shortest(view, s) > end:  # no host could finish by the end: fall back
            return fastest_first(hosts)
        return [m for m in hosts if now + dedicated_time(s, m) <= end]

    def last_to_finish(self, view: View, bag: BagRecord) -> list[JobRecord]:
        """The bag's tasks running one replica, the one expected to end last (dedicated, at its clock) first."""
        s = self.predictions[bag.id][2]
        machines = view.machines
        single = [t for t in bag.running.values() if len(t.replicas) == 1]
        return sorted(single, key=lambda t: -max(r.sent + dedicated_time(s, machines[r.machine])
                                                 for r in t.replicas.values()))

    def report(self) -> dict[str, float]:
        return {**self.first, "predictions": self.count, "replicas_started": self.replicas_started}


class ExclPredDup(ExclPred):
    """EXCL-PRED-DUP: EXCL-PRED, and the ready hosts it lets work that the waiting tasks leave over get replicas
    of running tasks (2 live at most; the one expected to end last first); the first result wins."""

    name = "excl_pred_dup"
    max_replicas = 2

    def replicas(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[JobRecord]:
        return self.last_to_finish(view, bag)


class ExclPredTO(ExclPred):
    """EXCL-PRED-TO: EXCL-PRED, and from the predicted end on (a timer; a new prediction moves it), every task not
    done may get a replica on a ready host left over (2 live at most); the first result wins."""

    name = "excl_pred_to"
    max_replicas = 2

    def predicted(self, bag: BagRecord, end: float) -> Decisions:
        return (SetTimer(("excl_pred_to", bag.id), end),)

    def on_timer(self, view: View, key: Hashable) -> Decisions:
        if isinstance(key, tuple) and len(key) == 2 and key[0] == "excl_pred_to":
            return NOTHING  # the core matches after a timer: replicas go out then
        return super().on_timer(view, key)  # (the fallback's)

    def replicas(self, view: View, bag: BagRecord, hosts: list[MachineRecord]) -> list[JobRecord]:
        return self.last_to_finish(view, bag) if view.now >= self.predictions[bag.id][0] - TIMER_SLACK else []


register(ExclPred)
register(ExclPredDup)
register(ExclPredTO)
