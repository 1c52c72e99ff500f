"""A failure of the scheduling core while it handled an input: the policy's (its code raised, or it broke one of
the core's rules) or, rarely, mgst's own; one line saying which, when and why, with the policy's traceback."""

from __future__ import annotations

import os
import traceback

from mgst.core.decisions import PolicyError

# Where mgst's own machinery runs (the core and its drivers): an exception raised there, other than a PolicyError,
# is mgst's bug, not the policy's.
_MACHINERY = ("mgst/core/", "mgst/sim/", "mgst/testbed/")


class PolicyStuck(Exception):
    """A decision of the policy's that did not return, ended from outside (a testbed run's third interrupt): the
    policy's fault, wherever the interrupt found it."""


class PolicyFailed(Exception):
    """The core raised while it handled an input (``what``): the policy's code raised, or broke one of the core's
    rules (a PolicyError), or, rarely, the core itself failed. The core may be left half-way through the input, so
    the run cannot go on.

    ``cause`` is the exception raised (None once the failure has crossed to another process: a simulation's
    worker); ``details`` the cause's traceback as text, kept across processes."""

    def __init__(self, policy: str, what: str | None, model_time: float, cause: BaseException,
                 replication: int | None = None):
        self.cause: BaseException | None = cause
        self.policy_at_fault = _policy_at_fault(cause)
        self.details = "".join(traceback.format_exception(type(cause), cause, cause.__traceback__))
        who = f"the policy {policy!r}" if self.policy_at_fault else \
            f"the scheduling core (a bug of mgst's, with the policy {policy!r}: please report it)"
        of = "" if replication is None else f" of replication {replication}"
        handling = "" if what is None else f", handling {what}"
        super().__init__(f"{who} failed at model time {model_time:.3f}{of}{handling}: {type(cause).__name__}: {cause}")

    def __reduce__(self) -> tuple:
        return _rebuilt, (str(self), self.policy_at_fault, self.details)


def _rebuilt(message: str, policy_at_fault: bool, details: str) -> PolicyFailed:
    """A PolicyFailed from another process: its message and traceback text, without the cause itself."""
    failure = PolicyFailed.__new__(PolicyFailed)
    Exception.__init__(failure, message)
    failure.cause, failure.policy_at_fault, failure.details = None, policy_at_fault, details
    return failure


def _policy_at_fault(cause: BaseException) -> bool:
    """A PolicyError, or an exception raised outside mgst's machinery (in the policy's code)."""
    if isinstance(cause, (PolicyError, PolicyStuck)):
        return True
    frames = traceback.extract_tb(cause.__traceback__)
    if not frames:
        return True
    where = frames[-1].filename.replace(os.sep, "/")  # (compiled modules name themselves mgst/core/....py)
    return not any(where.startswith(m) or f"/{m}" in where for m in _MACHINERY)
