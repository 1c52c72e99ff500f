"""What a puller runs a job with: emulate (a timer), spin (calibrated CPU work) or command (a real program).

Every execution object offers the same interface to the daemon: ``fileno()``
(a descriptor readable when it may have ended, or None), ``wake_at()`` (when it
ends by the clock, or inf), ``finished(now)``, ``failure()``, ``achieved(now)``
(the CPU share it got, time-weighted over its computing time), ``progress(now)``
(fraction of the job's work done, None when unknown), ``set_share(share, now)``
(0 suspends, a positive share resumes) and ``kill()``. ``puller/runner.py``
makes them, with what each slot holds (``puller/slotkit.py``: throttle, spin worker).
"""

from __future__ import annotations

import logging
import math

import psutil

from mgst.core.progress import Activity
from mgst.model import EXECUTORS
from mgst.wire import protocol as P
from puller.allowlist import CommandRefused
from puller.guardian import Guardian
from puller.slotkit import SlotKit

log = logging.getLogger(__name__)

__all__ = ["EXECUTORS", "CommandJob", "CommandRefused", "EmulatedJob", "ShareTally", "SpinJob", "job_environment"]


class ShareTally:
    """The time-weighted mean of a share that changes over time (what a job got, by the target)."""

    def __init__(self, share: float, now: float):
        self.share = share
        self.began = self.mark = now
        self._weighted = 0.0  # share x seconds up to mark

    def set(self, share: float, now: float) -> None:
        self._weighted += self.share * max(0.0, now - self.mark)
        self.mark, self.share = now, share

    def mean(self, now: float) -> float:
        wall = now - self.began
        if wall <= 0:
            return self.share
        return min(1.0, max(0.0, (self._weighted + self.share * max(0.0, now - self.mark)) / wall))


class EmulatedJob:
    """Holds the job for (1 - progress) X / (mu'_ij a_j) time units of wall time, moved when a_j or its pace changes.

    The work left is the core's :class:`~mgst.core.progress.Activity` on wall time: model time at full speed
    left at a wall-clock mark, going down at ``share / time_unit`` per second (the share it is given: the
    machine's times the mapper's pace, 0 while the replica waits on the host for a CPU); a change re-marks it,
    0 freezes it.
    """

    def __init__(self, msg: P.JobMsg, share: float, time_unit: float, now: float):
        self.msg = msg
        self.time_unit = time_unit
        self.received = now
        self.started = now
        self.share = share
        self.work = Activity(msg.work * (1.0 - msg.progress), now, share / time_unit)
        self._tally = ShareTally(share, now)
        self._ended: float | None = None

    def remaining(self, now: float) -> float:
        """Work left at ``now``, model time at full speed."""
        return self.work.remaining(now)

    @property
    def deadline(self) -> float:
        if self.work.left <= 0:
            return self.work.mark
        return self.work.finish_time()

    def set_share(self, share: float, now: float) -> None:
        if self._ended is not None:
            return
        self.share = share
        self.work.set_rate(now, share / self.time_unit)
        self._tally.set(share, now)

    def progress(self, now: float) -> float | None:
        work = self.msg.work
        return min(1.0, max(0.0, 1.0 - self.remaining(now) / work)) if work > 0 else 1.0

    def fileno(self) -> int | None:
        return None

    def wake_at(self) -> float:
        return self.deadline

    def finished(self, now: float) -> bool:
        if self._ended is None and now >= self.deadline:
            self._ended = min(now, self.deadline)
        return self._ended is not None

    def failure(self) -> str | None:
        return None

    def achieved(self, now: float) -> float:
        return self._tally.mean(self._ended if self._ended is not None else now)

    def kill(self) -> None:
        pass


def _cpu_seconds(pid: int) -> float | None:
    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return t.user + t.system


class SpinJob:
    """Burns (1 - progress) X / mu'_ij time units of CPU at full speed in the slot's spin worker; the
    throttle holds the worker at a_j, so it takes that over a_j in wall time.

    Progress is the kernel iterations done, counted as the worker's CPU seconds since the job began
    times the calibrated speed (iterations per CPU second). Share 0 suspends the worker (the slot's
    throttle stops or freezes it): no iteration is lost; a positive share resumes it.
    """

    def __init__(self, msg: P.JobMsg, kit: SlotKit, speed: float, share: float, time_unit: float, now: float):
        self.msg = msg
        self.kit = kit
        self.received = now
        self.started = now
        work = msg.work * (1.0 - msg.progress)
        self.iterations = max(0, round(work * time_unit * speed))
        self.cpu_needed = self.iterations / speed if speed > 0 else 0.0
        worker = kit.spin_worker()
        kit.hold_at(share, worker.pid)
        worker.start(self.iterations, msg.replica)  # (at share 0 the job waits in the suspended worker's stdin)
        self.worker = worker
        self.pid = worker.pid  # (start() may have replaced a child that had died while idle)
        self.cpu0 = _cpu_seconds(self.pid)
        self._result: tuple[int, float, float] | None = None
        self._failure: str | None = None

    def fileno(self) -> int | None:
        return self.worker.fileno()

    def wake_at(self) -> float:
        return math.inf

    def set_share(self, share: float, now: float) -> None:
        if self._result is not None or self._failure is not None:
            return
        self.kit.hold_at(share, self.pid)

    def progress(self, now: float) -> float | None:
        p0 = self.msg.progress
        if self._result is not None or self.iterations == 0:
            return 1.0
        if self.cpu_needed <= 0:
            return None
        cpu = _cpu_seconds(self.pid)
        if cpu is None or self.cpu0 is None:
            return None
        return min(1.0, p0 + (1.0 - p0) * min(1.0, max(0.0, cpu - self.cpu0) / self.cpu_needed))

    def finished(self, now: float) -> bool:
        if self._result is None and self._failure is None:
            try:
                self._result = self.worker.result()
            except Exception as e:  # the worker died: the job failed, the worker restarts itself
                self._failure = f"spin worker died: {e}"
        return self._result is not None or self._failure is not None

    def failure(self) -> str | None:
        return self._failure

    def achieved(self, now: float) -> float:
        if self._result is None:
            return 0.0
        _, cpu, wall = self._result  # measured by the worker around the kernel: stopped time included
        return min(1.0, cpu / wall) if wall > 0 else 1.0

    def kill(self) -> None:
        if self._result is None and self._failure is None:
            self.worker.cancel()  # SIGKILL (a stopped child too), a fresh child for the next job


def job_environment(msg: P.JobMsg, time_unit: float, machine: str) -> dict[str, str]:
    """The job's parameters, as a command sees them in its environment (MGST_CLASS is 1-based)."""
    return {
        "MGST_JOB": str(msg.job), "MGST_REPLICA": str(msg.replica), "MGST_CLASS": str(msg.job_class + 1),
        "MGST_SIZE": repr(msg.size), "MGST_WORK": repr(msg.work), "MGST_PROGRESS": repr(msg.progress),
        "MGST_SECONDS": repr(msg.work * (1.0 - msg.progress) * time_unit), "MGST_MACHINE": machine,
    }


class CommandJob:
    """Runs an allowed program with exactly the environment ``env``, under the slot's throttle.

    Share 0 suspends it and its descendants (the slot's throttle stops or freezes them); a positive
    share resumes them. Its progress is unknown to the puller (the program would have to report it):
    ``progress()`` is None.
    """

    def __init__(self, msg: P.JobMsg, argv: tuple[str, ...], env: dict[str, str], kit: SlotKit, share: float,
                 now: float, guardian: Guardian | None = None):
        from puller.command import CommandRun  # noqa: PLC0415

        self.msg = msg
        self.kit = kit
        self.received = now
        self.run = CommandRun(argv, env, inherit_env=False)
        self.guardian = guardian  # told of the job's group: it kills the group if the puller dies first
        if guardian is not None:
            guardian.watch(self.run.pid)
        self.started = now
        if kit.throttle is not None:
            kit.throttle.attach(self.run.pid)
        kit.hold_at(share, self.run.pid)  # (makes the slot's throttle if the share needs one)
        # Measured when a throttle holds it from the start; else the time-weighted target.
        self._measured = kit.throttle is not None
        if kit.throttle is not None:
            kit.throttle.reset_measure()
        self._tally = ShareTally(share, now)
        self._ended: float | None = None

    def fileno(self) -> int | None:
        return self.run.fileno()

    def wake_at(self) -> float:
        return math.inf

    def set_share(self, share: float, now: float) -> None:
        if self.run.poll() is not None:
            return
        self._tally.set(share, now)
        self.kit.hold_at(share, self.run.pid)

    def progress(self, now: float) -> float | None:
        return None

    def finished(self, now: float) -> bool:
        if self.run.poll() is None:
            return False
        if self._ended is None:
            self._ended = now
        return True

    def failure(self) -> str | None:
        code = self.run.poll()
        if code in (None, 0):
            return None
        return f"exit code {code}: {self.run.stderr_tail(400).strip()}"

    def achieved(self, now: float) -> float:
        if self._measured and self.kit.throttle is not None:
            return min(1.0, self.kit.throttle.achieved())
        return self._tally.mean(self._ended if self._ended is not None else now)

    def kill(self) -> None:
        self.run.kill()  # SIGKILL to the group: a stopped or (cgroup v2) frozen one too
        self.run.close()
        if self.guardian is not None and self.run.returncode is not None:  # reaped: its group id may be reused
            self.guardian.release(self.run.pid)
