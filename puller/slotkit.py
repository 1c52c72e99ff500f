"""What one slot runs with: its throttle (made the first time it needs a share below 1) and its spin worker."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from adjuster.throttle import Throttle
    from puller.spin import SpinWorker

log = logging.getLogger(__name__)

__all__ = ["SlotKit"]


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:40] or "x"


class SlotKit:
    """What one slot runs with: its throttle (made the first time the slot needs a share below 1) and,
    for spin, its own worker. Each slot is held at a_j on its own: the model gives every replica a_j."""

    def __init__(self, index: int, machine: str, throttle_backend: str):
        self.index = index
        self.machine = machine
        self.throttle_backend = throttle_backend
        self.throttle: Throttle | None = None
        self.worker: SpinWorker | None = None
        self._failed = False  # a throttle could not be made: logged once

    def _on_spawn(self, pid: int) -> None:
        if self.throttle is not None:
            self.throttle.attach(pid)

    def spin_worker(self) -> SpinWorker:
        if self.worker is None:
            from puller.spin import SpinWorker  # noqa: PLC0415

            self.worker = SpinWorker(on_spawn=self._on_spawn)
        return self.worker

    def make_throttle(self) -> Throttle:
        if self.throttle is None:
            from adjuster.throttle import make_throttle  # noqa: PLC0415

            self.throttle = make_throttle(self.throttle_backend,
                                          name=f"puller-{_safe_name(self.machine)}-{self.index}")
            log.debug("%s: slot %d: %s throttle", self.machine, self.index, self.throttle.backend)
        return self.throttle

    def hold_at(self, share: float, pid: int | None) -> None:
        """Hold the slot's processes (``pid``: the job's) at ``share``; 1 lifts the cap, 0 suspends them."""
        throttle = self.throttle
        if throttle is None:
            if share >= 1.0 or self._failed:
                return
            try:
                throttle = self.make_throttle()
                if pid is not None:
                    throttle.attach(pid)
            except Exception as e:  # e.g. no backend works here: the job goes on at full speed
                self._failed = True
                log.error("%s: slot %d cannot be throttled (%s); it runs at full speed", self.machine,
                          self.index, e)
                return
        throttle.set_share(share)

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        if self.throttle is not None:
            self.throttle.close()
            self.throttle = None
