"""Gangs: a replica on several machines that computes in lock step at its slowest member's pace (a rate rule).

A gang holds ``((machine, tasks, work per task), ...)``: member q computes x_q tasks of w_q work units each,
concurrently, so the gang's work is ``max_q x_q * w_q`` units of *simultaneous* progress. It is one
:class:`~mgst.core.progress.Activity` going at rate 1 while it is ready (its owner says every member holds what
it needs) and every member is UP, and at rate 0 otherwise: a RECLAIMED member stalls all of them. A DOWN member
loses it (its progress is gone for good; the owner drops it and frees every member). Any policy may form one;
the tightly-coupled iterations of :mod:`mgst.core.iterations` are the first user.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from mgst.core.progress import Activity
from mgst.model import Availability

_UP = Availability.UP
_DOWN = Availability.DOWN


class Gang:
    """A lock-step replica on several machines; a :class:`~mgst.core.progress.RateRule` of one activity."""

    __slots__ = ("key", "loads", "work", "activity", "states", "ready", "lost")

    def __init__(self, key: Hashable, members: Sequence[tuple[int, int, float]], now: float):
        if not members:
            raise ValueError("a gang needs at least one member")
        machines = [q for q, _, _ in members]
        if len(set(machines)) != len(machines):
            raise ValueError("a machine is in a gang once (give it several tasks instead)")
        if any(x < 1 or w <= 0 for _, x, w in members):
            raise ValueError("every member holds at least one task of positive work")
        self.key = key
        self.loads: dict[int, float] = {q: x * w for q, x, w in members}  # x_q * w_q
        self.work = max(self.loads.values())  # the slowest member's load: the gang's whole work
        self.activity = Activity(self.work, now, 0.0)
        self.states: dict[int, int] = dict.fromkeys(machines, int(_UP))
        self.ready = False  # every member holds its program and data (its owner says so)
        self.lost = False

    def member_state(self, machine: int, state: int) -> None:
        """A member's availability changed; DOWN loses the gang."""
        self.states[machine] = state
        if state == _DOWN:
            self.lost = True

    def computes(self) -> bool:
        """Whether it progresses now: ready, not lost, and every member UP."""
        return self.ready and not self.lost and all(s == _UP for s in self.states.values())

    def paces(self) -> dict[int, float]:
        """Each member's pace while the gang computes: its load over the slowest member's (1 for the slowest)."""
        return {q: load / self.work for q, load in self.loads.items()}

    def remaining(self, now: float) -> float:
        """Work units of simultaneous progress still to do."""
        return self.activity.remaining(now)

    def rates(self, now: float) -> Iterable[tuple[Any, Activity, float, float]]:
        """The rule: rate 1 (pace 1, the slowest member's full speed) while it computes, 0 otherwise."""
        on = self.computes()
        yield self.key, self.activity, 1.0 if on else 0.0, 1.0 if on else 0.0


__all__ = ["Gang"]
