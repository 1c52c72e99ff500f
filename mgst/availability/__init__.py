"""Machine availability models: when machines go down and come back (make_availability picks the model)."""

from __future__ import annotations

from typing import Protocol

from mgst.availability.exponential import ExponentialUpDown
from mgst.availability.weibull import WeibullNormalUpDown, mean_repair
from mgst.model import Experiment, FailureModel, Failures, WeibullGroup, WeibullNormalFailures

__all__ = ["UpDown", "machine_group", "make_availability", "up_fraction"]


class UpDown(Protocol):
    """Alternating period lengths of one machine, starting up."""

    def next_up(self) -> float: ...

    def next_down(self) -> float: ...


def machine_group(experiment: Experiment, machine: int) -> WeibullGroup:
    """The Weibull group of ``machine``: its ``group`` attribute (1-based); group 1 if there is one group."""
    failures = experiment.failures
    if not isinstance(failures, WeibullNormalFailures):
        raise TypeError("the experiment's availability model has no groups")
    m = experiment.machines[machine]
    g = m.attribute("group")
    if g is None and len(failures.groups) == 1:
        g = 1
    if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= len(failures.groups):
        raise ValueError(f"machine {m.name!r} has group {g!r}; need 1..{len(failures.groups)}")
    return failures.groups[g - 1]


def make_availability(experiment: Experiment, seed: int, replication: int, machine: int) -> UpDown | None:
    """Machine ``machine``'s up/down periods, from its own streams; None when it is always up."""
    failures = experiment.failures
    if failures is None:
        return None
    if isinstance(failures, FailureModel):
        return ExponentialUpDown(failures, seed, replication, machine)
    if isinstance(failures, WeibullNormalFailures):
        return WeibullNormalUpDown(machine_group(experiment, machine), seed, replication, machine)
    raise TypeError(f"unknown availability model {failures!r}")


def up_fraction(failures: Failures | None, group: WeibullGroup | None = None) -> float:
    """A machine's long-run up fraction: E[up] / (E[up] + E[down]) (Anglano & Canonico's A_i, Eq. 3).

    For the Weibull/Normal model, pass the machine's ``group``; E[down] is the truncated
    Normal's mean (the paper's MTTR to a relative 1e-8 for its repair laws).
    """
    if failures is None:
        return 1.0
    if isinstance(failures, FailureModel):
        return failures.mean_up / (failures.mean_up + failures.mean_down)
    if group is None:
        raise ValueError("the Weibull/Normal model needs the machine's group")
    return group.mttf / (group.mttf + mean_repair(group))
