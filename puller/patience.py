"""How long a puller without a welcome waits for one: the hellos' back-off, when it gives up, what it says meanwhile."""

from __future__ import annotations

import logging

from puller.narrator import WAITING_EVERY, Narrator
from puller.reach import Reach

log = logging.getLogger(__name__)

# Reconnection back-off, seconds: doubled after each failed attempt, up to the maximum. (A hello to a
# mapper not up yet waits in the socket and goes out when it is: a new attempt is for a mapper that
# dropped it, e.g. a restarted one; the minimum leaves room for a slow network and handshake.)
BACKOFF_MIN, BACKOFF_MAX = 0.5, 5.0
# Seconds a hello the mapper's socket has (its handshake done, the connection never dropped) waits for its answer
# before a new connection: a mapper reads every hello and answers it, however busy; a new connection would not be
# answered sooner, and the first hello, read late, would be answered on a connection already closed.
ANSWER_WAIT = 30.0
# Seconds without a welcome, after having had one, before the puller decides the run is over.
GIVE_UP = 120.0
# Seconds without a welcome after the mapper said the run is PAUSED (its journal could not be written):
# time for an operator to free space and resume it, during which the replicas run on and results are held.
PAUSE_GIVE_UP = 3600.0


class Patience:
    """A puller's stretches without a welcome: since when, how long it may last, when to say hello again.

    Having been welcomed once, the puller gives up after ``give_up`` seconds without a welcome (``PAUSE_GIVE_UP``
    once the mapper said the run is paused); never welcomed, after ``give_up`` seconds without reaching the mapper
    (``Reach``); with ``stay``, never. Between hellos it waits ``backoff`` seconds, doubled after each unanswered
    one, or ANSWER_WAIT while the mapper's socket holds the hello (``Reach.delivered``). The puller tells it what
    happens: ``hello()``, ``welcomed()``, ``refused()``, ``lost()``, ``paused()``, ``back_up()``, ``new_run()``; it
    asks ``given_up()``, ``unreached()``, ``hello_due()``, ``wake_at()``.
    """

    def __init__(self, machine: str, endpoint: str, reach: Reach, say: Narrator, give_up: float, stay: bool):
        self.machine = machine
        self.endpoint = endpoint
        self.reach = reach
        self.say = say
        self.give_up = give_up
        self.stay = stay
        self.ever_welcomed = False
        self.lost_at: float | None = None  # welcomed once, now without a welcome: since when
        self.paused_at: float | None = None  # the mapper said the run is paused (not over): since when
        self.asking_since: float | None = None  # saying hello without a welcome: since when
        self.hello_at = 0.0
        self.backoff = BACKOFF_MIN
        self.awaiting = False  # the last hello has had no answer (a welcome, a refusal, a pause, a bye)

    # ------------------------------------------------------------------ what happens

    def hello(self, at: float) -> None:
        """A hello on a new socket, at ``at``: the back-off counts from it."""
        self.hello_at = at
        self.awaiting = True
        if self.asking_since is None:
            self.asking_since = self.hello_at
        self.reach.new_socket(self.hello_at)  # (before any of its monitor's events is read)

    def welcomed(self) -> None:
        self.reach.reached()
        self.ever_welcomed = True
        self.lost_at = self.asking_since = self.paused_at = None
        self.backoff = BACKOFF_MIN
        self.awaiting = False

    def refused(self) -> None:
        """The mapper refused the hello for now: hello again after the back-off."""
        self.awaiting = False

    def lost(self, since: float) -> None:
        """Welcomed until ``since``, not any more."""
        self.lost_at = since

    def paused(self, now: float) -> None:
        """The mapper paused the run: offline as after a lost mapper, for up to PAUSE_GIVE_UP seconds, and hello
        again after the back-off."""
        self.paused_at = self.lost_at = self.hello_at = now
        self.awaiting = False

    def back_up(self, now: float) -> None:
        """Up again after an injected failure: the time down does not count towards giving up."""
        self.lost_at = now if self.ever_welcomed else None
        self.asking_since = None

    def new_run(self, now: float) -> None:
        """The run is over and the puller stays for the next: as if never welcomed, hello after the back-off."""
        self.ever_welcomed = False
        self.lost_at = None
        self.hello_at = now
        self.awaiting = False

    def no_answer(self, now: float) -> None:
        """No welcome since the last hello: say what it waits for (not too often), back off more (the puller says
        hello again)."""
        log.debug("%s: no welcome from %s (%s); reconnecting", self.machine, self.endpoint, self.reach.reason())
        self.reach.maybe_probe(now)
        self._say_waiting(now)
        self.backoff = min(BACKOFF_MAX, self.backoff * 2)

    # ------------------------------------------------------------------ what is due

    def give_up_after(self) -> float:
        """Seconds without a welcome before leaving: longer once the mapper said the run is paused."""
        return self.give_up if self.paused_at is None else max(self.give_up, PAUSE_GIVE_UP)

    def given_up(self, now: float) -> bool:
        """Welcomed once, and without a welcome too long to wait any more."""
        return self.lost_at is not None and not self.stay and now - self.lost_at >= self.give_up_after()

    def unreachable_for(self, now: float) -> float:
        """Seconds this puller, never welcomed (not with --stay), has not reached its mapper; 0 otherwise."""
        if self.ever_welcomed or self.stay or self.reach.unreached_since is None:
            return 0.0
        return now - self.reach.unreached_since

    def unreached(self, now: float) -> bool:
        """Never welcomed, and the mapper not reached for --give-up seconds."""
        return self.unreachable_for(now) >= self.give_up

    def hello_wait(self) -> float:
        """Seconds from the last hello to the next: the back-off, or ANSWER_WAIT while the mapper holds it."""
        if self.awaiting and self.reach.delivered:
            return max(self.backoff, ANSWER_WAIT)
        return self.backoff

    def hello_due(self, now: float) -> bool:
        return now - self.hello_at >= self.hello_wait()

    def wake_at(self) -> float:
        """The next instant something above is due, without a welcome."""
        wake = self.hello_at + self.hello_wait()
        if self.lost_at is not None and not self.stay:
            wake = min(wake, self.lost_at + self.give_up_after())
        if self.reach.unreached_since is not None and not self.ever_welcomed and not self.stay:
            wake = min(wake, self.reach.unreached_since + self.give_up)
        return wake

    def _say_waiting(self, now: float) -> None:
        """Say what the puller waits for (the narrator says it at most every WAITING_EVERY seconds)."""
        if self.reach.probing() and now - self.reach.probe_at < WAITING_EVERY:
            return  # (its answer is the reason: a later round says it)
        reason = self.reach.reason()
        if self.paused_at is not None:
            reason = f"the run is paused: waiting for 'mgst mapper --resume' ({reason})"
        since = self.lost_at if self.lost_at is not None else self.asking_since
        leaving = ""
        if self.stay:
            pass
        elif self.lost_at is not None:
            leaving = f"leaving in {max(0.0, self.lost_at + self.give_up_after() - now):.0f} s"
        elif self.reach.unreached_since is not None and not self.ever_welcomed:
            leaving = f"giving up in {max(0.0, self.reach.unreached_since + self.give_up - now):.0f} s"
        self.say.waiting(now, reason, None if since is None else now - since, leaving)


__all__ = ["ANSWER_WAIT", "BACKOFF_MAX", "BACKOFF_MIN", "GIVE_UP", "PAUSE_GIVE_UP", "Patience"]
