"""The replicas a puller runs at once, one per slot: staging, computing, checkpoints, and results to report.

The daemon (``puller/daemon.py``) owns the connection; this owns the work. It
sends through the daemon's ``send`` and only while ``online`` (welcomed).

Requests for work mirror the mapper's count of slots the machine asks for
(``asked``): ``Ready(slots=free)`` sets it to the free slots, a job takes one,
``Done(ready=True)`` adds the slot it frees. A Ready goes out only when a slot
is free that is not asked for already (after a welcome, a failure, a cancel, a
share back above 0): never again for the same slots. A machine with no CPU to
give (RECLAIMED, or at share 0) asks for nothing, and the mapper's core then
withdraws its request: ``asked`` goes back to 0, and it asks again once UP with
a share.

Each replica runs at the machine's share times its **pace**, which the mapper
sets (JobMsg.pace, then Pace): 0 while it waits on the host for one of the
machine's cpus, 1 on a CPU of its own. The core decides; the puller keeps time.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mgst.wire import protocol as P
from mgst.wording import printable
from puller.allowlist import CommandRefused
from puller.limits import MAX_SHOWN
from puller.ratelimit import Throttled
from puller.runner import Runner

log = logging.getLogger(__name__)

# Checkpoints closer than this (wall seconds) are sent this often: a welcome cannot make the puller flood.
MIN_CHECKPOINT = 0.01
# At most one line per this many seconds for repeated warnings (refused commands).
WARN_EVERY = 10.0


@dataclass(slots=True, eq=False)
class Replica:
    """One replica in one slot: staging until ``stage_until``, then computing in ``execution``."""

    msg: P.JobMsg
    slot: int
    executor: str
    time_unit: float
    argv: tuple[str, ...] | None
    received: float  # when its job message came; also when it started (Started.started)
    stage_until: float | None = None  # wall time its staging ends; None once computing
    staged: bool = False  # it staged: the mapper hears Computing
    execution: Any = None
    computing_since: float | None = None
    next_checkpoint: float = math.inf
    reported: float = 0.0  # the highest progress it reported
    pace: float = 1.0  # the mapper's: the share of the machine's speed it is given (0: waiting for a CPU)
    # Computed, its result held in its slot until then (the job's ``hold``: a grid's returned-result delay)
    returns_at: float | None = None
    result: P.Done | None = None

    @property
    def id(self) -> int:
        return self.msg.replica

    def wake_at(self) -> float:
        if self.returns_at is not None:
            return self.returns_at
        if self.execution is None:
            return self.stage_until if self.stage_until is not None else math.inf
        return min(self.execution.wake_at(), self.next_checkpoint)


@dataclass(slots=True, eq=False)
class Held:
    """A finished replica's result, kept until the mapper has certainly read it."""

    done: P.Done
    sent: bool = False  # on the current connection
    ack_clock: float | None = None  # the clock of our first heartbeat sent after it


class Slots:
    """The puller's slots: which replica runs in which, what is asked for, which results wait."""

    def __init__(self, machine: str, offered: int, runner: Runner, send: Callable[[Any], None],
                 clock: Callable[[], float]):
        if not 1 <= offered <= P.MAX_SLOTS:
            raise ValueError(f"slots must be within 1..{P.MAX_SLOTS}, not {offered!r}")
        self.machine = machine
        self.offered = offered  # what the hello offers; never more run at once
        self.size = offered  # what the welcome says (at most offered)
        self.runner = runner
        self._send = send
        self.clock = clock
        self.running: dict[int, Replica] = {}
        self.held: dict[int, Held] = {}
        self.asked = 0  # slots the mapper believes we ask for
        self.online = False
        self.share = 1.0
        self.granted = 1.0  # the share the mapper's welcome gave
        self.imposed: float | None = None  # the share the machine's availability process imposes, if it plays one
        self.reclaimed = False  # its availability process says RECLAIMED: its owner has it, it asks for nothing
        self.executor = "emulate"
        self.time_unit = 1.0
        self.checkpoint = 0.0  # wall seconds between checkpoints; 0: none
        self.jobs_run = 0
        self.refusals = 0  # jobs refused by the allow-list
        self._warn_refused = Throttled(WARN_EVERY, log)
        # Lines a mapper can make the puller repeat at will, each kind at a bounded rate.
        self._warn_slots = Throttled(WARN_EVERY, log)
        self._warn_checkpoints = Throttled(WARN_EVERY, log)
        self._warn_twice = Throttled(WARN_EVERY, log)
        self._warn_busy = Throttled(WARN_EVERY, log)
        self._warn_start = Throttled(WARN_EVERY, log)  # a job whose program cannot start (each still Failed)

    # ------------------------------------------------------------------ state

    @property
    def free(self) -> int:
        return max(0, self.size - len(self.running))

    def holds(self) -> tuple[int, ...]:
        return tuple(sorted(self.running))

    def finished(self) -> tuple[int, ...]:
        return tuple(self.held)

    def wake_at(self) -> float:
        return min((r.wake_at() for r in self.running.values()), default=math.inf)

    def fds(self) -> list[int]:
        out = []
        for r in self.running.values():
            if r.execution is not None and (fd := r.execution.fileno()) is not None:
                out.append(fd)
        return out

    # ------------------------------------------------------------------ connection

    def configure(self, welcome: P.Welcome, now: float) -> None:
        """Take a welcome's settings: slots (clamped to what we offered), executor, time unit, checkpoints, share."""
        size = welcome.slots
        if size > self.offered:
            self._warn_slots.log(logging.WARNING, "%s: the mapper asks for %d slots; this puller offers %d and runs "
                                 "at most that many", self.machine, size, self.offered)
            size = self.offered
        self.size = size
        self.executor = welcome.executor
        self.time_unit = welcome.time_unit
        interval = welcome.checkpoint_interval * welcome.time_unit
        if 0 < interval < MIN_CHECKPOINT:
            self._warn_checkpoints.log(logging.WARNING, "%s: checkpoints every %.3g s asked; sending them every %g s",
                                       self.machine, interval, MIN_CHECKPOINT)
            interval = MIN_CHECKPOINT
        self.checkpoint = interval
        for r in self.running.values():
            self._schedule_checkpoint(r, now)
        self.granted = welcome.share
        share = welcome.share if self.imposed is None else self.imposed
        if share != self.share:
            self._apply_share(share, now)

    def go_online(self) -> None:
        """Welcomed: report held results and staged replicas now computing (again, if need be), then ask.

        The held results go out without asking for work: the mapper may have counted some of them
        already (a resumed mapper's journal has every result it read before it died), and a request
        riding on one of those would be read while another result it lacks still holds the slot, and
        dropped as "ready while busy", leaving this puller asking for nothing, forever. One Ready after
        them all asks for every free slot once the mapper has read every result (messages on one
        connection arrive in order).
        """
        self.online = True
        self.asked = 0
        if self.imposed is not None and (self.imposed != self.granted or self.reclaimed):  # reclaimed (or slowed)
            self._send(P.Share(self.imposed, 1 if self.reclaimed else 0))  # as it registered
        for h in self.held.values():
            h.done = h.done._replace(ready=False)
            self._send(h.done)
            h.sent, h.ack_clock = True, None
        for r in self.running.values():
            if r.staged and r.computing_since is not None:  # (the mapper ignores one it has)
                self._send(P.Computing(r.id, r.computing_since))
        self._ask()

    def go_offline(self) -> None:
        """The mapper is away: nothing goes out; what it may have missed goes out again after the welcome."""
        self.online = False
        self.asked = 0
        for h in self.held.values():
            h.sent, h.ack_clock = False, None

    def heartbeat_sent(self, clock: float) -> None:
        for h in self.held.values():
            if h.sent and h.ack_clock is None:
                h.ack_clock = clock

    def acknowledged(self, echo: float) -> None:
        """The mapper echoes our heartbeat of clock ``echo``: it has read every result sent before it."""
        for replica in [i for i, h in self.held.items() if h.ack_clock is not None and echo >= h.ack_clock]:
            del self.held[replica]

    # ------------------------------------------------------------------ mapper's messages

    def job(self, msg: P.JobMsg, now: float) -> None:
        if msg.replica in self.running:
            self._warn_twice.log(logging.WARNING, "%s: replica %d, which runs here already: ignored", self.machine,
                                 msg.replica)
            return
        self.held.pop(msg.replica, None)
        if not self.free:
            self._warn_busy.log(logging.WARNING, "%s: got replica %d with every slot taken (%s); refusing it",
                                self.machine, msg.replica, ", ".join(map(str, self.holds())))
            self._send(P.Failed(msg.replica, P.FAIL_BUSY, f"busy: {len(self.running)} of {self.size} slots"))
            return
        self.asked = max(0, self.asked - 1)
        try:
            argv = self.runner.plan(self.executor, msg)
        except CommandRefused as e:
            self.refusals += 1
            self._warn_refused.log(logging.WARNING, "%s: refused replica %d of job %d: command not allowed: %s",
                                   self.machine, msg.replica, msg.job, printable(str(e), MAX_SHOWN))
            self._send(P.Failed(msg.replica, P.FAIL_REFUSED, f"command not allowed: {e}"[:400]))
            self._ask()
            return
        used = {r.slot for r in self.running.values()}
        slot = next(i for i in range(len(used) + 1) if i not in used)
        r = Replica(msg, slot, self.executor, self.time_unit, argv, now, pace=msg.pace)
        self.running[r.id] = r
        if msg.stage > 0:
            r.stage_until, r.staged = now + msg.stage * self.time_unit, True
            log.debug("%s: replica %d stages for %.3f s", self.machine, r.id, r.stage_until - now)
        elif not self._compute(r, now):
            return
        self._send(P.Started(r.id, now, now))

    def cancel(self, replica: int) -> None:
        r = self.running.pop(replica, None)
        if r is None:
            log.debug("%s: cancel of replica %d, which is not running here: ignored", self.machine, replica)
            return
        log.debug("%s: replica %d cancelled", self.machine, replica)
        if r.execution is not None:
            r.execution.kill()
        self._ask()

    def set_share(self, share: float, now: float) -> None:
        """The mapper sets the share, unless the machine's availability process imposes its own: that one holds
        (as at a welcome; the mapper heard of it from this puller's Share)."""
        self.granted = share
        if self.imposed is None:
            self._apply_share(share, now)
        else:
            log.debug("%s: the mapper sets CPU share %.3g; the machine's availability holds %.3g", self.machine,
                      share, self.imposed)
        self._ask()

    def set_pace(self, replica: int, pace: float, now: float) -> None:
        """The mapper moves a replica's pace (0: it waits on the host for a CPU; 1: it computes)."""
        r = self.running.get(replica)
        if r is None:
            log.debug("%s: pace of replica %d, which is not running here: ignored", self.machine, replica)
            return
        if pace != r.pace:
            r.pace = pace
            self._apply(r, now)

    def impose_share(self, share: float | None, now: float, reclaimed: bool = False) -> None:
        """The machine's availability process sets the share, UP or RECLAIMED (None: it plays none any more):
        running replicas go on at it (0 suspends them), and the mapper hears of a change while online, before
        any request for work. With no CPU to give (reclaimed, or share 0) the machine asks for nothing: the
        mapper withdraws its request, and so ``asked`` is 0 until it asks again, UP with a share."""
        self.imposed = share
        if share is None:
            self.reclaimed = False
            return
        if share == self.share and reclaimed == self.reclaimed:
            return
        self.reclaimed = reclaimed
        self._apply_share(share, now)
        if reclaimed or share <= 0:
            self.asked = 0
        if self.online:
            self._send(P.Share(share, 1 if reclaimed else 0))
        self._ask()

    def _apply_share(self, share: float, now: float) -> None:
        log.debug("%s: CPU share %.3g -> %.3g", self.machine, self.share, share)
        self.share = share
        for r in self.running.values():
            self._apply(r, now)

    def _apply(self, r: Replica, now: float) -> None:
        """Run ``r`` at the machine's share times its pace."""
        if r.execution is None:
            return
        try:
            r.execution.set_share(self.share * r.pace, now)
        except Exception as e:  # e.g. a throttle that failed: the job goes on as it can
            log.error("%s: replica %d: could not apply share %.3g: %s", self.machine, r.id, self.share * r.pace, e)

    # ------------------------------------------------------------------ the loop

    def step(self, now: float) -> None:
        """Whatever is due: staging that ends, replicas that end, checkpoints (with the mapper there or not)."""
        for r in list(self.running.values()):
            if r.returns_at is not None:
                if now >= r.returns_at:
                    self._report(r)
                continue
            if r.execution is None:
                if r.stage_until is None or now < r.stage_until or not self._compute(r, now):
                    continue
                if self.online:
                    self._send(P.Computing(r.id, now))
            ex = r.execution
            if ex.finished(now):
                self._ended(r, now)
            elif now >= r.next_checkpoint:
                self._checkpoint(r, now)

    def _compute(self, r: Replica, now: float) -> bool:
        """Start computing (staging is over, or there was none); False if it could not start (reported)."""
        try:
            r.execution = self.runner.start(r.executor, r.msg, r.slot, r.argv, self.share * r.pace, r.time_unit,
                                            now)
        except Exception as e:
            self._warn_start.log(logging.WARNING, "%s: could not start job %d: %s", self.machine, r.msg.job, e)
            del self.running[r.id]
            if self.online:
                self._send(P.Failed(r.id, P.FAIL_START, f"could not start: {e}"[:400]))
                self._ask()
            return False
        r.stage_until = None
        r.computing_since = now
        self._schedule_checkpoint(r, now)
        return True

    def _schedule_checkpoint(self, r: Replica, now: float) -> None:
        if r.computing_since is None or not self.checkpoint:
            r.next_checkpoint = math.inf
            return
        k = max(1, math.floor((now - r.computing_since) / self.checkpoint) + 1)
        r.next_checkpoint = r.computing_since + k * self.checkpoint

    def _checkpoint(self, r: Replica, now: float) -> None:
        progress = r.execution.progress(now)
        if progress is not None and self.online:
            r.reported = max(r.reported, min(1.0, max(0.0, progress)))
            self._send(P.Progress(r.id, r.reported))
        self._schedule_checkpoint(r, now)  # (the next one after now: a late loop skips, never bursts)

    def _ended(self, r: Replica, now: float) -> None:
        ex = r.execution
        failure = ex.failure()
        achieved = ex.achieved(now)
        ex.kill()  # releases what it holds (a command's fds and left-over children)
        if failure is not None:
            del self.running[r.id]
            if self.online:
                self._send(P.Failed(r.id, P.FAIL_ERROR, failure[:400]))
                self._ask()
            else:
                log.warning("%s: replica %d failed while the mapper was away (%s); its next hello omits it",
                            self.machine, r.id, failure[:200])
            return
        self.jobs_run += 1
        r.execution = None
        r.result = P.Done(r.id, r.received, r.received, now, min(1.0, max(0.0, achieved)), False)
        if r.msg.hold > 0:  # its result reaches the mapper late: held in its slot meanwhile, as the model holds it
            r.returns_at = now + r.msg.hold * r.time_unit
            log.debug("%s: replica %d computed; its result is held %.3f s", self.machine, r.id, r.returns_at - now)
            return
        self._report(r)

    def _report(self, r: Replica) -> None:
        """``r`` computed and its hold is over: its slot frees and its result goes out (or waits for the mapper)."""
        del self.running[r.id]
        assert r.result is not None
        h = Held(r.result)
        self.held[r.id] = h
        while len(self.held) > P.MAX_SLOTS:  # the mapper does not echo: forget the oldest (logged)
            old = next(iter(self.held))
            del self.held[old]
            log.debug("%s: replica %d's result was never acknowledged; no longer held", self.machine, old)
        if self.online:
            h.done = h.done._replace(ready=self._claim_ready())
            self._send(h.done)
            h.sent = True
        else:
            log.debug("%s: replica %d finished while the mapper is away; holding its result", self.machine, r.id)

    # ------------------------------------------------------------------ asking for work

    def _claim_ready(self) -> bool:
        """Whether a Done asks for the slot it frees (then the mapper counts one more slot asked for)."""
        if self.online and self.share > 0 and not self.reclaimed and self.free > self.asked:
            self.asked += 1
            return True
        return False

    def _ask(self) -> None:
        """Ready for every free slot, if some free slot is not asked for (a machine reclaimed or at share 0 does
        not ask)."""
        if self.online and self.share > 0 and not self.reclaimed and self.free > self.asked:
            self._send(P.Ready(self.share, self.clock(), self.free))
            self.asked = self.free

    # ------------------------------------------------------------------ teardown

    def kill_all(self) -> None:
        for r in self.running.values():
            if r.execution is not None:
                try:
                    r.execution.kill()
                except Exception as e:  # keep killing the others
                    log.error("%s: could not kill replica %d: %s", self.machine, r.id, e)
        self.running.clear()

    def forget(self) -> None:
        """A new incarnation, or the run is over: nothing held, nothing asked."""
        self.held.clear()
        self.asked = 0
