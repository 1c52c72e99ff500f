"""A failure of the scheduling core while it handled an input of a testbed run: the run stops, its results kept."""

from __future__ import annotations

import os
import traceback

from mgst.core.decisions import InputError, Output, PolicyError
from mgst.core.events import Event
from mgst.core.scheduler import Scheduler


class PolicyFailed(Exception):
    """The core raised while it handled an input (``what``): the policy's code raised, or broke one of the core's
    rules (a PolicyError), or, rarely, the core itself failed. The core may be left half-way through the input, so
    the run cannot go on: the mapper stops it and writes what was done, and a replay of its journal stops at the
    same input."""

    def __init__(self, policy: str, what: str, model_time: float, cause: BaseException):
        self.cause = cause
        who = f"the policy {policy!r}" if _policy_at_fault(cause) else \
            f"the scheduling core (a bug of mgst's, with the policy {policy!r}: please report it)"
        super().__init__(f"{who} failed at model time {model_time:.3f}, handling {what}: "
                         f"{type(cause).__name__}: {cause}")


def _policy_at_fault(cause: BaseException) -> bool:
    """A PolicyError, or an exception raised outside the core's own modules (in the policy's code)."""
    if isinstance(cause, PolicyError):
        return True
    frames = traceback.extract_tb(cause.__traceback__)
    if not frames:
        return True
    where = frames[-1].filename.replace(os.sep, "/")  # (compiled modules name themselves mgst/core/....py)
    return not (where.startswith("mgst/core/") or "/mgst/core/" in where)


def handled(core: Scheduler, now: float, event: Event) -> list[Output]:
    """``core.handle(now, event)``: its decisions; PolicyFailed (from what the core raised) if it failed. An input the
    core refuses before changing anything (InputError) is raised as it is: the input's fault, the run goes on."""
    try:
        return core.handle(now, event)
    except InputError:
        raise
    except Exception as e:
        raise PolicyFailed(core.policy.name, type(event).__name__, now, e) from e
