"""The Runner: the executors a puller offers, and the executions it starts in slots (each with its SlotKit)."""

from __future__ import annotations

import logging
from typing import Any

from mgst.model import EXECUTORS
from mgst.wire import protocol as P
from puller.allowlist import AllowList, CommandRefused
from puller.executors import CommandJob, EmulatedJob, SpinJob, job_environment
from puller.guardian import Guardian
from puller.slotkit import SlotKit

log = logging.getLogger(__name__)

__all__ = ["Runner"]


class Runner:
    """The executors a puller offers, and the resources each slot holds (throttle, spin worker)."""

    def __init__(self, throttle_backend: str = "auto", machine: str = "", allowlist: AllowList | None = None):
        self.machine = machine
        self.allowlist = allowlist  # None: the command executor is off
        self.throttle_backend = throttle_backend
        self.kits: dict[int, SlotKit] = {}
        self.speed = 0.0  # spin-kernel iterations per CPU second, once calibrated
        self.guardian: Guardian | None = None  # started with the first command job: kills jobs a dead puller left

    def calibrate(self) -> float:
        """Measure the spin kernel's speed (what a hello reports); once per puller."""
        if not self.speed:
            from puller.spin import calibrate  # noqa: PLC0415

            self.speed = calibrate(0.2)
            log.debug("%s: spin kernel at %.3g iterations/s", self.machine, self.speed)
        return self.speed

    def kit(self, slot: int) -> SlotKit:
        if slot not in self.kits:
            self.kits[slot] = SlotKit(slot, self.machine, self.throttle_backend)
        return self.kits[slot]

    def prepare(self, executor: str, share: float) -> None:
        """Check that ``executor`` can run here at CPU share ``share`` (called on every welcome)."""
        if executor not in EXECUTORS:
            raise ValueError(f"unknown executor {executor!r}")
        if executor == "spin":
            self.calibrate()
        if executor in ("spin", "command") and share < 1.0:
            self.kit(0).make_throttle()  # fails here, not at the first job, if no throttle works

    def plan(self, executor: str, msg: P.JobMsg) -> tuple[str, ...] | None:
        """What a job will run (a command's argv, checked now; None for the others). CommandRefused if not allowed."""
        if executor != "command":
            return None
        # The one way to a command: through the allow-list (CommandRefused: nothing is started).
        if self.allowlist is None:
            raise CommandRefused("the command executor is off on this puller (no allow-list)")
        return self.allowlist.resolve(msg.command_key, msg.command)

    def start(self, executor: str, msg: P.JobMsg, slot: int, argv: tuple[str, ...] | None, share: float,
              time_unit: float, now: float) -> Any:
        """A running execution in slot ``slot``; errors if it cannot start."""
        if executor == "spin":
            return SpinJob(msg, self.kit(slot), self.speed, share, time_unit, now)
        if executor == "command":
            assert argv is not None and self.allowlist is not None  # plan() said so
            env = self.allowlist.env(job_environment(msg, time_unit, self.machine))
            if self.guardian is None:
                self.guardian = Guardian()
            return CommandJob(msg, argv, env, self.kit(slot), share, now, self.guardian)
        return EmulatedJob(msg, share, time_unit, now)

    def close(self) -> None:
        """Stop everything; resume anything stopped; remove cgroups; end the guardian."""
        for kit in self.kits.values():
            kit.close()
        self.kits.clear()
        if self.guardian is not None:
            self.guardian.close()
            self.guardian = None

