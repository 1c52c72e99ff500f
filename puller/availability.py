"""The availability the mapper's failure law imposes on this machine: its periods played, down and back, re-based."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from adjuster.failures import AvailabilitySchedule
from mgst.availability.process import Period, State
from mgst.wire import protocol as P
from mgst.wire.drops import DropLog
from mgst.wording import printable
from puller.limits import MAX_SHOWN, Limits
from puller.narrator import Narrator
from puller.slots import Slots

log = logging.getLogger(__name__)

# A Begin moving the failure law the puller plays (a resumed mapper's clock: Availability.rebase) is obeyed only
# when it moves it by more than REBASE_TOLERANCE wall seconds (a Begin's delivery, a late timer, a period
# lengthened to MIN_PERIOD are less), and at most REBASE_BURST at once, then one per REBASE_EVERY seconds: a mapper
# repeats one to a puller only after a new welcome, and each can cost up to MAX_SKIPPED_PERIODS draws.
REBASE_TOLERANCE = 0.5
REBASE_BURST, REBASE_EVERY = 3, 10.0


class Availability:
    """The adjuster's job in the paper, on one puller: once the run begins, if the mapper sent an availability law,
    the puller plays its periods, the simulator's for this machine (``adjuster/failures.py``).

    DOWN, it kills every replica and goes silent (no heartbeats, no answers); after the down time it comes back as
    the same machine with a new incarnation: the mapper must find out on its own. UP or RECLAIMED, its replicas run
    at the period's CPU share (0 suspends them), which it tells the mapper (Share).

    ``start()`` once, ``advance()`` when ``next_change`` has come, ``come_back()`` when ``up_at`` (down: not None)
    has, ``rebase()`` for a resumed mapper's clock, ``reset()`` for the next run. The connection is the puller's:
    going down calls ``go_silent()`` (no socket, no welcome), coming back ``back(now)`` (a new incarnation's hello).
    """

    def __init__(self, machine: str, slots: Slots, say: Narrator, limits: Limits, drops: DropLog, *,
                 go_silent: Callable[[], None], back: Callable[[float], None]):
        self.machine = machine
        self.slots = slots
        self.say = say
        self.limits = limits
        self.drops = drops
        self._go_silent = go_silent
        self._back = back
        self.schedule: AvailabilitySchedule | None = None  # the law played, once the run began with one
        self._rebases = float(REBASE_BURST)  # re-bases allowed now (a token bucket), as of _rebased_at
        self._rebased_at = 0.0
        self.next_change = math.inf  # while up: when the availability period ends
        self.up_at: float | None = None  # while down: when to come back

    def start(self, failures: tuple, welcome: P.Welcome, now: float, at: float) -> str | None:
        """Inject the mapper's failure law from now on, now being model time ``at`` of it: None; or why it cannot
        be used (logged; the puller must leave)."""
        try:
            self.limits.failure_law(failures)  # (Unusable, a ValueError)
            self.schedule = AvailabilitySchedule(failures, welcome.machine, welcome.time_unit, now, welcome.share, at)
        except ValueError as e:
            log.error("%s: cannot inject the mapper's failures %s: %s", self.machine,
                      printable(repr(failures), MAX_SHOWN), printable(str(e), MAX_SHOWN))
            return str(e)
        self._enter(self.schedule.period, now)
        return None

    def reset(self) -> None:
        """The run is over (a puller that stays for the next): no law plays until the next one begins, and the
        next run's re-bases do not count this one's."""
        self.schedule = None
        self.next_change = math.inf
        self._rebases = float(REBASE_BURST)
        self._rebased_at = 0.0

    def rebase(self, msg: P.Begin, welcome: P.Welcome, now: float) -> None:
        """A Begin while the law already plays: a resumed mapper's clock is at model time ``msg.at``. Model time
        stood still through its outage and its wait while this schedule ran on: unless the law played here is
        within REBASE_TOLERANCE of it, play the law from ``msg.at`` now (which may begin with the rest of a DOWN
        period). A law this puller cannot play from there, or a re-base too soon after others, is dropped (counted),
        its schedule kept."""
        assert self.schedule is not None
        sender = f"the mapper of {self.machine}"
        if msg.failures is None:  # (a mapper with a failure law never takes it back)
            self.drops.drop(P.Drop.BAD_VALUE, sender, "a Begin without a failure law while one plays")
            return
        off = (self.schedule.model_time(now) - msg.at) * welcome.time_unit
        if abs(off) <= REBASE_TOLERANCE:
            log.debug("%s: a Begin at model time %.3f: the law it plays is there (%.3f s off)", self.machine,
                      msg.at, off)
            return
        self._rebases = min(float(REBASE_BURST), self._rebases + max(0.0, now - self._rebased_at) / REBASE_EVERY)
        self._rebased_at = now
        if self._rebases < 1.0:
            self.drops.drop(P.Drop.REBASE_RATE, sender, f"a Begin at model time {msg.at:.6g}")
            return
        self._rebases -= 1.0
        try:
            self.limits.failure_law(msg.failures)
            schedule = AvailabilitySchedule(msg.failures, welcome.machine, welcome.time_unit, now, welcome.share,
                                            msg.at)
        except ValueError as e:  # (Unusable is one)
            self.drops.drop(P.Drop.BAD_VALUE, sender, f"a Begin at model time {msg.at:.6g} this puller cannot play: "
                            f"{printable(str(e), MAX_SHOWN)}; its schedule is kept")
            return
        was = self.schedule.period
        self.schedule = schedule
        log.info("%s: the mapper's clock is at model time %.3f, the law played here %.3f s %s: availability "
                 "re-based (%s until %.3f s from now, was %s)", self.machine, msg.at, abs(off),
                 "ahead" if off > 0 else "behind", schedule.period.state.name.lower(), schedule.ends_at - now,
                 was.state.name.lower())
        self._enter(schedule.period, now)

    def advance(self, now: float) -> None:
        """The period under way has ended (``next_change``): the next begins."""
        self._enter(self.schedule.advance(now), now)  # type: ignore[union-attr]

    def _enter(self, period: Period, now: float) -> None:
        """An availability period begins now: DOWN, or up at its CPU share (the mapper hears of a change)."""
        if period.state is State.DOWN:
            self._go_down(now)
            return
        self.slots.impose_share(period.cpu_share, now, period.state is State.RECLAIMED)
        self.next_change = self.schedule.ends_at  # type: ignore[union-attr]
        self.say.up(period, self.next_change)

    def _go_down(self, now: float) -> None:
        self.up_at = self.schedule.ends_at  # type: ignore[union-attr]
        self.say.down(now, self.up_at, len(self.slots.holds()))
        self.slots.kill_all()
        self.slots.forget()  # a new incarnation holds nothing
        self.slots.go_offline()
        self._go_silent()
        self.next_change = math.inf

    def come_back(self, now: float) -> None:
        """The down time is over (``up_at``): up, as a new incarnation; or down again."""
        period = self.schedule.advance(now)  # type: ignore[union-attr]
        if period.state is State.DOWN:  # (a law may follow one down period with another)
            self.up_at = self.schedule.ends_at  # type: ignore[union-attr]
            self.say.still_down(self.up_at)
            return
        self.up_at = None
        # (offline: the welcome's share gives way to it)
        self.slots.impose_share(period.cpu_share, now, period.state is State.RECLAIMED)
        self.next_change = self.schedule.ends_at  # type: ignore[union-attr]
        self.say.up(period, self.next_change)
        self._back(now)


__all__ = ["REBASE_BURST", "REBASE_EVERY", "REBASE_TOLERANCE", "Availability"]
