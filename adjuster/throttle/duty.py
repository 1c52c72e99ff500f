"""The portable throttle: a thread duty-cycles the processes with SIGCONT (run phase) and SIGSTOP (the rest)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref

import psutil

from adjuster.throttle.accounting import CpuAccountant
from adjuster.throttle.base import BackendUnavailable, Throttle
from adjuster.throttle.suspend import MAX_STOP_LOOKS, send_signal, wait_stopped

log = logging.getLogger(__name__)


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


def duty_problem() -> str | None:
    if os.name != "posix" or not hasattr(signal, "SIGSTOP"):
        return f"SIGSTOP/SIGCONT are not available on this platform ({os.name})"
    return None


class _DutyEngine:
    """The duty cycle's state and thread.

    Each cycle: SIGCONT everything stopped, refresh the member list (attached processes and their descendants)
    and the CPU count, sleep through the run phase, SIGSTOP every member, sleep to the end of the period.  The
    run phase is (share * P + half the recent shortfall) / rate, where rate is the members' CPU seconds per
    second let run, averaged over the last cycles (``adaptive=False``: rate 1, no shortfall: share * P).
    At share 0 there is no run phase: every member is stopped when the share is set (and when attached), and
    each period the members are refreshed and any new one (forked just before its parent stopped) stopped.

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
        self._acct = CpuAccountant()
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
            if self._share == 0.0:
                self._suspend_all()  # suspended: it joins them now, not at the next cycle

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
                send_signal(proc, signal.SIGCONT)

    def set_share(self, share: float) -> None:
        with self._cond:
            self._check_alive()
            was, self._share = self._share, share
            if share == 0.0:
                self._suspend_all()  # suspended when this returns, not at the next cycle
            elif share >= 1.0 or was == 0.0:
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
                suspended = self._share == 0.0
                if suspended:  # no run phase: stop what joined since the last look (forked just before a stop)
                    self._suspend_all()
                else:
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
            if suspended:  # nothing is owed for a suspension: the first cycle after it starts afresh
                self._sleep_until(time.monotonic() + self.period)
                start, previous = time.monotonic(), None
                continue
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

    def _suspend_all(self) -> None:
        """Stop every member and wait until each is; look again for children forked before their parent
        stopped (a stopped process cannot fork: the looks end)."""
        for _ in range(MAX_STOP_LOOKS):
            self._refresh()
            fresh = [pid for pid in self._members if pid not in self._stopped]
            if not fresh:
                return
            self._stop()
            wait_stopped(self._stopped[pid] for pid in fresh if pid in self._stopped)
        log.warning("duty: processes still forking after %d rounds of SIGSTOP; the newest may run", MAX_STOP_LOOKS)

    def _stop(self) -> None:
        for pid, (proc, _) in list(self._members.items()):
            if send_signal(proc, signal.SIGSTOP):
                self._stopped[pid] = proc
            else:
                self._members.pop(pid, None)

    def _resume(self, *, everyone: bool) -> None:
        procs = {p.pid: p for p in self._stopped.values()}
        if everyone:
            procs.update((pid, p) for pid, (p, _) in self._members.items())
        self._stopped.clear()
        for proc in procs.values():
            send_signal(proc, signal.SIGCONT)


class DutyThrottle(Throttle):
    """Portable, unprivileged throttle: a thread SIGCONTs the processes for a run phase, SIGSTOPs them for the
    rest of each period P (0.1 s).

    Works wherever SIGSTOP does (Linux, macOS), for processes the caller may signal.  The attached processes'
    descendants are found with psutil every cycle and stay throttled after being orphaned.  The backend owns
    SIGSTOP/SIGCONT of its processes: it will resume a process someone else stopped.  Share 0 keeps them all
    stopped (SIGSTOP, which SIGKILL still overrides) until a positive share or close() resumes them.

    The run phase is share * P / rate, where rate is the CPU the processes were measured to use per second
    they were let run (a moving average, see ``_DutyEngine``).  For one busy process on a free CPU rate is 1
    and this is the plain share * P duty cycle; when other work takes part of the CPU during the run phase, or
    the job runs k busy processes, the run phase stretches or shrinks so that the job's total still comes to
    ``share`` of one CPU, as under a cgroup quota.  ``adaptive=False`` keeps the plain share * P cycle (then a
    job of k busy processes gets up to k * share, and contention comes off the share).

    ``achieved()`` counts psutil's user + system times of the attached processes and their live descendants,
    plus exited descendants as described in ``CpuAccountant``; it is sampled once per cycle and when read.
    """

    backend = "duty"

    def __init__(self, name: str = "mgst", period: float = DUTY_PERIOD_S, adaptive: bool = True) -> None:
        problem = duty_problem()
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
