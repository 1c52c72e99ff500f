"""A calibrated compute kernel: CPU-bound work of a well-defined size, run in a persistent child process.

A job's size is drawn once as work at unit rate (ARCHITECTURE.md); a CPU-bound
puller burns it. This module turns "work" into a number of kernel iterations:

    speed = calibrate()                                   # iterations per CPU second, full speed
    iterations = round(work_units * time_unit * speed)    # work_units: JobMsg.work (x (1 - progress))

so a job of ``work_units`` model time units costs ``work_units * time_unit`` CPU
seconds however it is throttled, and takes ``work_units * time_unit / a_j`` wall
seconds when the adjuster holds the child at CPU share a_j. Speed is measured
in *CPU* time of the calibrating thread (``time.thread_time``), so a busy
machine or the puller's own ZeroMQ I/O threads do not bias it; what contention
still changes (shared caches, SMT siblings, frequency scaling) is left in.

:class:`SpinWorker` runs the kernel in one persistent child process (a Python
start-up costs 70-100 ms here, too slow per job), so that the puller's
single-threaded loop never blocks: it polls :meth:`SpinWorker.fileno` and calls
:meth:`SpinWorker.result` when it is readable. The child is this very file run
with ``python -I -S spin.py --serve`` (stdlib only: the child imports nothing
else, and runs the same kernel source as the parent's :func:`calibrate`).

Child protocol, one ASCII line each way (``python -m puller.spin --serve [--parent PID]`` also works):

    parent -> child   ``run <job_id> <iterations>``
    child -> parent   ``done <job_id> <cpu_seconds> <wall_seconds> <checksum>``

The child exits by itself when its stdin reaches EOF (its parent died or closed
it) or its parent pid changes (checked every second, in case the pipe's write
end leaked into another process) — even in the middle of a job: a watcher
thread reads stdin while the main thread computes.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType

log = logging.getLogger(__name__)

# The kernel: a 31-bit linear congruential generator (the ANSI C rand() constants).
# State and products stay below 2**62 (two CPython int digits), so every
# iteration costs the same: no growth, no allocation beyond the small-int path.
_LCG_A = 1103515245
_LCG_C = 12345
_LCG_MASK = 0x7FFFFFFF
_SEED = 20240601

# Calibration: double the chunk until one chunk takes at least this much CPU
# time (timer resolution is ~1 us, so ~1e-3 relative error at worst) ...
_MIN_CHUNK_CPU = 0.02
# ... and take the median of at least this many such chunks.
_MIN_SAMPLES = 5

# The child checks its parent pid this often (seconds), besides watching stdin EOF.
_ORPHAN_CHECK = 1.0
# How long cancel()/close() wait to reap a SIGKILLed child before leaving it for later.
_REAP_TIMEOUT = 2.0


def kernel(iterations: int) -> int:
    """Burn ``iterations`` LCG steps in pure Python; return the final state (a checksum).

    Deterministic: the same ``iterations`` always give the same checksum.
    Cost per iteration is constant (~30-60 ns on current CPUs, CPython 3.11).
    """
    x, a, c, m = _SEED, _LCG_A, _LCG_C, _LCG_MASK
    for _ in range(iterations):
        x = (x * a + c) & m
    return x


def calibrate(seconds: float = 0.5) -> float:
    """Kernel iterations per CPU second at full speed on this machine.

    Runs the kernel in doubling chunks until one chunk takes ``_MIN_CHUNK_CPU``
    of CPU (this also warms up caches and the CPU clock), then repeats that chunk
    until ``seconds`` of CPU have been spent (at least ``_MIN_SAMPLES`` times)
    and returns the median rate. Measured in thread CPU time, so it is about
    the machine, not about how busy it is right now. Call it before the
    adjuster throttles anything (the calibrating process is not throttled).
    """
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    n = 1000
    while True:
        t0 = time.thread_time()
        kernel(n)
        dt = time.thread_time() - t0
        if dt >= _MIN_CHUNK_CPU:
            break
        n *= 2
    rates: list[float] = []
    spent = 0.0
    while spent < seconds or len(rates) < _MIN_SAMPLES:
        t0 = time.thread_time()
        kernel(n)
        dt = time.thread_time() - t0
        spent += dt
        if dt > 0:
            rates.append(n / dt)
    speed = statistics.median(rates)
    log.debug(
        "spin kernel: %.4g iterations/s (median of %d chunks of %d; min %.4g, max %.4g)",
        speed,
        len(rates),
        n,
        min(rates),
        max(rates),
    )
    return speed


class WorkerBusy(RuntimeError):
    """start() while a job is running: one job at a time per worker."""


class WorkerDied(RuntimeError):
    """The worker's child process died on its own (killed from outside, crashed).

    Raised by :meth:`SpinWorker.result` after a fresh child has been started;
    ``job_id`` is the job that was lost (None if the worker was idle).
    """

    def __init__(self, job_id: int | None, returncode: int | None):
        super().__init__(f"spin worker child died (job {job_id}, returncode {returncode})")
        self.job_id = job_id
        self.returncode = returncode


_live_workers: weakref.WeakSet[SpinWorker] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for worker in list(_live_workers):
        worker.close()


class SpinWorker:
    """One persistent child process that runs :func:`kernel` jobs, one at a time, without blocking the caller.

    - :attr:`pid`: the child to throttle. **It changes** when :meth:`cancel`
      (or a crash) replaces the child; ``on_spawn(pid)`` is called for every new
      child, the first one included, so the adjuster can attach it.
    - :meth:`fileno`: readable when a result (or the child's death) is waiting;
      then call :meth:`result`. The number is **stable** for the worker's life:
      a replacement child's pipe is ``dup2``-ed onto it, so a poller that
      registers fd numbers and polls them afresh each call (``zmq.Poller``,
      ``select``, ``poll``) needs no re-registration. An epoll-based
      ``selectors``/asyncio loop does: re-register after cancel() and after
      WorkerDied (epoll dropped the old pipe and never saw the new one).
    """

    def __init__(self, on_spawn: Callable[[int], None] | None = None):
        self._on_spawn = on_spawn
        self._proc: subprocess.Popen[bytes] | None = None
        self._fd = -1  # read end of the current child's stdout, at a fixed number
        self._buf = b""
        self._job: int | None = None
        self._closed = False
        self._unreaped: list[subprocess.Popen[bytes]] = []
        self._spawn()
        _live_workers.add(self)

    # ------------------------------------------------------------------ public API

    @property
    def pid(self) -> int:
        """Pid of the current child (of the last one once closed)."""
        assert self._proc is not None
        return self._proc.pid

    @property
    def busy(self) -> bool:
        return self._job is not None

    @property
    def job_id(self) -> int | None:
        """The running job, if any."""
        return self._job

    def fileno(self) -> int:
        if self._closed:
            raise ValueError("SpinWorker is closed")
        return self._fd

    def start(self, iterations: int, job_id: int) -> None:
        """Send a job of ``iterations`` kernel steps; returns at once. Raises WorkerBusy if one is running."""
        if self._closed:
            raise ValueError("SpinWorker is closed")
        if self._job is not None:
            raise WorkerBusy(f"job {self._job} is still running; cancel() it or wait for result()")
        if iterations < 0 or int(iterations) != iterations:
            raise ValueError(f"iterations must be a non-negative integer, got {iterations!r}")
        line = b"run %d %d\n" % (job_id, iterations)
        try:
            self._send(line)
        except BrokenPipeError:
            # The idle child died (killed from outside); nothing was lost: replace it and go on.
            log.warning("spin worker child %d had died while idle; starting a new one", self.pid)
            self._replace()
            self._send(line)
        self._job = job_id

    def result(self) -> tuple[int, float, float] | None:
        """``(job_id, cpu_seconds, wall_seconds)`` of a finished job, or None if none is ready. Never blocks.

        Both times are measured by the child around the kernel: ``cpu / wall``
        is the CPU share the job achieved. Raises :class:`WorkerDied` if the
        child died on its own (a new child is already running by then).
        """
        if self._closed:
            raise ValueError("SpinWorker is closed")
        eof = False
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                eof = True
                break
            self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            parts = line.split()
            if len(parts) == 5 and parts[0] == b"done":
                job_id, cpu, wall = int(parts[1]), float(parts[2]), float(parts[3])
                if job_id != self._job:
                    log.warning("spin worker: result for job %d while running %s; dropped", job_id, self._job)
                    continue
                self._job = None
                return job_id, cpu, wall
            log.warning("spin worker: unexpected line from child %d: %r", self.pid, line[:200])
        if eof:
            lost, proc = self._job, self._proc
            assert proc is not None
            self._job = None
            self._replace()
            raise WorkerDied(lost, proc.returncode)
        return None

    def cancel(self) -> bool:
        """Stop the running job now (SIGKILL the child, start a fresh one). False if there was no job.

        Blocks only for the kill, the reap and a fork/exec (a few ms); the new
        child's interpreter start-up overlaps with the caller's work, and a job
        sent meanwhile waits in its stdin. The result of the cancelled job, even
        if it had just finished, is never returned.
        """
        if self._closed:
            raise ValueError("SpinWorker is closed")
        if self._job is None:
            return False
        log.debug("spin worker: cancelling job %d (child %d)", self._job, self.pid)
        self._job = None
        self._replace()
        return True

    def close(self) -> None:
        """Kill and reap the child, close the pipes. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._job = None
        _live_workers.discard(self)
        self._kill(self._proc)
        if self._fd >= 0:
            os.close(self._fd)
        self._reap_leftovers()

    def __enter__(self) -> SpinWorker:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # best effort at interpreter shutdown
            pass

    def __repr__(self) -> str:
        state = "closed" if self._closed else (f"running job {self._job}" if self._job is not None else "idle")
        return f"<SpinWorker pid={self._proc.pid if self._proc else None} {state}>"

    # ------------------------------------------------------------------ internals

    def _spawn(self) -> None:
        """Start a child; its stdout pipe's read end ends up at ``self._fd``."""
        r, w = os.pipe()  # both O_CLOEXEC: no other child of ours inherits them
        try:
            proc = subprocess.Popen(
                # --parent: the child may start after we died; its own getppid() would then say 1
                [sys.executable, "-I", "-S", os.path.abspath(__file__), "--serve", "--parent", str(os.getpid())],
                stdin=subprocess.PIPE,
                stdout=w,
                bufsize=0,
            )
        except BaseException:
            os.close(r)
            os.close(w)
            raise
        os.close(w)  # the child holds the only write end: EOF means it is gone
        os.set_blocking(r, False)
        if self._fd < 0:
            self._fd = r
        else:
            os.dup2(r, self._fd, inheritable=False)  # same number, new pipe; the old one is closed
            os.close(r)
        self._buf = b""
        self._proc = proc
        log.debug("spin worker: child %d started", proc.pid)
        if self._on_spawn is not None:
            self._on_spawn(proc.pid)

    def _replace(self) -> None:
        self._kill(self._proc)
        self._spawn()
        self._reap_leftovers()

    def _send(self, line: bytes) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(line)  # unbuffered, < PIPE_BUF: one atomic write, never blocks an idle child

    def _kill(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is None:
            return
        if proc.stdin is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
        if proc.poll() is None:
            try:
                proc.kill()  # SIGKILL: works on a SIGSTOPped (duty-cycled) child too
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=_REAP_TIMEOUT)
            except subprocess.TimeoutExpired:  # e.g. frozen by a cgroup v1 freezer: reap it later
                log.warning("spin worker: child %d not reaped %.1f s after SIGKILL", proc.pid, _REAP_TIMEOUT)
                self._unreaped.append(proc)

    def _reap_leftovers(self) -> None:
        self._unreaped = [p for p in self._unreaped if p.poll() is None]


# ---------------------------------------------------------------------- the child


def serve(parent: int | None = None, stdin_fd: int = 0, stdout_fd: int = 1) -> None:
    """The child's loop: run jobs read from ``stdin_fd``, write results to ``stdout_fd``.

    Exits at EOF on ``stdin_fd`` or as soon as its parent pid is not ``parent``
    (default: the parent it has now).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; Ctrl-C in its terminal is its business
    if parent is None:
        parent = os.getppid()
    jobs: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()

    def watch() -> None:
        # Blocks in select()/read() without the GIL, so it costs the kernel nothing
        # but a wake-up per command and one per _ORPHAN_CHECK.
        buf = b""
        while True:
            ready, _, _ = select.select([stdin_fd], [], [], _ORPHAN_CHECK)
            if os.getppid() != parent:
                os._exit(0)
            if not ready:
                continue
            chunk = os.read(stdin_fd, 4096)
            if not chunk:
                os._exit(0)  # parent gone or closed us: stop at once, mid-job included
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                parts = line.split()
                if len(parts) != 3 or parts[0] != b"run":
                    os.write(2, b"spin worker: bad command %r\n" % line[:200])
                    os._exit(2)
                jobs.put((int(parts[1]), int(parts[2])))

    if os.getppid() != parent:
        os._exit(0)  # orphaned before we even started
    threading.Thread(target=watch, name="stdin-watch", daemon=True).start()
    while True:
        job_id, iterations = jobs.get()
        c0, w0 = time.process_time(), time.perf_counter()
        checksum = kernel(iterations)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        os.write(stdout_fd, b"done %d %r %r %d\n" % (job_id, cpu, wall, checksum))


def _main(args: list[str]) -> None:
    if args[:1] == ["--serve"] and len(args) == 1:
        serve()
    elif args[:1] == ["--serve"] and len(args) == 3 and args[1] == "--parent" and args[2].isdigit():
        serve(int(args[2]))
    else:
        sys.exit("usage: python -m puller.spin --serve [--parent PID]   (the SpinWorker child; a line protocol)")


if __name__ == "__main__":
    _main(sys.argv[1:])
