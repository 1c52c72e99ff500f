"""Kills a puller's command jobs (their whole process groups) once the puller is gone, even SIGKILLed.

A command job runs in its own session (so that a kill reaches its whole tree): nothing ties it to its
puller, and a puller that dies without its ``finally`` (SIGKILL, the OOM killer, a power-cut of its
terminal's session) would leave its jobs computing, or stopped by the throttle, for ever, on a lab machine
whose next run they would slow. A parent-death signal would end the program only, not its children,
and fires when the forking *thread* exits.

So a puller that runs commands starts one small guardian: a separate process in its own session (a kill of
the puller's group does not reach it), running this file with only the standard library. The puller writes
``+PGID`` when a job starts and ``-PGID`` when it has reaped it, one line each, down a pipe of which the
puller holds the only write end (no other child inherits it). When the pipe ends, because the puller closed
it or because the kernel closed it on the puller's death, the guardian SIGKILLs every group still listed (a
stopped or frozen one too) and exits. A group stays listed until the puller has reaped its leader, so its id
cannot have been reused while it is listed, except in the instant between the puller's death and the
guardian's kill (the orphaned leader is reaped by init then). ``--parent`` names the puller, for ps.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys

log = logging.getLogger(__name__)

__all__ = ["Guardian"]

# The most groups the guardian lists: a puller runs one command per slot, so this is never reached by a
# puller that works; a broken one cannot make the guardian grow.
MAX_GROUPS = 4096
MAX_RESTARTS = 8  # a guardian that keeps dying is not started for ever
_MAX_LINE = 32  # "+" and a pid, with room
_REAP_TIMEOUT = 5.0  # seconds close() waits for the guardian after closing its pipe


class Guardian:
    """The puller's side: starts the guardian process, tells it which job groups are live, stops it.

    A guardian that dies on its own (killed by hand, by a reaper of stray processes) is noticed at the next
    line written to it and started again, at most :data:`MAX_RESTARTS` times, with the groups still live
    written to the new one first: a puller killed after that still leaves nothing behind. One that could not be
    started (no processes left to the user for a moment) is tried again at the next line, within the same count.
    """

    def __init__(self) -> None:
        self._groups: set[int] = set()  # the live groups, as the guardian process was last told
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.restarts = 0
        self._unguarded = False  # past MAX_RESTARTS: said once, then the puller goes on without a guardian
        self._start()

    def _start(self) -> None:
        """A new guardian process, told of every group still live."""
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), "--parent", str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, bufsize=0,
                start_new_session=True,  # a kill of the puller's process group leaves it to clean up
            )
        except OSError as e:
            log.warning("cannot start a guardian of command jobs (%s): a puller killed now would leave its jobs", e)
            return
        self._proc = proc
        log.debug("guardian of command jobs: pid %d", proc.pid)
        if self._groups:
            self._say(b"".join(b"+%d\n" % pgid for pgid in sorted(self._groups)))

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def watch(self, pgid: int) -> None:
        """A job's process group is live: killed if the puller dies before :meth:`release`."""
        if len(self._groups) < MAX_GROUPS:
            self._groups.add(pgid)
        self._say(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        """The job's leader is reaped (its group killed): the guardian forgets it."""
        self._groups.discard(pgid)
        self._say(b"-%d\n" % pgid)

    def _say(self, line: bytes) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None:  # none could be started: tried again (it is told this line's change)
            self._replace("it could not be started")
            return
        try:
            data = memoryview(line)  # unbuffered: the guardian reads at once (a line < PIPE_BUF is one atomic write;
            while data:  # a restart's list of groups may be longer, and a signal may cut a long write short)
                data = data[proc.stdin.write(data) or 0:]
        except OSError as e:  # it died (killed on its own): reaped, and started again while restarts remain
            self._reap(proc)
            self._replace(f"it is gone ({e})")

    def _replace(self, why: str) -> None:
        """Start a guardian in place of one that is gone or never started, while restarts remain; it is told of
        every live group, the change being written included."""
        if self._closed or self._unguarded:
            return
        if self.restarts >= MAX_RESTARTS:
            self._unguarded = True
            log.warning("the guardian of command jobs: %s, after %d restarts: a puller killed now would leave its "
                        "jobs", why, self.restarts)
            return
        self.restarts += 1
        log.warning("the guardian of command jobs: %s; starting another (%d of %d)", why, self.restarts, MAX_RESTARTS)
        self._start()

    def _reap(self, proc: subprocess.Popen[bytes]) -> None:
        """Close ``proc``'s pipe (it kills what it still lists, normally nothing) and wait for it."""
        if self._proc is proc:
            self._proc = None
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=_REAP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        """End the guardian (it kills what is still listed, normally nothing) and reap it. Idempotent."""
        self._closed = True
        proc = self._proc
        if proc is not None:
            self._reap(proc)


def _kill_groups(groups: set[int]) -> None:
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)  # stopped or (cgroup v2) frozen members too
        except (ProcessLookupError, PermissionError):
            pass


def serve(stdin: int) -> None:
    """The guardian's loop: list groups from ``stdin``'s lines until it ends, then kill the listed ones."""
    groups: set[int] = set()
    buffer = b""
    while True:  # (lines the puller wrote before it died are still in the pipe, before its end)
        try:
            chunk = os.read(stdin, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        if len(buffer) > _MAX_LINE:  # not a line this protocol writes: dropped
            buffer = b""
        for line in lines:
            if len(line) < 2 or len(line) > _MAX_LINE or not line[1:].isdigit():
                continue
            pgid = int(line[1:])
            if pgid <= 1:
                continue
            if line[:1] == b"+" and len(groups) < MAX_GROUPS:
                groups.add(pgid)
            elif line[:1] == b"-":
                groups.discard(pgid)
    _kill_groups(groups)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] != "--parent" or not argv[1].isdigit():
        print("usage: guardian.py --parent PID (started by a puller)", file=sys.stderr)
        return 2
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):  # only its pipe's end ends it
        signal.signal(sig, signal.SIG_IGN)
    serve(sys.stdin.fileno())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
