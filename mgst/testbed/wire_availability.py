"""What each machine's puller is sent to play its availability over a testbed run, made once by the mapper and
checked by `mgst run` and `mgst mapper` alike before anything starts."""

from __future__ import annotations

from mgst.availability import registry as availability
from mgst.model import Experiment
from mgst.testbed.run_result import drain_bound


def availability_until(experiment: Experiment, duration: float, time_unit: float,
                       drain_timeout: float | None = None) -> float:
    """The model time a run may last: its generation (``duration`` wall seconds) and its drain (``drain_timeout``,
    by default the mapper's: drain_bound), in time units of ``time_unit`` wall seconds."""
    drain = drain_bound(experiment, time_unit) if drain_timeout is None else drain_timeout
    return (duration + drain) / time_unit


def availability_forms(experiment: Experiment, seed: int, until: float) -> list[tuple | None]:
    """Each machine's availability in the form its puller is sent (None: always up) over ``until`` model time
    units; ValueError, naming the machine, for one the wire cannot carry (a trace of more than MAX_WIRE_PERIODS
    periods in the run)."""
    return [availability.to_wire(experiment, j, seed, until) for j in range(len(experiment.machines))]


def check_availability_fits(experiment: Experiment, duration: float | None, time_unit: float | None,
                            seed: int | None) -> None:
    """ValueError (availability_forms') unless every machine's availability over the run (the file's settings
    where an override is None) can be sent to its puller."""
    if experiment.failures is None:
        return
    tb = experiment.testbed
    tu = tb.time_unit if time_unit is None else time_unit
    until = availability_until(experiment, tb.duration if duration is None else duration, tu)
    availability_forms(experiment, experiment.simulation.seed if seed is None else seed, until)


__all__ = ["availability_forms", "availability_until", "check_availability_fits"]
