"""The Throttle interface every backend implements (share, measurement, closing) and the errors they raise."""

from __future__ import annotations

import abc
import logging
import math
import os
import re
import time
import weakref
from types import TracebackType

import psutil

log = logging.getLogger(__name__)

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")


class BackendUnavailable(ValueError):
    """A throttle backend cannot be used on this machine; the message names the backend and says why."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"throttle backend {backend!r} is unavailable: {reason}")
        self.backend = backend
        self.reason = reason


class Unavailable(Exception):
    """Internal: a probe's reason for refusing a backend."""


# --------------------------------------------------------------------------------------------------------------
# The interface


class Throttle(abc.ABC):
    """Caps the CPU share of attached processes (and their descendants) and measures the share they got.

    ``share`` is a fraction of ONE CPU (the model's a_j); 1.0 means unthrottled, 0 suspends the processes (the
    owner took the machine back: they keep their state and use no CPU until a positive share resumes them; how
    each backend suspends is in its docstring).  A new throttle starts at 1.0 with its measurement window open.
    Use it as a context manager, or call ``close()``: closing releases every process (none is left stopped or
    frozen) and removes whatever the backend created.  A throttle is also closed when it
    is garbage-collected and when the interpreter exits normally (``weakref.finalize`` registers that atexit
    hook); nothing can help if the controlling process is killed with SIGKILL.
    """

    backend: str = ""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(f"throttle name must be 1-64 characters from [A-Za-z0-9_.-], got {name!r}")
        self.name = name
        self._share = 1.0
        self._closed = False
        self._finalizer: weakref.finalize | None = None
        self._t0 = time.monotonic()
        self._used0 = 0.0

    # --- what every backend provides

    @abc.abstractmethod
    def attach(self, pid: int) -> None:
        """Put a process under the throttle; its descendants, existing and future, follow it."""

    @abc.abstractmethod
    def detach(self, pid: int) -> None:
        """Release a process and its descendants (a process that already died is fine)."""

    @abc.abstractmethod
    def _apply_share(self, share: float) -> None:
        """Impose ``share`` in [0, 1]: 0 suspends every attached process and returns once they are suspended,
        and the processes attached while it holds are suspended too; a positive share after 0 resumes them."""

    @abc.abstractmethod
    def _cpu_seconds(self) -> float:
        """A non-decreasing count of CPU seconds used by the throttled processes (backend-defined origin)."""

    # --- shared behaviour

    @property
    def share(self) -> float:
        """The share last set (1.0 until ``set_share`` is called)."""
        return self._share

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def suspended(self) -> bool:
        """True while the share is 0 (the attached processes are stopped or frozen)."""
        return self._share == 0.0

    def set_share(self, share: float) -> None:
        """Cap the attached processes at ``share`` of one CPU, 0 <= share <= 1; 1.0 lifts the cap, 0 suspends
        them (returning once they are), and a positive share after 0 resumes them where they stopped."""
        share = _check_share(share)
        self._require_open()
        self._apply_share(share)
        self._share = share
        log.debug("%s throttle %s: share %.3f", self.backend, self.name, share)

    def reset_measure(self) -> None:
        """Start a new measurement window for ``achieved()``."""
        self._require_open()
        self._used0 = self._cpu_seconds()
        self._t0 = time.monotonic()

    def achieved(self) -> float:
        """CPU seconds (user + system) the throttled processes used since ``reset_measure()``, per wall second.

        What is counted depends on the backend: for cgroups, every task that ran inside the throttle's cgroup,
        including descendants that have since exited (the kernel's cgroup CPU accounting); for duty, the
        attached processes and their descendants as psutil sees them, with exited descendants counted through
        their parent's reaped-children times (Linux) or their last sample.  See each backend's docstring.
        """
        self._require_open()
        used = self._cpu_seconds() - self._used0
        wall = time.monotonic() - self._t0
        return max(0.0, used) / wall if wall > 0 else 0.0

    def close(self) -> None:
        """Release every process and everything the backend created; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()  # runs the backend's release exactly once, and unregisters the atexit hook
        log.debug("%s throttle %s closed", self.backend, self.name)

    def __enter__(self) -> Throttle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"share={self._share:g}"
        return f"<{type(self).__name__} {self.name!r} {state}>"

    def _require_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.backend} throttle {self.name!r} is closed")

    def _check_pid(self, pid: int) -> psutil.Process:
        if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
            raise ValueError(f"pid must be a positive int, got {pid!r}")
        if pid == os.getpid():
            raise ValueError(f"refusing to throttle the calling process itself (pid {pid})")
        try:
            return psutil.Process(pid)
        except psutil.NoSuchProcess:
            raise ProcessLookupError(f"no process with pid {pid} to attach") from None


def _check_share(share: float) -> float:
    try:
        value = float(share)
    except (TypeError, ValueError):
        raise ValueError(f"share must be a number in [0, 1], got {share!r}") from None
    if not (0.0 <= value <= 1.0) or math.isnan(value):
        raise ValueError(f"share must be in [0, 1] (a fraction of one CPU; 0 suspends), got {share!r}")
    return value + 0.0  # -0.0 becomes 0.0
