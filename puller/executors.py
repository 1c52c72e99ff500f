"""What a puller runs a job with: emulate (a timer), spin (calibrated CPU work) or command (a real program)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from mgst import protocol as P
from mgst.model import EXECUTORS
from puller.allowlist import AllowList, CommandRefused

log = logging.getLogger(__name__)

__all__ = ["EXECUTORS", "CommandJob", "CommandRefused", "EmulatedJob", "Runner", "SpinJob", "job_environment"]


class EmulatedJob:
    """Holds the job for (1 - progress) X / (mu'_ij a_j) time units of wall time, recomputed if a_j changes."""

    def __init__(self, msg: P.JobMsg, share: float, time_unit: float, now: float):
        self.msg = msg
        self.share = share
        self.time_unit = time_unit
        self.received = now
        self.started = now
        self.remaining = msg.work * (1.0 - msg.progress)  # model time at full speed
        self.deadline = now + self.remaining / share * time_unit

    def set_share(self, share: float, now: float) -> None:
        self.remaining = max(0.0, (self.deadline - now) / self.time_unit * self.share)
        self.share = share
        self.deadline = now + self.remaining / share * self.time_unit

    def fileno(self) -> int | None:
        return None

    def wake_at(self) -> float:
        return self.deadline

    def finished(self, now: float) -> bool:
        return now >= self.deadline

    def failure(self) -> str | None:
        return None

    def achieved(self) -> float:
        return self.share

    def kill(self) -> None:
        pass


class SpinJob:
    """Burns (1 - progress) X / mu'_ij time units of CPU at full speed in the spin worker; the
    throttle holds the worker at a_j, so it takes that over a_j in wall time."""

    def __init__(self, msg: P.JobMsg, worker, speed: float, time_unit: float, now: float):
        self.msg = msg
        self.worker = worker
        self.received = now
        work = msg.work * (1.0 - msg.progress)
        worker.start(max(0, round(work * time_unit * speed)), msg.replica)
        self.started = now
        self._result: tuple[int, float, float] | None = None
        self._failure: str | None = None

    def fileno(self) -> int | None:
        return self.worker.fileno()

    def wake_at(self) -> float:
        return math.inf

    def finished(self, now: float) -> bool:
        if self._result is None and self._failure is None:
            try:
                self._result = self.worker.result()
            except Exception as e:  # the worker died: the job failed, the worker restarts itself
                self._failure = f"spin worker died: {e}"
        return self._result is not None or self._failure is not None

    def failure(self) -> str | None:
        return self._failure

    def achieved(self) -> float:
        if self._result is None:
            return 0.0
        _, cpu, wall = self._result
        return min(1.0, cpu / wall) if wall > 0 else 1.0

    def kill(self) -> None:
        if self._result is None:
            self.worker.cancel()


def job_environment(msg: P.JobMsg, time_unit: float, machine: str) -> dict[str, str]:
    """The job's parameters, as a command sees them in its environment (MGST_CLASS is 1-based)."""
    return {
        "MGST_JOB": str(msg.job), "MGST_REPLICA": str(msg.replica), "MGST_CLASS": str(msg.job_class + 1),
        "MGST_SIZE": repr(msg.size), "MGST_WORK": repr(msg.work), "MGST_PROGRESS": repr(msg.progress),
        "MGST_SECONDS": repr(msg.work * (1.0 - msg.progress) * time_unit), "MGST_MACHINE": machine,
    }


class CommandJob:
    """Runs an allowed program with exactly the environment ``env``, under the throttle."""

    def __init__(self, msg: P.JobMsg, argv: tuple[str, ...], env: dict[str, str], throttle, now: float):
        from puller.command import CommandRun  # noqa: PLC0415

        self.msg = msg
        self.throttle = throttle
        self.received = now
        if throttle is not None:
            throttle.reset_measure()
        self.run = CommandRun(argv, env, inherit_env=False)
        if throttle is not None:
            throttle.attach(self.run.pid)
        self.started = now

    def fileno(self) -> int | None:
        return self.run.fileno()

    def wake_at(self) -> float:
        return math.inf

    def finished(self, now: float) -> bool:
        return self.run.poll() is not None

    def failure(self) -> str | None:
        code = self.run.poll()
        if code in (None, 0):
            return None
        return f"exit code {code}: {self.run.stderr_tail(400).strip()}"

    def achieved(self) -> float:
        return self.throttle.achieved() if self.throttle is not None else 1.0

    def kill(self) -> None:
        self.run.kill()
        self.run.close()


class Runner:
    """The executors a puller offers, and the resources they hold (spin worker, throttle)."""

    def __init__(self, throttle_backend: str = "auto", machine: str = "", allowlist: AllowList | None = None):
        self.machine = machine
        self.allowlist = allowlist  # None: the command executor is off
        self.throttle_backend = throttle_backend
        self.throttle = None
        self.worker = None
        self.speed = 0.0  # spin-kernel iterations per CPU second, once calibrated

    def calibrate(self) -> float:
        """Measure the spin kernel's speed (what a hello reports); once per puller."""
        if not self.speed:
            from puller.spin import calibrate  # noqa: PLC0415

            self.speed = calibrate(0.2)
            log.info("%s: spin kernel at %.3g iterations/s", self.machine, self.speed)
        return self.speed

    def prepare(self, executor: str, share: float) -> None:
        """Set up for ``executor`` at CPU share ``share`` (called on every welcome)."""
        if executor in ("spin", "command") and self.throttle is None and share < 1.0:
            from adjuster.throttle import make_throttle  # noqa: PLC0415

            self.throttle = make_throttle(self.throttle_backend, name=f"puller-{self.machine}")
            log.info("%s: %s throttle at share %.2f", self.machine, self.throttle.backend, share)
        if self.throttle is not None:
            self.throttle.set_share(share)
        if executor == "spin" and self.worker is None:
            from puller.spin import SpinWorker  # noqa: PLC0415

            self.calibrate()
            attach: Callable[[int], None] | None = self.throttle.attach if self.throttle is not None else None
            self.worker = SpinWorker(on_spawn=attach)

    def start(self, executor: str, msg: P.JobMsg, share: float, time_unit: float, now: float):
        """A running job; CommandRefused for a command off the allow-list, other errors if it cannot start."""
        if executor == "spin":
            return SpinJob(msg, self.worker, self.speed, time_unit, now)
        if executor == "command":
            # The one way to a command: through the allow-list (CommandRefused: nothing is started).
            if self.allowlist is None:
                raise CommandRefused("the command executor is off on this puller (no allow-list)")
            argv = self.allowlist.resolve(msg.command_key, msg.command)
            env = self.allowlist.env(job_environment(msg, time_unit, self.machine))
            return CommandJob(msg, argv, env, self.throttle, now)
        return EmulatedJob(msg, share, time_unit, now)

    def close(self) -> None:
        """Stop everything; resume anything stopped; remove cgroups."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.throttle is not None:
            self.throttle.close()
            self.throttle = None
