"""Caps the CPU share of grid-job processes (cgroup v2, cgroup v1 or SIGSTOP/SIGCONT duty cycling) and measures it."""

from __future__ import annotations

import abc
import errno
import itertools
import logging
import math
import os
import re
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import psutil

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

# CFS bandwidth control (Documentation/scheduler/sched-bwc.rst): a group may run `quota` us of CPU per `period` us,
# summed over all its threads and CPUs, so quota = share * period caps the group at `share` of ONE CPU.
# 20 ms, not the kernel's default 100 ms: a throttled task can burn a whole period's quota in one burst,
# so a job of a few tenths of a second measured against a 100 ms period gets well over its share (seen:
# 0.6 for 0.5); at 20 ms the burst is 10 ms. Testbed jobs last 0.1-1 s.
CFS_PERIOD_US = 20_000
MIN_QUOTA_US = 1_000  # the kernel rejects quotas below 1 ms (min_cfs_quota_period): shares below 0.05 round up

# Duty cycling alternates SIGCONT for a run phase (nominally share * P) and SIGSTOP for the rest of the period P.
# P = 0.1 s, cpulimit's TIME_SLOT too: longer makes the job visibly bursty; shorter makes signal latency, the
# controller's wake-up jitter (~1 ms) and psutil's 10 ms CPU-time ticks a larger fraction of each phase.  Measured
# here, a plain share * P cycle at P = 0.05 s gave 0.40 for 0.5, at P = 0.1 s 0.46, at 0.2 s 0.50 on an idle
# machine, and far less on a busy one; hence the adaptive run phase below.
DUTY_PERIOD_S = 0.1
# The adaptive duty cycle learns how much CPU the job gets per second it is let run (see _DutyEngine) with an
# exponential moving average over cycles: 0.2 per 0.1 s cycle forgets in about half a second.  The floor bounds
# the run phase at 5 * share * P, so a job that was idle and starts computing overshoots briefly at most.
_RATE_SMOOTHING = 0.2
_MIN_RATE = 0.2
# What the rate estimate gets wrong is made up from the shortfall of the cycles before (bounded by one cycle's
# share), half of it per cycle: the average over a few cycles then converges on the share.
_DEBT_GAIN = 0.5

_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}\Z")
_seq = itertools.count()  # makes cgroup names unique within this process


class BackendUnavailable(ValueError):
    """A throttle backend cannot be used on this machine; the message names the backend and says why."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"throttle backend {backend!r} is unavailable: {reason}")
        self.backend = backend
        self.reason = reason


class _Unavailable(Exception):
    """Internal: a probe's reason for refusing a backend."""


# --------------------------------------------------------------------------------------------------------------
# The interface


class Throttle(abc.ABC):
    """Caps the CPU share of attached processes (and their descendants) and measures the share they got.

    ``share`` is a fraction of ONE CPU (the model's a_j); 1.0 means unthrottled.  A new throttle starts at 1.0
    with its measurement window open.  Use it as a context manager, or call ``close()``: closing releases every
    process (none is left stopped) and removes whatever the backend created.  A throttle is also closed when it
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
    def _apply_share(self, share: float) -> None: ...

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

    def set_share(self, share: float) -> None:
        """Cap the attached processes at ``share`` of one CPU, 0 < share <= 1; 1.0 lifts the cap."""
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
        raise ValueError(f"share must be a number in (0, 1], got {share!r}") from None
    if not (0.0 < value <= 1.0) or math.isnan(value):
        raise ValueError(f"share must be in (0, 1] (a fraction of one CPU), got {share!r}")
    return value


# --------------------------------------------------------------------------------------------------------------
# CPU accounting from psutil (duty backend; cgroup v1 without cpuacct)


class _CpuAccountant:
    """Counts CPU seconds used by a changing set of processes since each was first tracked.

    A process's figure is user + system + the times of the children it has reaped (``children_user`` and
    ``children_system``, which Linux fills in).  When a tracked process disappears, what it used is kept: on
    Linux, if its parent is tracked and alive, the parent's reaped-children times now hold the dead process's
    whole total, so only the part that predates tracking is taken back; otherwise its last sample is kept
    (losing at most one sampling interval).  Descendants that exit unreaped by a tracked process (orphans) are
    likewise counted up to their last sample.
    """

    def __init__(self) -> None:
        self._last: dict[psutil.Process, tuple[float, int]] = {}  # process -> (cpu seconds, ppid) at last sample
        self._base: dict[psutil.Process, float] = {}  # cpu seconds not to count (used before tracking began)
        self._settled = 0.0  # counted seconds of processes no longer tracked

    def track(self, proc: psutil.Process, *, since_birth: bool) -> bool:
        """Start counting ``proc``: all its CPU time (a descendant born since the last sample) or from now on."""
        if proc in self._base:
            return True
        try:
            value, ppid = _cpu_and_ppid(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return False
        self._base[proc] = 0.0 if since_birth else value
        self._last[proc] = (value, ppid)
        return True

    def untrack(self, proc: psutil.Process) -> None:
        """Stop counting ``proc`` but keep what it used while tracked."""
        if proc not in self._base:
            return
        try:
            self._last[proc] = _cpu_and_ppid(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
        self._settled += self._last.pop(proc)[0] - self._base.pop(proc)

    def sample(self) -> list[psutil.Process]:
        """Refresh every tracked process; return those that have gone (they are no longer tracked)."""
        gone: list[psutil.Process] = []
        for proc in list(self._last):
            try:
                if not proc.is_running():  # also catches a reused pid
                    raise psutil.NoSuchProcess(proc.pid)
                self._last[proc] = _cpu_and_ppid(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                gone.append(proc)
        live = {p.pid for p in self._last if p not in gone}
        for proc in gone:
            value, ppid = self._last.pop(proc)
            base = self._base.pop(proc)
            if psutil.LINUX and ppid in live:
                self._settled -= base  # its reaper's children_* now hold `value` and more; `base` predates tracking
            else:
                self._settled += value - base
        return gone

    def total(self) -> float:
        """Counted CPU seconds, as of the last sample."""
        return self._settled + sum(value - self._base[p] for p, (value, _) in self._last.items())


def _cpu_and_ppid(proc: psutil.Process) -> tuple[float, int]:
    with proc.oneshot():
        t = proc.cpu_times()
        ppid = proc.ppid()
    return t.user + t.system + t.children_user + t.children_system, ppid


# --------------------------------------------------------------------------------------------------------------
# Duty cycling


def _duty_problem() -> str | None:
    if os.name != "posix" or not hasattr(signal, "SIGSTOP"):
        return f"SIGSTOP/SIGCONT are not available on this platform ({os.name})"
    return None


class _DutyEngine:
    """The duty cycle's state and thread.

    Each cycle: SIGCONT everything stopped, refresh the member list (attached processes and their descendants)
    and the CPU count, sleep through the run phase, SIGSTOP every member, sleep to the end of the period.  The
    run phase is (share * P + half the recent shortfall) / rate, where rate is the members' CPU seconds per
    second let run, averaged over the last cycles (``adaptive=False``: rate 1, no shortfall: share * P).

    It holds no reference to its DutyThrottle, so that can be collected (and its finalizer run); every method
    takes the lock, which is re-entrant in case a finalizer runs on this thread.
    """

    def __init__(self, name: str, period: float, adaptive: bool) -> None:
        self.period = period
        self._adaptive = adaptive
        # CPU seconds the members use per second they are let run: 1 for one busy process on a free CPU, less
        # when other work competes for the CPU, k for k busy processes.  The run phase is share * P / rate.
        self._rate = 1.0
        self._ewma: tuple[float, float] | None = None  # smoothed (cpu seconds, run seconds) per cycle
        self._debt = 0.0  # CPU seconds the job fell short of share * elapsed lately (negative: got too much)
        self._cond = threading.Condition(threading.RLock())
        self._share = 1.0
        self._closed = False
        self._kick = False  # the share changed or close() was called: start the cycle again now
        self._failure: BaseException | None = None
        self._roots: dict[int, psutil.Process] = {}
        self._members: dict[int, tuple[psutil.Process, int]] = {}  # pid -> (process, pid of its attached root)
        self._stopped: dict[int, psutil.Process] = {}  # processes this engine has SIGSTOPped and not resumed
        self._acct = _CpuAccountant()
        self._own_pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name=f"mgst-duty-{name}", daemon=True)
        self._thread.start()

    # --- called by DutyThrottle

    def attach(self, proc: psutil.Process) -> None:
        with self._cond:
            self._check_alive()
            if proc.pid in self._roots and self._roots[proc.pid] == proc:
                return
            if not self._members:  # a new job: forget what was learnt about the last one
                self._rate, self._ewma = 1.0, None
            self._roots[proc.pid] = proc
            self._add(proc, proc.pid, since_birth=False)
            try:
                for child in proc.children(recursive=True):
                    self._add(child, proc.pid, since_birth=False)
            except psutil.NoSuchProcess:
                pass

    def detach(self, pid: int) -> None:
        with self._cond:
            doomed = [p for m, (p, root) in self._members.items() if m == pid or root == pid]
            member = self._members.get(pid)
            if member is not None:  # a non-root member: take its own subtree too
                try:
                    doomed += member[0].children(recursive=True)
                except psutil.NoSuchProcess:
                    pass
            self._roots.pop(pid, None)
            for proc in doomed:
                if self._members.get(proc.pid, (None,))[0] == proc:
                    del self._members[proc.pid]
                self._acct.untrack(proc)
                self._stopped.pop(proc.pid, None)
                _signal(proc, signal.SIGCONT)

    def set_share(self, share: float) -> None:
        with self._cond:
            self._check_alive()
            self._share = share
            if share >= 1.0:
                self._resume(everyone=False)
            self._kick = True
            self._cond.notify_all()

    def cpu_seconds(self) -> float:
        with self._cond:
            self._refresh()
            return self._acct.total()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._resume(everyone=True)
            self._members.clear()
            self._roots.clear()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)

    # --- the thread

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # keep the promise: nothing is left stopped
            with self._cond:
                self._failure = exc
                self._resume(everyone=True)
            log.exception("duty-cycle thread failed; every attached process was resumed")

    def _loop(self) -> None:
        start = time.monotonic()  # when this cycle's run phase is due
        previous: tuple[float, float, float | None] | None = None  # last cycle: (cpu counted, began, stopped at)
        while True:
            with self._cond:
                if self._closed:
                    return
                self._kick = False
                self._resume(everyone=False)  # the run phase begins now
                began = time.monotonic()
                self._refresh()  # after SIGCONT, so its cost does not lengthen the run phase
                used = self._acct.total()
                share = self._share
                if previous is not None and self._members:
                    cpu0, began0, stopped0 = previous
                    self._learn(used - cpu0, (stopped0 if stopped0 is not None else began) - began0)
                    self._owed(share, share * (began - began0) - (used - cpu0))
                elif previous is None:
                    self._debt = 0.0
                want = share * self.period + _DEBT_GAIN * self._debt  # CPU seconds to let the job have this cycle
                rate = self._rate
            run = self.period if share >= 1.0 else max(0.0, min(self.period, want / rate))
            stopped: float | None = None
            if run < self.period:
                if not self._sleep_until(start + run):
                    start, previous = time.monotonic(), None
                    continue
                with self._cond:
                    if self._closed:
                        return
                    if self._kick:
                        start, previous = time.monotonic(), None
                        continue
                    self._stop()
                    stopped = time.monotonic()
            previous = (used, began, stopped)
            start += self.period
            now = time.monotonic()
            if start < now - self.period:  # fell behind (a loaded machine): do not try to catch up
                start = now
            if not self._sleep_until(start):
                start, previous = time.monotonic(), None

    def _owed(self, share: float, shortfall: float) -> None:
        """Carry CPU time the job was owed (or got too much of) into the next cycles, within one cycle's worth."""
        if self._adaptive:
            limit = share * self.period
            self._debt = max(-limit, min(limit, self._debt + shortfall))

    def _learn(self, cpu: float, run: float) -> None:
        """Update the estimate of CPU seconds the members use per second they are let run."""
        if not self._adaptive or run <= 0:
            return
        if self._ewma is None:
            self._ewma = (cpu, run)
        else:
            a = _RATE_SMOOTHING
            self._ewma = ((1 - a) * self._ewma[0] + a * cpu, (1 - a) * self._ewma[1] + a * run)
        self._rate = max(_MIN_RATE, self._ewma[0] / self._ewma[1])

    def _sleep_until(self, deadline: float) -> bool:
        """Wait until ``deadline``; False if interrupted by a share change or close()."""
        with self._cond:
            while True:
                if self._closed or self._kick:
                    return False
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return True
                self._cond.wait(remaining)

    # --- helpers; the lock is held

    def _check_alive(self) -> None:
        if self._failure is not None:
            raise RuntimeError("the duty-cycle thread failed; see the log") from self._failure

    def _add(self, proc: psutil.Process, root: int, *, since_birth: bool) -> None:
        if proc.pid == self._own_pid:
            return  # never stop the controlling process (it would stop this thread too)
        if proc.pid in self._members and self._members[proc.pid][0] == proc:
            return
        if self._acct.track(proc, since_birth=since_birth):
            self._members[proc.pid] = (proc, root)

    def _refresh(self) -> None:
        """Pick up new descendants (psutil children, every cycle) and drop processes that exited."""
        for rpid, root in list(self._roots.items()):
            try:
                children = root.children(recursive=True)
            except psutil.NoSuchProcess:
                continue
            for child in children:
                # A descendant first seen now was born since the last cycle: count all its CPU time.
                self._add(child, rpid, since_birth=True)
        for proc in self._acct.sample():
            if self._members.get(proc.pid, (None,))[0] == proc:
                del self._members[proc.pid]
            if self._roots.get(proc.pid) == proc:
                del self._roots[proc.pid]
            if self._stopped.get(proc.pid) == proc:
                del self._stopped[proc.pid]
            log.debug("duty: process %d exited; dropped", proc.pid)

    def _stop(self) -> None:
        for pid, (proc, _) in list(self._members.items()):
            if _signal(proc, signal.SIGSTOP):
                self._stopped[pid] = proc
            else:
                self._members.pop(pid, None)

    def _resume(self, *, everyone: bool) -> None:
        procs = {p.pid: p for p in self._stopped.values()}
        if everyone:
            procs.update((pid, p) for pid, (p, _) in self._members.items())
        self._stopped.clear()
        for proc in procs.values():
            _signal(proc, signal.SIGCONT)


def _signal(proc: psutil.Process, sig: int) -> bool:
    """Send ``sig``; False if the process is gone (psutil also refuses a reused pid) or not ours to signal."""
    try:
        proc.send_signal(sig)
        return True
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        log.warning("duty: not allowed to signal process %d; it is no longer throttled", proc.pid)
        return False


class DutyThrottle(Throttle):
    """Portable, unprivileged throttle: a thread SIGCONTs the processes for a run phase, SIGSTOPs them for the
    rest of each period P (0.1 s).

    Works wherever SIGSTOP does (Linux, macOS), for processes the caller may signal.  The attached processes'
    descendants are found with psutil every cycle and stay throttled after being orphaned.  The backend owns
    SIGSTOP/SIGCONT of its processes: it will resume a process someone else stopped.

    The run phase is share * P / rate, where rate is the CPU the processes were measured to use per second
    they were let run (a moving average, see ``_DutyEngine``).  For one busy process on a free CPU rate is 1
    and this is the plain share * P duty cycle; when other work takes part of the CPU during the run phase, or
    the job runs k busy processes, the run phase stretches or shrinks so that the job's total still comes to
    ``share`` of one CPU, as under a cgroup quota.  ``adaptive=False`` keeps the plain share * P cycle (then a
    job of k busy processes gets up to k * share, and contention comes off the share).

    ``achieved()`` counts psutil's user + system times of the attached processes and their live descendants,
    plus exited descendants as described in ``_CpuAccountant``; it is sampled once per cycle and when read.
    """

    backend = "duty"

    def __init__(self, name: str = "mgst", period: float = DUTY_PERIOD_S, adaptive: bool = True) -> None:
        problem = _duty_problem()
        if problem:
            raise BackendUnavailable(self.backend, problem)
        if not 0.005 <= period <= 10.0:
            raise ValueError(f"duty period must be within [0.005, 10] s, got {period!r}")
        super().__init__(name)
        self._engine = _DutyEngine(name, period, adaptive)
        # The finalizer holds the engine, not self: it resumes everything when this throttle is collected or
        # when the interpreter exits (weakref.finalize's atexit hook), whichever comes first.
        self._finalizer = weakref.finalize(self, self._engine.close)

    def attach(self, pid: int) -> None:
        proc = self._check_pid(pid)
        self._require_open()
        self._engine.attach(proc)
        log.debug("duty throttle %s: attached %d", self.name, pid)

    def detach(self, pid: int) -> None:
        self._require_open()
        self._engine.detach(pid)
        log.debug("duty throttle %s: detached %d", self.name, pid)

    def _apply_share(self, share: float) -> None:
        self._engine.set_share(share)

    def _cpu_seconds(self) -> float:
        return self._engine.cpu_seconds()


# --------------------------------------------------------------------------------------------------------------
# cgroups: where the hierarchies are


@dataclass(frozen=True, slots=True)
class _Mount:
    path: Path
    fstype: str
    options: frozenset[str]


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _mounts() -> list[_Mount]:
    try:
        text = Path("/proc/mounts").read_text()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 4:
            mounts.append(_Mount(Path(_unescape(fields[1])), fields[2], frozenset(fields[3].split(","))))
    return mounts


def _proc_cgroups(pid: int | str = "self") -> dict[str, str]:
    """Controller (or "name=...", or "" for the v2 hierarchy) -> cgroup path, from /proc/<pid>/cgroup."""
    paths: dict[str, str] = {}
    try:
        text = Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return paths
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def _v1_mount(controller: str) -> Path | None:
    for m in _mounts():
        if m.fstype == "cgroup" and controller in m.options:
            return m.path
    return None


def _own_dir(mount: Path, key: str) -> Path:
    """This process's cgroup directory in the hierarchy mounted at ``mount`` (the mount root if not visible)."""
    rel = _proc_cgroups().get(key, "/").lstrip("/")
    candidate = mount / rel
    return candidate if rel and candidate.is_dir() else mount


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except OSError:
        return []


def _write(path: Path, value: str) -> None:
    """One write(2) of ``value``, as cgroup files require; errors say which file."""
    try:
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as e:
        raise type(e)(e.errno, f"writing {value!r} to {path}: {e.strerror}") from e


def _read_pids(path: Path) -> list[int]:
    return [int(w) for w in _words(path)]


def _probe_mkdir(parent: Path, check: str) -> None:
    """Create and remove a child cgroup to prove we may; ``check`` is a file the child must have."""
    probe = parent / f"mgst-probe-{os.getpid()}-{next(_seq)}"
    try:
        probe.mkdir()
    except OSError as e:
        raise _Unavailable(f"cannot create a cgroup under {parent}: {e.strerror}") from None
    try:
        if not (probe / check).exists():
            raise _Unavailable(f"a child cgroup of {parent} has no {check}")
    finally:
        try:
            probe.rmdir()
        except OSError as e:
            log.warning("could not remove probe cgroup %s: %s", probe, e.strerror)


def _new_cgroup(parent: Path, name: str) -> Path:
    for _ in range(1000):
        path = parent / f"mgst-{name}-{os.getpid()}-{next(_seq)}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, f"no free cgroup name under {parent}")


@dataclass(frozen=True, slots=True)
class _Cg1Layout:
    cpu_parent: Path
    acct_parent: Path | None  # None: cpuacct is not mounted; the same as cpu_parent when co-mounted


def _cgroup1_layout(probe: bool) -> _Cg1Layout:
    mount = _v1_mount("cpu")
    if mount is None:
        raise _Unavailable("no cgroup v1 hierarchy with the cpu controller is mounted (see /proc/mounts)")
    parent = _own_dir(mount, "cpu")
    if not (parent / "cpu.cfs_quota_us").exists():
        raise _Unavailable(f"{parent} has no cpu.cfs_quota_us (kernel without CONFIG_CFS_BANDWIDTH?)")
    if not os.access(parent, os.W_OK):
        raise _Unavailable(f"{parent} is not writable by this user (uid {os.getuid()})")
    acct_mount = _v1_mount("cpuacct")
    acct_parent = None if acct_mount is None else _own_dir(acct_mount, "cpuacct")
    if probe:
        _probe_mkdir(parent, "cpu.cfs_quota_us")
        if acct_parent is not None and acct_parent != parent:
            _probe_mkdir(acct_parent, "cpuacct.usage")
    return _Cg1Layout(parent, acct_parent)


def _cgroup2_layout(probe: bool) -> tuple[Path, Path]:
    """(mount root, parent cgroup with the cpu controller enabled for its children)."""
    mounts = [m.path for m in _mounts() if m.fstype == "cgroup2"]
    if not mounts:
        raise _Unavailable("no cgroup2 hierarchy is mounted (see /proc/mounts)")
    mount = mounts[0]
    here = _own_dir(mount, "")
    for parent in (here, *here.parents):
        if "cpu" in _words(parent / "cgroup.subtree_control"):
            break
        if parent == mount:
            raise _Unavailable(_cgroup2_why_no_cpu(mount))
    else:  # pragma: no cover - here is always under mount
        raise _Unavailable(_cgroup2_why_no_cpu(mount))
    if not os.access(parent, os.W_OK):
        raise _Unavailable(f"{parent} is not writable by this user (uid {os.getuid()})")
    if probe:
        _probe_mkdir(parent, "cpu.max")
    return mount, parent


def _cgroup2_why_no_cpu(mount: Path) -> str:
    controllers = _words(mount / "cgroup.controllers")
    if "cpu" not in controllers:
        v1 = _v1_mount("cpu")
        bound = f"; it is bound to the cgroup v1 hierarchy at {v1}" if v1 is not None else ""
        return (
            f"the cpu controller is not available in the cgroup2 hierarchy at {mount} "
            f"(its cgroup.controllers lists: {' '.join(controllers) or 'nothing'}){bound}"
        )
    return (
        f"the cpu controller is not enabled for child cgroups here (cgroup.subtree_control of {mount} lacks "
        f"'cpu'); `echo +cpu > {mount}/cgroup.subtree_control` would change the machine's cgroup setup, "
        "so mgst leaves it to the administrator"
    )


# --------------------------------------------------------------------------------------------------------------
# cgroups: the throttles


class _CgroupSet:
    """The cgroup directories one throttle created, and where their processes go back to.  Closing it (the
    finalizer's job too) moves every remaining process out and removes the directories."""

    def __init__(self) -> None:
        self.homes: dict[Path, list[Path]] = {}  # created cgroup -> where its leftovers go, in order of preference
        self.home_of: dict[int, Path] = {}  # cgroup v2: each attached process's original cgroup
        self.closed = False

    def evict(self, pid: int, child: Path) -> None:
        """Move ``pid`` out of ``child`` (into the first home that accepts it)."""
        own = self.home_of.get(pid)
        homes = [own, *self.homes[child]] if own is not None else self.homes[child]
        errors = []
        for home in homes:
            if home == child or not home.is_dir():
                continue
            try:
                _write(home / "cgroup.procs", str(pid))
                return
            except ProcessLookupError:
                return
            except OSError as e:
                errors.append(str(e))
        log.warning("could not move process %d out of %s: %s", pid, child, "; ".join(errors) or "no home cgroup")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for child in reversed(list(self.homes)):
            self._remove(child)

    def _remove(self, child: Path) -> None:
        # Lift the limit first: a task moved out while its group is throttled can stay unscheduled
        # (seen here for 0.3-0.6 s and more) until the kernel unthrottles that group, and removing the
        # group may leave nothing to do it. Lifting the limit unthrottles the group's queues at once.
        for knob, unlimited in (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max")):
            try:
                _write(child / knob, unlimited)
            except OSError:
                pass  # not this hierarchy's knob, or already gone
        deadline = time.monotonic() + 2.0
        while True:
            for pid in _read_pids(child / "cgroup.procs"):
                self.evict(pid, child)
            try:
                child.rmdir()
                log.debug("removed cgroup %s", child)
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.error("could not remove cgroup %s: %s", child, e.strerror)
                    return
                time.sleep(0.01)  # a process forked while we moved its parent; go round again


class _CgroupThrottle(Throttle):
    """What the two cgroup backends share: a set of child cgroups that processes are written into."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._cg = _CgroupSet()
        self._finalizer = weakref.finalize(self, self._cg.close)

    @property
    def paths(self) -> tuple[Path, ...]:
        """The cgroup directories this throttle created (gone after close())."""
        return tuple(self._cg.homes)

    def _create(self, parent: Path, *fallbacks: Path) -> Path:
        path = _new_cgroup(parent, self.name)
        self._cg.homes[path] = [parent, *fallbacks]
        log.debug("created cgroup %s", path)
        return path

    def _fail(self, exc: OSError) -> BackendUnavailable:
        self.close()
        return BackendUnavailable(self.backend, str(exc))

    def _remember_home(self, pid: int) -> None:
        """Hook: note where ``pid`` came from before it is moved (cgroup v2)."""

    def attach(self, pid: int) -> None:
        root = self._check_pid(pid)
        self._require_open()
        self._remember_home(pid)
        for path in self.paths:
            try:
                _write(path / "cgroup.procs", str(pid))
            except ProcessLookupError:
                raise ProcessLookupError(f"process {pid} exited before it could be attached") from None
        # Children forked from now on inherit the cgroup; move the ones that already exist (twice round, for
        # any forked by a descendant while we moved it).
        for _ in range(3):
            inside = set(_read_pids(self.paths[0] / "cgroup.procs"))
            try:
                outside = [c.pid for c in root.children(recursive=True) if c.pid not in inside]
            except psutil.NoSuchProcess:
                break
            if not outside:
                break
            for child in outside:
                self._remember_home(child)
                for path in self.paths:
                    try:
                        _write(path / "cgroup.procs", str(child))
                    except ProcessLookupError:
                        break
        log.debug("%s throttle %s: attached %d", self.backend, self.name, pid)

    def detach(self, pid: int) -> None:
        self._require_open()
        try:
            pids = {pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))}
        except psutil.NoSuchProcess:
            pids = {pid}
        for path in self.paths:
            for member in set(_read_pids(path / "cgroup.procs")) & pids:
                self._cg.evict(member, path)
        for member in pids:
            self._cg.home_of.pop(member, None)
        log.debug("%s throttle %s: detached %d", self.backend, self.name, pid)


class Cgroup1Throttle(_CgroupThrottle):
    """cgroup v1: a child of this process's cgroup in the cpu hierarchy, capped by CFS bandwidth control.

    The cgroup is ``mgst-<name>-<our pid>-<n>`` with ``cpu.cfs_period_us`` = CFS_PERIOD_US and ``cpu.cfs_quota_us`` =
    share * period (-1 when share is 1; at least 1000).  When cpuacct is mounted as its own hierarchy a cgroup of
    the same name is made there too, and processes are written into both.

    ``achieved()`` counts ``cpuacct.usage``: the CPU time (user + system) of every task while it was inside the
    cgroup, including descendants that have exited.  Without cpuacct it falls back to psutil (see DutyThrottle).
    """

    backend = "cgroup1"

    def __init__(self, name: str = "mgst") -> None:
        try:
            layout = _cgroup1_layout(probe=False)
        except _Unavailable as e:
            raise BackendUnavailable(self.backend, str(e)) from None
        super().__init__(name)
        self._acct_dir: Path | None = None
        self._acct: _CpuAccountant | None = None
        try:
            self._cpu_dir = self._create(layout.cpu_parent)
            _write(self._cpu_dir / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(self._cpu_dir / "cpu.cfs_quota_us", "-1")
            if layout.acct_parent == layout.cpu_parent:
                self._acct_dir = self._cpu_dir  # cpu,cpuacct co-mounted
            elif layout.acct_parent is not None:
                self._acct_dir = self._create(layout.acct_parent)
        except OSError as e:
            raise self._fail(e) from e
        if self._acct_dir is None:
            log.info("cgroup1: cpuacct is not mounted; measuring with psutil")
            self._acct = _CpuAccountant()

    def _apply_share(self, share: float) -> None:
        quota = -1 if share >= 1.0 else max(MIN_QUOTA_US, round(share * CFS_PERIOD_US))
        _write(self._cpu_dir / "cpu.cfs_quota_us", str(quota))

    def _cpu_seconds(self) -> float:
        if self._acct_dir is not None:
            return int((self._acct_dir / "cpuacct.usage").read_text()) / 1e9
        assert self._acct is not None
        for pid in _read_pids(self._cpu_dir / "cgroup.procs"):
            try:
                self._acct.track(psutil.Process(pid), since_birth=True)
            except psutil.NoSuchProcess:
                pass
        self._acct.sample()
        return self._acct.total()


class Cgroup2Throttle(_CgroupThrottle):
    """cgroup v2: a child cgroup (under the nearest ancestor of ours that enables the cpu controller for its
    children) with ``cpu.max`` = "<share * period> <period>" (period CFS_PERIOD_US), or "max <period>" when share is 1.

    Processes leave the way they came: back to the cgroup each was in when attached (v2 forbids processes in
    a non-root cgroup that hands controllers down, so "the parent" is not always a valid home).

    ``achieved()`` counts ``usage_usec`` of the cgroup's ``cpu.stat``: the CPU time (user + system) of every task
    while it was inside, including descendants that have exited.
    """

    backend = "cgroup2"

    def __init__(self, name: str = "mgst") -> None:
        try:
            mount, parent = _cgroup2_layout(probe=False)
        except _Unavailable as e:
            raise BackendUnavailable(self.backend, str(e)) from None
        super().__init__(name)
        self._mount = mount
        try:
            self._dir = self._create(parent, mount)
            _write(self._dir / "cpu.max", f"max {CFS_PERIOD_US}")
        except OSError as e:
            raise self._fail(e) from e

    def _remember_home(self, pid: int) -> None:
        rel = _proc_cgroups(pid).get("")
        if rel is not None:
            home = self._mount / rel.lstrip("/")
            if home not in self.paths:
                self._cg.home_of[pid] = home

    def _apply_share(self, share: float) -> None:
        quota = "max" if share >= 1.0 else str(max(MIN_QUOTA_US, round(share * CFS_PERIOD_US)))
        _write(self._dir / "cpu.max", f"{quota} {CFS_PERIOD_US}")

    def _cpu_seconds(self) -> float:
        for line in (self._dir / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(errno.EIO, f"no usage_usec in {self._dir / 'cpu.stat'}")


# --------------------------------------------------------------------------------------------------------------
# Choosing a backend

_CLASSES: dict[str, Callable[[str], Throttle]] = {
    "cgroup2": Cgroup2Throttle,
    "cgroup1": Cgroup1Throttle,
    "duty": DutyThrottle,
}


def _problem(probe: Callable[[], object]) -> str | None:
    try:
        probe()
    except _Unavailable as e:
        return str(e)
    return None


_PROBES: dict[str, Callable[[], str | None]] = {
    "cgroup2": lambda: _problem(lambda: _cgroup2_layout(probe=True)),
    "cgroup1": lambda: _problem(lambda: _cgroup1_layout(probe=True)),
    "duty": _duty_problem,
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
            log.info("throttle backend: %s", candidate)
            return throttle
        raise BackendUnavailable("auto", "no backend works here (" + "; ".join(reasons) + ")")
    if backend not in _CLASSES:
        raise ValueError(f"unknown throttle backend {backend!r}; expected 'auto' or one of {', '.join(BACKENDS)}")
    return _CLASSES[backend](name)
