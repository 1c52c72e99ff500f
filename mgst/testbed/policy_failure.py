"""The core's handling of a testbed run's input, a failure of it raised as PolicyFailed: the run stops, its results
kept."""

from __future__ import annotations

from mgst.core.decisions import InputError, Output
from mgst.core.events import Event
from mgst.core.scheduler import Scheduler
from mgst.policies.failure import PolicyFailed


def handled(core: Scheduler, now: float, event: Event) -> list[Output]:
    """``core.handle(now, event)``: its decisions; PolicyFailed (from what the core raised) if it failed. An input the
    core refuses before changing anything (InputError) is raised as it is: the input's fault, the run goes on."""
    try:
        return core.handle(now, event)
    except InputError:
        raise
    except Exception as e:
        raise PolicyFailed(core.policy.name, type(event).__name__, now, e) from e
