"""Counts the CPU seconds of a changing set of processes with psutil (duty backend; cgroup v1 without cpuacct)."""

from __future__ import annotations

import psutil


class CpuAccountant:
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
