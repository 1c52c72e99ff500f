"""Machine availability: each machine's periods UP, RECLAIMED or DOWN (``registry`` makes them, for every kind)."""

from __future__ import annotations

from mgst.availability.process import AvailabilityProcess, Period, State
from mgst.availability.registry import make_process
from mgst.availability.weibull import KIND as _WEIBULL
from mgst.availability.weibull import mean_repair
from mgst.model import Experiment, FailureModel, Failures, WeibullGroup, WeibullNormalFailures

__all__ = ["AvailabilityProcess", "Period", "State", "machine_group", "make_process", "up_fraction"]


def machine_group(experiment: Experiment, machine: int) -> WeibullGroup:
    """The Weibull group of ``machine``: its ``group`` attribute (1-based); group 1 if there is one group."""
    failures = experiment.failures
    if not isinstance(failures, WeibullNormalFailures):
        raise TypeError("the experiment's availability model has no Weibull groups")
    return _WEIBULL.group(failures, experiment, machine)


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
