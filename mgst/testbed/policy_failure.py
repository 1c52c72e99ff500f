"""A failure of the scheduling core while it handled an input of a testbed run: the run stops, its results kept."""

from __future__ import annotations

from mgst.core.decisions import Output
from mgst.core.events import Event
from mgst.core.scheduler import Scheduler


class PolicyFailed(Exception):
    """The core raised while it handled an input: the policy's code raised, or broke one of the core's rules (a
    PolicyError). The core may be left half-way through the input, so the run cannot go on: the mapper stops it and
    writes what was done, and a replay of its journal stops at the same input."""

    def __init__(self, policy: str, event: Event, model_time: float, cause: BaseException):
        self.cause = cause
        super().__init__(f"the policy {policy!r} failed at model time {model_time:.3f}, handling "
                         f"{type(event).__name__}: {type(cause).__name__}: {cause}")


def handled(core: Scheduler, now: float, event: Event) -> list[Output]:
    """``core.handle(now, event)``: its decisions, or PolicyFailed (from what the core raised) if it raised."""
    try:
        return core.handle(now, event)
    except Exception as e:
        raise PolicyFailed(core.policy.name, event, now, e) from e
