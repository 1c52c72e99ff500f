"""How a resumed mapper takes over from a dead one: the generator's place, the held clock, the pullers' return.

A mixin of :class:`mgst.testbed.mapper.Mapper` (``self`` is the Mapper). The journal and
the core have already been rebuilt by :func:`mgst.testbed.replay.replay`; this decides
the rest: model time stands still until the pullers are back (or the wait is
over), then runs on from where it stopped, with the outage cut out.
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from mgst.core.state import MachineState
from mgst.model import Bag, Job
from mgst.workload import JobSource

if TYPE_CHECKING:
    from mgst.testbed.mapper import Mapper

log = logging.getLogger("mgst.testbed.mapper")


class Resuming:
    """The mapper's resume steps (a mixin)."""

    # ------------------------------------------------------------------ resuming

    def _prepare_resume(self: Mapper, workload: JobSource, now: float) -> Any:
        """Set up from the replayed journal: hold model time until the pullers are back; the next job."""
        j = self.journal
        mc = self._replayed.model_time
        if j.start is None:  # the old mapper died before its clock started: start afresh
            self._frozen = None
            return None
        self._frozen = mc
        self._resume_started = now
        self.t0 = now - mc * self.time_unit  # provisional; fixed when the wait ends
        outage = now - (j.last_wall if j.last_wall is not None else now)
        j.resumed(now, self.t0)
        log.info("resuming at model time %.3f after an outage of %.1f s: %d jobs, %d running, %d queued",
                 mc, outage, len(j.jobs), len(self.core.running), self.core.queued_count)
        # the generator continues the same seeded sequence where it stopped
        nxt = None
        if j.generation_end is None:
            last = max(j.jobs, default=-1)
            nxt = next_item(workload)
            while nxt is not None and _last_id(nxt) <= last:
                nxt = next_item(workload)
        return nxt

    def _end_resume_wait(self: Mapper, now: float, next_job: Any) -> tuple[Any, float, float]:
        """The pullers are back (or the wait is over): machines still missing are down; the clock runs again."""
        mc = self._frozen
        assert mc is not None
        for jdx, conn in enumerate(self.conns):
            if conn.identity is None and self.core.machines[jdx].state is not MachineState.DOWN:
                log.info("%s did not come back: down", self.experiment.machines[jdx].name)
                self.journal.machine_down(jdx, now)
                self._core("machine_down", now, jdx)
        self._frozen = None
        self.t0 = now - mc * self.time_unit
        self.journal.began(self.t0)
        back = self.registered()
        timing = {"replay_s": self._replay_s, "reconnect_s": now - self._resume_started,
                  "pullers_back": back, "pullers": len(self.conns)}
        log.info("resumed: journal replayed in %.2f s, %d of %d pullers back after %.2f s", self._replay_s, back,
                 len(self.conns), timing["reconnect_s"])
        if self.journal.store is not None:
            self.journal.store.set_meta(resumes=[*self.journal.store.meta().get("resumes", []), timing])
        # timers the replayed core holds (the policy's, and the silence time-outs)
        for key, at in self.core.timers.items():
            self._push_timer(self.t0 + at * self.time_unit, key)
        if self.journal.generation_end is not None:
            log.info("resumed in the drain")
            return None, self.t0 + self.journal.generation_end * self.time_unit, now + self.drain_timeout
        return next_job, self.t0 + self.duration, math.inf


def next_item(workload: JobSource) -> Job | Bag | None:
    """The workload's next job or bag; None when it has no more."""
    try:
        return workload.next()
    except StopIteration:
        return None


def _last_id(item: Job | Bag) -> int:
    """The id of the last job in ``item`` (a job, or a bag's last task; -1 for an empty bag)."""
    if type(item) is Bag:
        return item.tasks[-1].id if item.tasks else -1
    return item.id  # type: ignore[union-attr]
