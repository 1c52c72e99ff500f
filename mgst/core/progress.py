"""Progress, the core's alone: work left at a mark going down at a rate, the rules that set the rates, and Eta.

Everything that advances in mgst (a replica computing on a machine; later a gang's iteration, a transfer on
the master's link) is an :class:`Activity`: ``left`` units of work remained at time ``mark``, and since then it
does ``rate`` units per time unit. This is the one place that arithmetic is written: the simulator schedules
the ends the core reports, the mapper forwards them, and the puller's emulator runs an Activity on wall time.

What sets a rate is a **rule**. The built-in one is the machine's (:func:`machine_rate`): a replica computes
at its class's rate on the machine times the machine's CPU share, for at most ``cpus`` replicas at once among
the ``slots`` the machine holds; the others wait on the host (phase WAITING, rate 0). A coupling between
activities (a gang that goes at its slowest member's pace, a link that carries at most ``n_com`` transfers at
once) is another :class:`RateRule`: it says each governed activity's rate, and :meth:`Progress.apply` re-marks
every activity whose rate changed and reports its new end as an :class:`~mgst.core.decisions.Eta`. A new
coupling is a new rule, never new arithmetic in a driver.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final, Protocol

from mgst.core.decisions import Eta
from mgst.core.tuples import new_tuple

# Final: a C static when compiled (docs/build.md).
_new_tuple: Final = new_tuple
_ETA: Final = Eta


class Activity:
    """Work left at a mark: ``left`` units remained at time ``mark``, going down at ``rate`` per time unit since.

    Time and work are the caller's units: model time and work at unit rate in the core; wall seconds and model
    time at full speed in the puller's emulator. A rate of 0 holds it (suspended, waiting, stalled).
    """

    __slots__ = ("left", "mark", "rate")

    def __init__(self, left: float, mark: float, rate: float):
        self.left = left
        self.mark = mark
        self.rate = rate

    def remaining(self, now: float) -> float:
        """Work left at ``now`` (never below 0)."""
        left = self.left - self.rate * (now - self.mark)
        return left if left > 0.0 else 0.0

    def finish_time(self) -> float:
        """When it ends if its rate does not change (inf while held at rate 0)."""
        rate = self.rate
        if rate <= 0.0:
            return math.inf
        return self.mark + self.left / rate

    def set_rate(self, now: float, rate: float) -> None:
        """Re-mark it at ``now`` (its work left brought up to date), then go on at ``rate``."""
        self.left = self.remaining(now)
        self.mark = now
        self.rate = rate


def machine_rate(class_rate: float, cpu_share: float, computes: bool) -> float:
    """The machine rule: a replica that holds one of its machine's ``cpus`` computes at mu'_ij * a_j; one that
    waits on the host (every CPU taken) does nothing."""
    return class_rate * cpu_share if computes else 0.0


class RateRule(Protocol):
    """A coupling of activities: at ``now``, the rate of each activity it governs, with its pace.

    ``pace`` is the share of its machine's speed (at the machine's CPU share) the activity is given: 1 for a
    replica alone on its CPU, 0 while it waits or stalls, between for a gang member held back by a slower one.
    The mapper sends a replica's pace to its puller whenever it changes (the puller applies its own share).
    """

    def rates(self, now: float) -> Iterable[tuple[Any, Activity, float, float]]:
        """(key, activity, rate, pace) for every governed activity; ``key`` names it in the Eta reported."""
        ...


class Progress:
    """Applies rules and reports moved ends: an :class:`Eta` for every activity whose rate a rule changed.

    ``out`` is the list the Eta decisions go to (the core's outputs of the event being handled; the
    Lifecycle sets it at each event).
    """

    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out: list[Any] = []

    def moved(self, key: Any, activity: Activity, pace: float) -> None:
        """``activity``'s end moved (its rate was just set): report it."""
        self.out.append(_new_tuple(_ETA, key, activity.finish_time(), pace))

    def set(self, now: float, key: Any, activity: Activity, rate: float, pace: float) -> bool:
        """Set one activity's rate at ``now``; True (and an Eta reported) if it changed."""
        if rate == activity.rate:
            return False
        activity.set_rate(now, rate)
        self.moved(key, activity, pace)
        return True

    def apply(self, now: float, rule: RateRule) -> int:
        """Set every rate ``rule`` gives at ``now``; how many changed (each reported as an Eta)."""
        changed = 0
        for key, activity, rate, pace in rule.rates(now):
            if self.set(now, key, activity, rate, pace):
                changed += 1
        return changed


__all__ = ["Activity", "Progress", "RateRule", "machine_rate"]
