"""Runs a real program per job, in its own process group, with a file descriptor that is readable when it exits.

How exit is signalled (:meth:`CommandRun.fileno`), chosen for one exact rule,
*readable means exited, and poll() then has the exit code*:

- Linux >= 5.3: a **pidfd** (``os.pidfd_open``) of the program. It becomes
  readable when the program becomes a zombie, so ``poll()`` reaps it at once.
- elsewhere: a pipe that a waiter thread (blocked in ``waitpid``, without the
  GIL) writes one byte to after reaping the program.

Both ignore the program's descendants: a job that leaves a background process
behind is finished when the program exits (close() then sweeps the group).
A pipe whose write end the program inherits was rejected: its EOF means "every
holder closed it", which comes too late when a background child keeps it, too
early when the program closes its inherited fds, and a moment before the exit
status can be collected even in the plain case (files are closed before the
process turns zombie). :attr:`CommandRun.notify` says which one is in use.
The fd stays readable after the exit: unregister it from the poller once handled.

The program's stdin is /dev/null, its stdout is /dev/null unless asked
otherwise, and its stderr goes to an unlinked temporary file (no pipe, so no
deadlock however much it writes; the file is on the temp directory's disk) of
which :meth:`CommandRun.stderr_tail` returns the end, for error reports.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import IO, Any

log = logging.getLogger(__name__)

# How much of stderr an error report quotes by default: enough for a Python
# traceback, small enough for a Failed message (protocol MAX_STR is 4096 chars).
STDERR_TAIL = 2048
# How much of it close() keeps, for stderr_tail() after the temporary file is gone.
_TAIL_KEPT = 16 * 1024
# How long kill() waits to reap the SIGKILLed program (D-state I/O can delay it).
_REAP_TIMEOUT = 5.0

_pidfd_open = getattr(os, "pidfd_open", None)  # a module attribute so tests can force the thread fallback


class CommandRun:
    """One program run for one job; created running.

    ``env`` (the job's parameters: MGST_JOB, MGST_CLASS, ...) is merged over
    ``os.environ``; with ``inherit_env=False`` it is the program's complete
    environment instead (nothing of this process's leaks in; the program is
    still looked up on ``env``'s PATH, else os.defpath). Raises what
    ``subprocess.Popen`` raises (e.g. FileNotFoundError for a missing
    program); nothing is left open then.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        *,
        stdout: int | IO[Any] | None = subprocess.DEVNULL,
        inherit_env: bool = True,
    ):
        if not argv:
            raise ValueError("empty argv")
        self._closed = False
        self._tail_cache = b""
        self._read_fd = -1
        self._err = tempfile.TemporaryFile(prefix="mgst-stderr-")
        try:
            self._proc = subprocess.Popen(
                list(argv),
                env={**os.environ, **(env or {})} if inherit_env else dict(env or {}),
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=self._err,
                start_new_session=True,  # pgid == pid: kill() reaches the whole tree
            )
        except BaseException:
            self._closed = True
            self._err.close()
            raise
        try:
            if _pidfd_open is not None:
                self._read_fd = _pidfd_open(self._proc.pid)  # the program can't be reaped yet: only we reap it
                self.notify = "pidfd"
            else:
                self._read_fd, write_fd = os.pipe()
                threading.Thread(
                    target=self._wait_and_signal, args=(write_fd,), name=f"wait-{self._proc.pid}", daemon=True
                ).start()
                self.notify = "thread"
        except BaseException:
            self.close()
            raise
        log.debug("command %r started: pid %d (exit via %s)", list(argv)[:3], self._proc.pid, self.notify)

    def _wait_and_signal(self, write_fd: int) -> None:
        try:
            self._proc.wait()  # sets returncode before the byte is written: readable implies poll() is not None
            os.write(write_fd, b"x")
        except OSError:  # close() came first and closed the read end: nobody is listening
            pass
        finally:
            os.close(write_fd)

    @property
    def pid(self) -> int:
        """The program's pid, which is also its process group (and session) id."""
        return self._proc.pid

    def fileno(self) -> int:
        """Readable once the program has exited; poll() then returns its exit code."""
        if self._closed:
            raise ValueError("CommandRun is closed")
        return self._read_fd

    def poll(self) -> int | None:
        """Exit code once exited (and reaped), else None; ``-N`` if killed by signal N."""
        return self._proc.poll()

    @property
    def returncode(self) -> int | None:
        return self._proc.returncode

    def kill(self) -> None:
        """SIGKILL the whole process group and reap the program. Idempotent.

        Also sweeps what is left of the group after a normal exit (background
        children of the program). Descendants that left the group (``setsid``,
        daemons) are out of reach; reaping orphaned descendants is init's job.
        """
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # group already empty (or, after a pid reuse, not ours: leave it)
        if self._proc.returncode is None:
            try:
                self._proc.wait(timeout=_REAP_TIMEOUT)
            except subprocess.TimeoutExpired:
                log.warning("command pid %d not reaped %.1f s after SIGKILL", self._proc.pid, _REAP_TIMEOUT)

    def stderr_tail(self, limit: int = STDERR_TAIL) -> str:
        """The last ``limit`` bytes the program wrote to stderr, decoded leniently.

        After close(), from the last ``_TAIL_KEPT`` bytes, kept at close.
        """
        if self._closed:
            return self._tail_cache[-limit:].decode("utf-8", errors="replace") if limit > 0 else ""
        return self._tail_bytes(limit).decode("utf-8", errors="replace")

    def _tail_bytes(self, limit: int) -> bytes:
        fd = self._err.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - max(0, limit))
        # pread, not seek+read: the program shares this file offset and is writing at it.
        return os.pread(fd, size - start, start)

    def close(self) -> None:
        """kill() (a no-op on a finished, lone program), keep the stderr tail, release the fds. Idempotent."""
        if self._closed:
            return
        self.kill()
        self._tail_cache = self._tail_bytes(_TAIL_KEPT)
        self._closed = True
        self._err.close()
        if self._read_fd >= 0:
            os.close(self._read_fd)
            self._read_fd = -1

    def __enter__(self) -> CommandRun:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if hasattr(self, "_proc"):
                self.close()
        except Exception:  # best effort at interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<CommandRun pid={self._proc.pid} returncode={self._proc.returncode} closed={self._closed}>"
