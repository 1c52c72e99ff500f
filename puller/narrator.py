"""The puller's account of itself at INFO: a line per start, registration, injected failure, reconnection and the end.

Every value in these lines is the puller's own (its options, its clock, its counts) or
one from the mapper that ``puller/limits.py`` has checked; texts the mapper chose pass
through ``mgst.wording.printable`` (no control character reaches the operator's terminal).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime

from mgst.availability.process import Period, State
from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wording import printable
from puller.ratelimit import Throttled

log = logging.getLogger(__name__)

# While waiting for a welcome, a line saying what it waits for: at most one per this many seconds (a new
# reason), and the same reason again after WAITING_REPEAT seconds (a paused run may wait an hour).
WAITING_EVERY = 10.0
WAITING_REPEAT = 60.0
# The longest executor name printed (the puller offered it, so it is one of its own few).
MAX_EXECUTOR_SHOWN = 40
# "registered again" lines: AGAIN_BURST at once, then one per AGAIN_EVERY seconds, the next saying how many it left
# out. A puller reconnects a few times a minute in the harshest lab (an injected failure, a lost mapper, each a
# line); a mapper may welcome it again and again at will.
AGAIN_BURST = 10
AGAIN_EVERY = 5.0
# Lines about the machine's injected availability (down, up, reclaimed): AVAILABILITY_BURST at once, then one per
# AVAILABILITY_EVERY seconds. A law the mapper sends may change the machine's state every 10 ms (the shortest
# period played), which a line each would turn into a hundred lines a second.
AVAILABILITY_BURST = 20
AVAILABILITY_EVERY = 1.0


def plural(count: int, noun: str) -> str:
    """A count and its noun, for log lines: 1 job, 2 jobs."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def wall_time(t: float) -> str:
    """An instant of the puller's clock (seconds since the epoch) as local time with milliseconds, for log lines."""
    if not math.isfinite(t):
        return "never"
    try:
        return datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]
    except (OverflowError, ValueError, OSError):  # past year 9999 (a law's long period): no calendar shows it
        return f"{t:.6g} s after the epoch"


class Narrator:
    """The lines one puller logs about its connection and its availability, and what they need to remember."""

    def __init__(self, machine: str, connect: str, keys: security.ClientKeys | None):
        self.machine = machine
        self.connect = connect
        # The mapper key's fingerprint, as `mgst keys` prints it: the operator can compare the two.
        self.mapper_key = security.fingerprint(keys.server_public) if keys is not None else "none (--insecure)"
        self.away: tuple[str, float] | None = None  # welcomed before, not now: why, since when (said at the welcome)
        self._waiting: tuple[str, float] = ("", -math.inf)  # the last "no welcome" line: its reason, when
        self._reclaimed: float | None = None  # the CPU share of the current RECLAIMED period, None if not in one
        self._again = Throttled(AGAIN_EVERY, log, AGAIN_BURST)
        self._availability = Throttled(AVAILABILITY_EVERY, log, AVAILABILITY_BURST)

    def start(self, give_up: float | None, exit_code: int) -> None:
        bound = "" if give_up is None else f"; exits (code {exit_code}) if it cannot within {give_up:.0f} s"
        log.info("%s: looking for the mapper at %s, mapper key %s, protocol %d%s", self.machine, self.connect,
                 self.mapper_key, P.PROTOCOL_VERSION, bound)

    def registered(self, msg: P.Welcome, now: float, first: bool) -> None:
        """The welcome's line: the first says who and where, each later one that the puller is back, and why."""
        if first:
            log.info("%s: registered as %s (machine %d) with the mapper at %s, mapper key %s, protocol %d; "
                     "%s executor, %s, time unit %.4g s", self.machine, self.machine, msg.machine, self.connect,
                     self.mapper_key, msg.version, printable(msg.executor, MAX_EXECUTOR_SHOWN),
                     plural(msg.slots, "slot"), msg.time_unit)
        else:  # (a mapper may welcome at will: a burst of these lines, then one per AGAIN_EVERY seconds)
            why, since = self.away or ("reconnecting", now)
            self._again.log(logging.INFO, "%s: registered again with the mapper at %s, %.3g s after %s", self.machine,
                            self.connect, now - since, why)
        self.away = None
        self._waiting = ("", -math.inf)

    def gone(self, why: str, since: float) -> None:
        """Not welcomed any more: why and since when, for the next welcome's line (the first cause holds)."""
        if self.away is None:
            self.away = (why, since)

    def lost(self, silent: float, running: int, own: float | None = None) -> None:
        """No word from the mapper for ``silent`` s; ``own``: this puller's own longest pause meanwhile, if that is
        why (it was stopped, or had no CPU: the mapper heard nothing from it either)."""
        if own is not None:
            log.warning("%s: this puller did not run for %.1f s (stopped, or starved of CPU), and the mapper at %s "
                        "was not heard meanwhile: reconnecting; %s run on", self.machine, own, self.connect,
                        plural(running, "replica"))
            return
        log.warning("%s: the mapper at %s fell silent (%.1f s): reconnecting; %s run on", self.machine,
                    self.connect, silent, plural(running, "replica"))

    def waiting(self, now: float, reason: str, waited: float | None, leaving: str) -> None:
        """A WARNING line saying what the puller waits for: a new reason at most every WAITING_EVERY seconds,
        the same one every WAITING_REPEAT seconds. ``leaving``: when it gives up, or ""."""
        said, at = self._waiting
        if now - at < (WAITING_REPEAT if reason == said else WAITING_EVERY):
            return
        self._waiting = (reason, now)
        for_ = f" for {waited:.0f} s" if waited is not None else " yet"
        log.warning("%s: no welcome from the mapper at %s%s: %s%s", self.machine, self.connect, for_, reason,
                    f"; {leaving}" if leaving else "")

    def down(self, now: float, up_at: float, killed: int) -> None:
        self._availability.log(logging.INFO, "%s: injected failure: down at %s for %.3g s, up again at %s; %s killed",
                               self.machine, wall_time(now), up_at - now, wall_time(up_at), plural(killed, "replica"))
        self.gone("an injected failure", now)
        self._reclaimed = None

    def still_down(self, up_at: float) -> None:
        self._availability.log(logging.INFO, "%s: injected failure goes on: up again at %s", self.machine,
                               wall_time(up_at))

    def up(self, period: Period, until: float) -> None:
        """An UP or RECLAIMED period begins: a line when the owner's reclaim begins or ends."""
        if period.state is State.RECLAIMED and self._reclaimed != period.cpu_share:  # (not each slot of a reclaim)
            self._availability.log(logging.INFO, "%s: injected reclaim: the owner takes the machine, CPU share %.3g "
                                   "until %s", self.machine, period.cpu_share, wall_time(until))
        elif self._reclaimed is not None:
            self._availability.log(logging.INFO, "%s: the owner's reclaim ends: CPU share %.3g", self.machine,
                                   period.cpu_share)
        self._reclaimed = period.cpu_share if period.state is State.RECLAIMED else None

    def end(self, exit_code: int, why: str, jobs: int) -> None:
        log.info("%s: leaving (exit code %d): %s; %s run", self.machine, exit_code, why, plural(jobs, "job"))


__all__ = ["WAITING_EVERY", "WAITING_REPEAT", "Narrator", "plural", "wall_time"]
