"""The puller daemon: registers with the mapper, heartbeats, asks for work, runs it, reports."""

from __future__ import annotations

import logging
import math
import random
import signal
from collections.abc import Callable
from typing import Any

import zmq

from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.drops import DropLog
from mgst.wording import printable
from puller.allowlist import AllowList
from puller.availability import Availability
from puller.executors import EXECUTORS
from puller.limits import MAX_SHOWN, Limits, Unusable, shown_reason
from puller.link import Link
from puller.memory_guard import MemoryGuard
from puller.narrator import Narrator, plural
from puller.patience import GIVE_UP, Patience
from puller.ratelimit import Throttled
from puller.reach import Reach
from puller.runner import Runner
from puller.slots import Slots
from puller.steady_clock import steady_wall_clock
from puller.wakeup import Wakeup

log = logging.getLogger(__name__)

# Silent mapper intervals before the puller reconnects (as the mapper's own LIVENESS).
LIVENESS = 5
# A pause of the puller's own loop this long (s) or more, and over LIVENESS heartbeat intervals, is said as the cause
# of a silence (SIGSTOP, a suspended laptop): a loaded machine's short starvation stays "the mapper fell silent".
OWN_PAUSE = 2.0
# The exit code of a puller that gave up on a paused run (EX_TEMPFAIL, as the mapper's): the run is not over.
EXIT_PAUSED = 75
# The exit code of a puller that never reached its mapper within --give-up seconds (EX_UNAVAILABLE, sysexits.h):
# a name that does not resolve, a refused connection, a handshake that fails (a wrong mapper key).
EXIT_UNREACHABLE = 69
# Mapper frames handled in one pass of the loop, before what is due (heartbeats, ends, availability periods): a
# mapper that sends without pause cannot hold the puller's own timers (as the gang member's RECEIVE_PER_PASS).
RECEIVE_PER_PASS = 256
# Seconds between two log lines of a kind a mapper can repeat at will (a refusal for now, a pause): the
# next one says how many it left out (puller/ratelimit.py).
REPEATED_EVERY = 10.0


class Puller:
    """One puller: ``run()`` until the mapper says the run is over, the mapper is gone for good, or stop().

    Security: with ``keys`` every connection is CURVE-encrypted and authenticated
    both ways; the puller talks only to the holder of ``keys.server_public``'s
    secret. ``insecure`` must be said explicitly to go without.

    Work: up to ``slots`` replicas at once (the welcome may ask for fewer, never
    more), each staging, then computing, in its own slot (``puller/slots.py``).

    Reconnection: when the mapper falls silent (LIVENESS heartbeat intervals) the
    puller sends a new hello, same incarnation, saying which replicas it runs and
    which finished with a result not yet known to be read; running replicas keep
    running. Results that come while the mapper is away are held and reported
    (again) after every welcome until a mapper heartbeat echoes one of ours sent
    after them. Having been welcomed once, the puller gives up (exits 0) after
    ``give_up`` seconds without a welcome, unless ``stay`` (``puller/patience.py``).

    Availability injection (the adjuster's job in the paper): the mapper's failure law,
    played from the run's beginning (``puller/availability.py``).
    """

    def __init__(
        self,
        connect: str,
        machine: str,
        *,
        keys: security.ClientKeys | None = None,
        insecure: bool = False,
        allowlist: AllowList | None = None,
        executors: tuple[str, ...] = EXECUTORS,
        slots: int = 1,
        stay: bool = False,
        give_up: float = GIVE_UP,
        idle_exit: float | None = None,
        throttle: str = "auto",
        context: zmq.Context | None = None,
        clock: Callable[[], float] | None = None,
        exit_with: int | None = None,
        memory_guard: MemoryGuard | None = None,
    ):
        if keys is None and not insecure:
            raise ValueError("a puller needs CURVE keys, or insecure=True to run without them")
        if keys is not None and insecure:
            raise ValueError("keys and insecure=True contradict each other")
        if not give_up > 0:
            raise ValueError(f"give_up must be positive, not {give_up!r}")
        if idle_exit is not None and not idle_exit > 0:
            raise ValueError(f"idle_exit must be positive, not {idle_exit!r}")
        self.connect = security.check_endpoint(connect, bind=False)
        self.machine = machine
        # The command executor is offered only with an allow-list.
        self.executors = tuple(e for e in executors if e != "command" or allowlist is not None)
        self.stay = stay  # after the mapper's bye, wait for the next run instead of exiting
        # A process whose end this puller's ends too (mgst run's, for the pullers it starts on its own machine): its
        # pidfd (the Wakeup's, opened last) is readable once it has ended.
        self.exit_with = exit_with
        self.give_up = give_up
        self.idle_exit = idle_exit  # welcomed and running nothing this long (s): leave (a pilot job's end)
        self.idle_since: float | None = None  # welcomed and running nothing: since when
        # (wall time that does not step: puller.steady_clock; a test may give its own)
        self.clock = clock = clock if clock is not None else steady_wall_clock()
        self.incarnation = random.getrandbits(62)
        self.welcome: P.Welcome | None = None
        self.bye_reason = "stopping"  # what the mapper hears if we leave while welcomed
        self.acknowledged_bye = False  # the mapper said the run is over and we said so back: let that leave
        self.stopping = False
        self.exit_code = 0
        self.heartbeat_interval = 0.2
        self.hb_seq = 0
        self.next_hb = 0.0
        self.mapper_clock = -1.0  # the mapper's last heartbeat clock, to echo
        self.mapper_clock_received = -1.0
        self.last_heard = 0.0
        # The longest wait between two passes of the loop since the mapper was last heard (its loop waits at most a
        # heartbeat interval or so): over LIVENESS intervals, the silence is this puller's, not the mapper's.
        self.longest_gap = 0.0
        self.runner = Runner(throttle, machine, allowlist)
        self.slots = Slots(machine, slots, self.runner, self._send, clock)
        self.limits = Limits(machine)  # what the mapper's messages may ask (puller/limits.py)
        self.handler_errors = 0  # mapper messages whose handling raised (a bug: logged with its traceback)
        self.drops = DropLog(log)  # mapper messages dropped, by protocol.Drop reason; logged at a bounded rate
        # What a message that never ends can make ZeroMQ hold for the connection (puller/memory_guard.py).
        self.memory_guard = memory_guard or MemoryGuard()
        # Lines a mapper can make the puller repeat at will, each kind at a bounded rate.
        self._say_refused = Throttled(REPEATED_EVERY, log)
        self._say_paused = Throttled(REPEATED_EVERY, log)
        # A message the puller could not handle (a bug, or a value no check foresaw): each is counted, and its
        # traceback logged, at most a few at once then one per REPEATED_EVERY: a mapper repeating it cannot flood
        # the log.
        self._say_handler_error = Throttled(REPEATED_EVERY, log, burst=3)
        self._say_held_too_much = Throttled(REPEATED_EVERY, log, burst=3)
        self.reach = Reach(self.connect, keys, clock)  # why the mapper is not reached, if it is not
        # The socket to the mapper, what goes out and what comes in (puller/link.py).
        self.link = Link(self.connect, keys, context or zmq.Context.instance(), machine, self.reach, self.drops)
        self.say = Narrator(machine, self.connect, keys)  # the INFO lines: registered, failures, reconnected, end
        # Without a welcome: since when, when to say hello again, when to give up (puller/patience.py).
        self.patience = Patience(machine, self.connect, self.reach, self.say, give_up, stay)
        self.end_reason = "stopped"  # the end line's reason
        # The failure law the mapper imposes (puller/availability.py); going down and coming back end and begin a
        # connection, which is the puller's.
        self.availability = Availability(machine, self.slots, self.say, self.limits, self.drops,
                                         go_silent=self._go_silent, back=self._back_up)
        # stop() (from a signal handler or another thread), signals and --exit-with end any wait at once. The pipe
        # and the pidfd are the only descriptors __init__ opens: last, once every option has been checked (Slots
        # checks ``slots``), so that an __init__ that raises holds none (ProcessLookupError here if the process of
        # --exit-with has ended already).
        self.wakeup = Wakeup(exit_with)
        if keys is None:
            log.warning("%s: --insecure: no CURVE; anyone who can reach this machine or %s can pose as the "
                        "mapper and read the traffic; for a closed lab only", machine, connect)
        if allowlist is not None:
            log.info("%s: command executor on: %s", machine, allowlist.describe())

    @property
    def jobs_run(self) -> int:
        return self.slots.jobs_run

    # ------------------------------------------------------------------ lifecycle

    def stop(self, *handler_args: Any) -> None:
        """Ask run() to finish; safe from a signal handler (its arguments: signal number, frame) and from another
        thread."""
        if not self.stopping:
            signum = handler_args[0] if handler_args else None
            self.end_reason = f"stopped by {signal.Signals(signum).name}" if isinstance(signum, int) else "stopped"
            if isinstance(signum, int):  # the mapper hears why (a pilot job cancelled or preempted: SIGTERM)
                self.bye_reason = self.end_reason
        self.stopping = True
        self.wakeup.wake()

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the puller; the wake-up pipe makes any wait notice at once (main thread only)."""
        self.wakeup.install(self.stop)

    def run(self) -> int:
        """Serve until the end; the exit code (0: the run is over or stop(); 2: refused or cannot run; 69: the
        mapper was never reached; 75: a paused run did not resume)."""
        self.say.start(None if self.stay else self.give_up, EXIT_UNREACHABLE)
        try:
            self._loop()
        except BaseException:
            self.end_reason = "an error"
            raise
        finally:
            self.say.end(self.exit_code, self.end_reason, self.jobs_run)
            self.slots.kill_all()
            self.runner.close()  # resumes anything stopped, removes cgroups
            if self.link.sock is not None:
                if self.welcome is not None:  # we leave while the mapper is there: tell it
                    self._send(P.Bye(self.bye_reason))
                self.link.close(linger=200 if self.welcome is not None or self.acknowledged_bye else 0)
            self.wakeup.close()
        return self.exit_code

    def _loop(self) -> None:
        self._connect()
        passed = self.clock()  # the loop's last pass: a long gap is this puller not running (stopped, or starved)
        while not self.stopping and not self.exit_code:
            now = self.clock()
            self.longest_gap = max(self.longest_gap, now - passed)
            passed = now
            if self.link.sock is not None and (grown := self.memory_guard.grown_over(now)) is not None:
                self._held_too_much(grown, now)
                continue
            if self.availability.up_at is not None:  # down by injection
                if now >= self.availability.up_at:
                    self.availability.come_back(now)
                else:
                    self._wait([], self.availability.up_at - now)
                continue
            if now >= self.availability.next_change:
                self.availability.advance(now)
                continue
            # Whether the mapper is there or not: what is due must not wake us again.
            self.slots.step(now)
            if self.welcome is None:
                if self.patience.given_up(now):
                    lost = now - self.patience.lost_at  # type: ignore[operator]
                    if self.patience.paused_at is not None:
                        log.error("%s: the paused run did not resume within %.0f s: leaving (its replicas are "
                                  "killed)", self.machine, lost)
                        self.exit_code = EXIT_PAUSED
                        self.end_reason = "the paused run did not resume"
                    else:  # (not 0: no bye came, and a mapper that ends says bye, and answers late hellos with one;
                        # a batch system then shows a dead mapper's pilots failed, not completed)
                        self.exit_code = EXIT_UNREACHABLE
                        self.end_reason = (f"no welcome from the mapper for {lost:.0f} s (--give-up): its mapper is "
                                           "down, or the run ended without its bye reaching this puller (if the run "
                                           "is resumed, start this puller again)")
                    break
                if self.patience.unreached(now):
                    self.link.read_monitor()  # (its last events: a handshake may have completed just now)
                    if self.patience.unreached(now):
                        self._give_up_unreached(now)
                        break
                if self.patience.hello_due(now):
                    self.patience.no_answer(now)
                    self._connect()
                    continue
            else:
                if now - self.last_heard > LIVENESS * self.heartbeat_interval:
                    # What waits unread first: a puller without CPU for a while (a loaded machine) finds the mapper
                    # silent though its heartbeats are in the socket, and a new connection would cost the machine.
                    self._receive_pass()
                    now = self.clock()
                    if self.welcome is not None and now - self.last_heard > LIVENESS * self.heartbeat_interval:
                        self._lose_mapper(now)
                    continue
                if self._idle_for(now) >= (self.idle_exit or math.inf):
                    self.end_reason = f"no work for {self.idle_exit:g} s (--idle-exit)"
                    self.bye_reason = "idle"
                    break
                if now >= self.next_hb:
                    self.hb_seq += 1
                    clock = self.clock()
                    self._send(P.Heartbeat(self.hb_seq, clock, self.mapper_clock, self.mapper_clock_received))
                    self.slots.heartbeat_sent(clock)
                    self.next_hb = now + self.heartbeat_interval
            self._serve(self._wake_at() - self.clock())

    def _wake_at(self) -> float:
        """The next instant the loop has something to do (all in the future, or now)."""
        if self.welcome is not None:
            wake = min(self.next_hb, self.last_heard + LIVENESS * self.heartbeat_interval)
            if self.idle_exit is not None and self.idle_since is not None:
                wake = min(wake, self.idle_since + self.idle_exit)
        else:
            wake = self.patience.wake_at()
        if self.link.sock is not None:
            wake = min(wake, self.memory_guard.next_check)
        return min(wake, self.slots.wake_at(), self.availability.next_change)

    def _idle_for(self, now: float) -> float:
        """Seconds this puller, welcomed, has run nothing and held no result (0 while it does, or with no
        --idle-exit); the clock starts at the welcome or when the last replica ended."""
        if self.idle_exit is None:
            return 0.0
        if self.slots.holds() or self.slots.finished():
            self.idle_since = None
            return 0.0
        if self.idle_since is None:
            self.idle_since = now
        return now - self.idle_since

    def _give_up_unreached(self, now: float) -> None:
        """Never welcomed, and the mapper not reached for --give-up seconds: one line saying why, exit 69."""
        log.error("%s: cannot reach the mapper at %s after %.0f s (--give-up): %s", self.machine, self.connect,
                  self.patience.unreachable_for(now), self.reach.final_reason(now))
        self.exit_code = EXIT_UNREACHABLE
        self.end_reason = "the mapper could not be reached"

    def _serve(self, timeout: float) -> None:
        sources: list[Any] = [self.link.sock]
        if self.link.monitor is not None:
            sources.append(self.link.monitor)
        sources.extend(self.slots.fds())
        events = self._wait(sources, timeout)
        if self.link.monitor is not None and self.link.monitor in events:
            self.link.read_monitor()
        if self.link.sock is not None and self.link.sock in events:
            self._receive_pass()

    def _wait(self, sources: list, timeout: float) -> dict:
        """Poll ``sources`` (sockets, fds) for up to ``timeout`` seconds; stop() or a signal ends the wait."""
        events = self.wakeup.wait(sources, timeout)
        if self.wakeup.parent_ended(events) and not self.stopping:
            log.warning("%s: the process it goes with (%d, --exit-with) has ended: leaving", self.machine,
                        self.exit_with)
            self.stopping = True
            self.end_reason = f"process {self.exit_with} (--exit-with) ended"
            self.bye_reason = "its run's process ended"
        return events

    # ------------------------------------------------------------------ connection

    def _connect(self) -> None:
        """A new socket and a hello, reporting what we hold."""
        self.link.close(linger=0)
        self.memory_guard.reset(self.clock())
        self.slots.go_offline()
        self.link.open()
        self.welcome = None
        speed = self.runner.calibrate() if "spin" in self.executors else 0.0  # (once: ~0.2 s)
        self.patience.hello(self.clock())  # the back-off counts from the hello, not from before the calibration
        self._send(P.Hello(P.PROTOCOL_VERSION, self.machine, self.incarnation, self.executors, speed,
                           self.clock(), self.slots.offered, self.slots.holds(), self.slots.finished()))

    def _held_too_much(self, grown: int, now: float) -> None:
        """The process grew by ``grown`` bytes over the memory guard's limit since the connection was made: a message
        the mapper never ends (ZeroMQ holds its frames until the last). Drop the connection, which frees them, and
        connect again, as when the mapper falls silent (running replicas go on)."""
        self._say_held_too_much.log(
            logging.ERROR, "%s: the connection to the mapper made this puller grow by %d MiB (over %d MiB): a "
            "message that never ends; dropped, connecting again (%d so far)", self.machine, grown >> 20,
            self.memory_guard.limit >> 20, self.memory_guard.trips)
        if self.welcome is not None:
            self.say.gone("the connection held a message that never ends", now)
            self.patience.lost(now)
            self.welcome = None
        self._connect()

    def _lose_mapper(self, now: float) -> None:
        """The mapper fell silent: hello again (same incarnation, what we hold); running replicas go on. (This puller
        not running for as long, SIGSTOPped or starved, is said as such: the mapper heard nothing from it either.)"""
        own = self.longest_gap if self.longest_gap > max(LIVENESS * self.heartbeat_interval, OWN_PAUSE) else None
        self.say.lost(now - self.last_heard, len(self.slots.holds()), own)
        self.say.gone("this puller did not run" if own is not None else "the mapper fell silent", self.last_heard)
        self.patience.lost(self.last_heard)
        self.welcome = None
        self._connect()

    def _send(self, msg: Any) -> None:
        self.link.send(msg)

    def _receive_pass(self) -> None:
        """Handle what the mapper sent, at most RECEIVE_PER_PASS frames (the rest wait for the next pass, after
        what is due: the socket stays readable, so the loop's next wait returns at once)."""
        for _ in range(RECEIVE_PER_PASS):
            if self.link.sock is None:
                return
            try:
                frame, parts = self.link.receive()
            except zmq.Again:
                return
            now = self.clock()
            msg = self.link.message(frame, parts)
            if msg is None:  # (dropped, counted)
                continue
            self.last_heard = now
            self.longest_gap = 0.0
            try:
                self._handle(msg, now)
            except Exception:  # no message may crash the puller; a bug here must still be seen
                self.handler_errors += 1
                self._say_handler_error.log(logging.ERROR, "%s: error handling the mapper's %s", self.machine,
                                            type(msg).__name__, exc_info=True)
            if self.availability.up_at is not None or self.exit_code or self.stopping:
                return

    def _handle(self, msg: Any, now: float) -> None:
        t = type(msg)
        if t is P.Heartbeat:
            self.mapper_clock, self.mapper_clock_received = msg.clock, now
            if self.welcome is not None:
                self.slots.acknowledged(msg.echo)
        elif t is P.Welcome:
            self._welcomed(msg, now)
        elif t in (P.JobMsg, P.CancelMsg, P.Share, P.Pace, P.Paused, P.Begin) and self.welcome is None:
            # (a mapper sends a Begin only after its welcome, on the same connection: one before a welcome, a law
            # playing or not, is from a mapper that is not this puller's now)
            self.drops.drop(P.Drop.UNREGISTERED, f"the mapper of {self.machine}", f"{t.__name__} before a welcome")
        elif t is P.JobMsg:
            self.slots.job(self.limits.job(msg, self.slots.time_unit), now)
        elif t is P.CancelMsg:
            self.slots.cancel(msg.replica)
        elif t is P.Share:
            self.slots.set_share(msg.share, now)
        elif t is P.Pace:
            self.slots.set_pace(msg.replica, msg.pace, now)
        elif t is P.Begin:
            assert self.welcome is not None  # (dropped above otherwise)
            if self.availability.schedule is None:
                self._start_failures(msg.failures, now, msg.at)
            else:
                self.availability.rebase(msg, self.welcome, now)
        elif t is P.Refused:
            if msg.fatal:
                log.error("%s: the mapper refused this puller: %s", self.machine, shown_reason(msg.reason))
                self.exit_code = 2
                self.end_reason = "refused by the mapper"
            else:
                self._say_refused.log(logging.ERROR, "%s: the mapper refused this puller for now: %s; retrying in "
                                      "%.1f s", self.machine, shown_reason(msg.reason), self.patience.backoff)
                self.patience.refused()
                if self.welcome is not None:
                    self.welcome = None
                    self.slots.go_offline()
                    self.patience.lost(now)
                    self.say.gone("refused for now", now)
                # (the loop says hello again once the back-off has passed, doubling it)
        elif t is P.Paused:
            self._paused(msg.reason, now)
        elif t is P.Bye:
            said = printable(msg.reason, MAX_SHOWN)
            log.debug("%s: the mapper says %s", self.machine, said)
            # acknowledged: a mapper waiting to tell pullers that were down at the run's end stops waiting for this one
            self._send(P.Bye("told"))
            self.acknowledged_bye = True
            self.slots.kill_all()
            self.slots.forget()
            self.slots.go_offline()
            self.welcome = None
            if self.stay:  # wait for the next run: hello again after the back-off
                self.availability.reset()
                self.slots.impose_share(None, now)
                self.patience.new_run(now)
                self.say.away = None
                log.info("%s: the mapper says \"%s\"; %s run so far; waiting for the next run (--stay)",
                         self.machine, said, plural(self.jobs_run, "job"))
            else:
                self.stopping = True
                self.end_reason = f'the mapper says "{said}"'

    def _paused(self, reason: str, now: float) -> None:
        """The mapper stops and the run is paused, not over: offline as after a lost mapper, keeping every
        replica and held result, saying hello again (after the back-off) for up to PAUSE_GIVE_UP seconds."""
        self.patience.paused(now)
        bound = "" if self.stay else f" (at most {self.patience.give_up_after():.0f} s)"
        self._say_paused.log(logging.WARNING, "%s: the mapper paused the run: %s; %d replicas run on, %d results "
                             "held; waiting for it to resume%s", self.machine, printable(reason, MAX_SHOWN),
                             len(self.slots.holds()), len(self.slots.finished()), bound)
        self.welcome = None
        self.say.gone("the run was paused", now)
        self.slots.go_offline()

    def _start_failures(self, failures: tuple | None, now: float, at: float = 0.0) -> bool:
        """Inject the mapper's failure law from now on (once), now being model time ``at`` of it; False if it
        cannot be used (exiting)."""
        if failures is None or self.availability.schedule is not None or self.welcome is None:
            return True
        error = self.availability.start(failures, self.welcome, now, at)
        if error is not None:
            self.bye_reason = f"cannot use the failure model: {error}"[:400]
            self.exit_code = 2
            self.end_reason = "cannot use the mapper's failure model"
            return False
        return True

    def _welcomed(self, msg: P.Welcome, now: float) -> None:
        if msg.version != P.PROTOCOL_VERSION:
            log.error("%s: the mapper speaks protocol %d, this puller %d", self.machine, msg.version,
                      P.PROTOCOL_VERSION)
            self.exit_code = 2
            self.end_reason = "the mapper speaks another protocol"
            return
        try:
            msg = self.limits.welcome(msg, self.executors)
        except Unusable as e:
            log.error("%s: %s", self.machine, printable(str(e), MAX_SHOWN))
            self.welcome = msg  # (so that leaving tells the mapper why)
            self.bye_reason = str(e)[:400]
            self.exit_code = 2
            self.end_reason = "the mapper asks what this puller cannot serve"
            return
        self.welcome = msg  # (from here on, leaving sends a Bye with bye_reason)
        self.say.registered(msg, now, first=not self.patience.ever_welcomed)
        self.patience.welcomed()
        self.idle_since = None
        self.heartbeat_interval = msg.heartbeat_interval
        self.next_hb = now
        if not self._start_failures(msg.failures, now):
            return
        if self.welcome is None:  # the law begins DOWN: down at once, this welcome dropped (a new one when back)
            return
        try:
            self.runner.prepare(msg.executor, msg.share)
        except Exception as e:  # e.g. no throttle backend works here
            log.error("%s: cannot run the %s executor: %s", self.machine, msg.executor, e)
            self.bye_reason = f"cannot run the {msg.executor} executor: {e}"[:400]
            self.exit_code = 2
            self.end_reason = f"cannot run the {msg.executor} executor"
            return
        self.slots.configure(msg, now)
        self.slots.go_online()

    # ------------------------------------------------------------------ availability injection

    def _go_silent(self) -> None:
        """Down by injection: no connection, no welcome (puller/availability.py has killed and forgotten the work)."""
        self.link.close(linger=0)
        self.welcome = None

    def _back_up(self, now: float) -> None:
        """Up again after an injected failure: the same machine, a new incarnation, saying hello."""
        self.incarnation = random.getrandbits(62)
        self.patience.back_up(now)  # (the time down does not count towards giving up)
        self._connect()
        log.debug("%s: back up", self.machine)
