"""Share 0 by signals: SIGSTOP a throttle's processes, and SIGCONT exactly those it stopped."""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Iterable

import psutil

log = logging.getLogger(__name__)

# A stopped process cannot fork, so each look at the members finds only children forked by a process not yet
# stopped when the look before was taken: one generation per look.  A job that keeps forking faster than it
# can be stopped is stopped as far as this many looks got, and the rest is logged; jobs fork a few levels deep.
MAX_STOP_LOOKS = 50
# A SIGSTOP takes effect when its process next runs (the process handles it itself): at once on an idle CPU,
# after the processes queued before it on a busy one.  Suspending waits this long for the kernel to show every
# process stopped (a process that forks in the meantime is found by the next look); past it, the wait ends with
# a WARNING and the stop still lands when the process runs.
SUSPEND_WAIT_S = 1.0
_POLL_S = 0.001  # the processes' states are read this often while waiting
_NOT_RUNNING = frozenset({psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD})


def send_signal(proc: psutil.Process, sig: int) -> bool:
    """Send ``sig``; False if the process is gone (psutil also refuses a reused pid) or not ours to signal."""
    try:
        proc.send_signal(sig)
        return True
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        log.warning("not allowed to signal process %d; it is no longer throttled", proc.pid)
        return False


def wait_stopped(procs: Iterable[psutil.Process], timeout: float = SUSPEND_WAIT_S) -> bool:
    """Wait until each of ``procs`` is stopped (or gone); False, with a WARNING, if one is not within ``timeout``."""
    pending = list(procs)
    deadline = time.monotonic() + timeout
    while True:
        pending = [p for p in pending if not _not_running(p)]
        if not pending:
            return True
        if time.monotonic() >= deadline:
            log.warning("processes %s not stopped %.1f s after SIGSTOP", [p.pid for p in pending], timeout)
            return False
        time.sleep(_POLL_S)


def _not_running(proc: psutil.Process) -> bool:
    try:
        return proc.status() in _NOT_RUNNING
    except psutil.NoSuchProcess:
        return True


class StoppedSet:
    """The processes a throttle SIGSTOPped for share 0, so that it resumes those and no others.

    SIGSTOP cannot be caught or ignored, and SIGKILL still ends a stopped process (a cancelled job is killed at
    once).  It is visible to the job's parent as a stopped child (``waitpid`` with WUNTRACED), and a job may
    SIGCONT its own children: the throttle owns stopping and continuing its processes while it holds them.
    """

    def __init__(self) -> None:
        self._stopped: dict[int, psutil.Process] = {}
        self._own_pid = os.getpid()

    def __len__(self) -> int:
        return len(self._stopped)

    def stop_all(self, members: Callable[[], Iterable[int]]) -> None:
        """SIGSTOP every process ``members()`` lists, wait until they are stopped, and look again until a look
        finds none it has not stopped (a child forked before its parent stopped)."""
        for _ in range(MAX_STOP_LOOKS):
            new = [pid for pid in members() if pid != self._own_pid and not self._holds(pid)]
            if not new:
                return
            signalled = []
            for pid in new:
                try:
                    proc = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    continue
                if send_signal(proc, signal.SIGSTOP):
                    self._stopped[pid] = proc
                    signalled.append(proc)
            wait_stopped(signalled)
        log.warning("processes still forking after %d rounds of SIGSTOP; the newest may run", MAX_STOP_LOOKS)

    def resume(self, pids: Iterable[int] | None = None) -> None:
        """SIGCONT the processes this set stopped (those of ``pids`` only, if given) and forget them."""
        chosen = list(self._stopped) if pids is None else [pid for pid in pids if pid in self._stopped]
        for pid in chosen:
            send_signal(self._stopped.pop(pid), signal.SIGCONT)

    def _holds(self, pid: int) -> bool:
        proc = self._stopped.get(pid)
        if proc is None:
            return False
        if proc.is_running():  # psutil compares the start time too: False for a reused pid
            return True
        del self._stopped[pid]
        return False
