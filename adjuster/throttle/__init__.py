"""Caps the CPU share of grid-job processes (cgroup v2, cgroup v1 or SIGSTOP/SIGCONT duty cycling) and measures it.

One module per backend (``cgroup2``, ``cgroup1``, ``duty``) behind the ``Throttle`` interface of ``base``; this
package chooses among them. ``cgroup`` and ``cgroupfs`` are what the two cgroup backends share, ``accounting``
the psutil CPU count of those that cannot ask the kernel.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from adjuster.throttle.base import BackendUnavailable, Throttle, Unavailable
from adjuster.throttle.cgroup1 import Cgroup1Throttle, cgroup1_layout
from adjuster.throttle.cgroup2 import Cgroup2Throttle, cgroup2_layout
from adjuster.throttle.duty import DutyThrottle, duty_problem

log = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "BackendUnavailable",
    "Cgroup1Throttle",
    "Cgroup2Throttle",
    "DutyThrottle",
    "Throttle",
    "available_backends",
    "backend_problems",
    "make_throttle",
]

BACKENDS = ("cgroup2", "cgroup1", "duty")  # best first: the kernel enforces cgroup quotas; duty is the fallback

_CLASSES: dict[str, Callable[[str], Throttle]] = {
    "cgroup2": Cgroup2Throttle,
    "cgroup1": Cgroup1Throttle,
    "duty": DutyThrottle,
}


def _problem(probe: Callable[[], object]) -> str | None:
    try:
        probe()
    except Unavailable as e:
        return str(e)
    return None


_PROBES: dict[str, Callable[[], str | None]] = {
    "cgroup2": lambda: _problem(lambda: cgroup2_layout(probe=True)),
    "cgroup1": lambda: _problem(lambda: cgroup1_layout(probe=True)),
    "duty": duty_problem,
}


def backend_problems() -> dict[str, str | None]:
    """Each backend, best first, with the reason it cannot be used here (None if it can)."""
    return {backend: _PROBES[backend]() for backend in BACKENDS}


def available_backends() -> list[str]:
    """The backends that work on this machine, best first."""
    return [backend for backend, problem in backend_problems().items() if problem is None]


def make_throttle(backend: str = "auto", name: str = "mgst") -> Throttle:
    """A new throttle (share 1.0, nothing attached).  ``"auto"`` takes the first backend that works here.

    Raises BackendUnavailable (a ValueError) naming the backend and why it cannot be used, and ValueError for
    an unknown backend.
    """
    if backend == "auto":
        reasons: list[str] = []
        for candidate in BACKENDS:
            try:
                throttle = _CLASSES[candidate](name)
            except BackendUnavailable as e:
                reasons.append(f"{candidate}: {e.reason}")
                continue
            log.debug("throttle backend: %s", candidate)
            return throttle
        raise BackendUnavailable("auto", "no backend works here (" + "; ".join(reasons) + ")")
    if backend not in _CLASSES:
        raise ValueError(f"unknown throttle backend {backend!r}; expected 'auto' or one of {', '.join(BACKENDS)}")
    return _CLASSES[backend](name)
