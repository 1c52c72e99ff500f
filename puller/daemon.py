"""The puller daemon: registers with the mapper, heartbeats, asks for work, runs it, reports."""

from __future__ import annotations

import logging
import math
import os
import random
import signal
import time
from collections.abc import Callable
from typing import Any

import zmq

from adjuster.failures import FailureSchedule
from mgst import protocol as P
from puller.executors import EXECUTORS, Runner

log = logging.getLogger(__name__)

# Silent mapper intervals before the puller reconnects (as the mapper's own LIVENESS).
LIVENESS = 5
# Reconnection back-off, seconds: doubled after each failed attempt, up to the maximum.
BACKOFF_MIN, BACKOFF_MAX = 0.1, 5.0


class Puller:
    """One puller: ``run()`` until the mapper says the run is over, or stop() is called.

    Failure injection (the adjuster's job in the paper): when the mapper's welcome
    carries a failure model, the puller alternates exponential up and down periods
    drawn from the simulator's stream for this machine. Down, it kills its job and
    goes silent (no heartbeats, no answers); after the down time it comes back as
    the same machine with a new incarnation. The mapper must find out on its own.
    """

    def __init__(
        self,
        connect: str,
        machine: str,
        *,
        executors: tuple[str, ...] = EXECUTORS,
        stay: bool = False,
        throttle: str = "auto",
        context: zmq.Context | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.connect = connect
        self.machine = machine
        self.executors = executors
        self.stay = stay  # after the mapper's bye, wait for the next run instead of exiting
        self.clock = clock
        self._ctx = context or zmq.Context.instance()
        self.sock: zmq.Socket | None = None
        self.incarnation = random.getrandbits(62)
        self.welcome: P.Welcome | None = None
        self.job: Any = None  # the running execution
        self.stopping = False
        self.exit_code = 0
        self.heartbeat_interval = 0.2
        self.hb_seq = 0
        self.mapper_clock = -1.0  # the mapper's last heartbeat clock, to echo
        self.mapper_clock_received = -1.0
        self.last_heard = 0.0
        self.hello_at = 0.0
        self.backoff = BACKOFF_MIN
        self.failures: FailureSchedule | None = None
        self.next_down = math.inf
        self.up_at: float | None = None  # while down: when to come back
        self.jobs_run = 0
        self.runner = Runner(throttle, machine)
        self._wakeup: int | None = None  # read end of the signal wake-up pipe, if installed

    # ------------------------------------------------------------------ lifecycle

    def stop(self, *_: Any) -> None:
        """Ask run() to finish (safe from a signal handler)."""
        self.stopping = True

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the puller; a wake-up pipe makes any wait notice at once."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w)
        self._wakeup = r

    def run(self) -> int:
        try:
            self._loop()
        finally:
            self._kill_job()
            self.runner.close()  # resumes anything stopped, removes cgroups
            if self.sock is not None:
                if self.welcome is not None:  # we leave while the mapper is there: tell it
                    self._send(P.Bye("stopping"))
                    self.sock.close(linger=200)
                else:
                    self.sock.close(linger=0)
                self.sock = None
        return self.exit_code

    def _loop(self) -> None:
        self._connect()
        while not self.stopping:
            now = self.clock()
            if self.up_at is not None:  # down by injection
                if now >= self.up_at:
                    self._come_back(now)
                else:
                    self._wait([], self.up_at - now)
                continue
            if now >= self.next_down:
                self._go_down(now)
                continue
            if self.welcome is None and now - self.hello_at > self.backoff:
                log.info("%s: no welcome from %s; reconnecting", self.machine, self.connect)
                self.backoff = min(BACKOFF_MAX, self.backoff * 2)
                self._connect()
            if self.welcome is not None:
                if now - self.last_heard > LIVENESS * self.heartbeat_interval:
                    log.info("%s: mapper silent for %.1f s; reconnecting", self.machine, now - self.last_heard)
                    self.welcome = None
                    self._connect()
                    continue
                if now >= self.next_hb:
                    self.hb_seq += 1
                    self._send(P.Heartbeat(self.hb_seq, self.clock(), self.mapper_clock,
                                           self.mapper_clock_received))
                    self.next_hb = now + self.heartbeat_interval
                if self.job is not None and self.job.finished(now):
                    self._report_done(now)
            wake = self.next_hb if self.welcome is not None else self.hello_at + self.backoff
            if self.job is not None:
                wake = min(wake, self.job.wake_at())
            wake = min(wake, self.next_down)
            fd = self.job.fileno() if self.job is not None else None
            events = self._wait([self.sock] + ([fd] if fd is not None else []), wake - self.clock())
            if self.sock in events:
                self._receive_all()
            if self.exit_code or (self.welcome is None and self.stopping):
                break

    def _wait(self, sources: list, timeout: float) -> dict:
        """Poll ``sources`` (sockets, fds) for up to ``timeout`` seconds; a signal ends the wait."""
        poller = zmq.Poller()
        for src in sources:
            poller.register(src, zmq.POLLIN)
        if self._wakeup is not None:
            poller.register(self._wakeup, zmq.POLLIN)
        events = dict(poller.poll(math.ceil(max(0.0, timeout) * 1000)))
        if self._wakeup is not None and self._wakeup in events:
            try:
                os.read(self._wakeup, 512)  # drain; the handler has already set the flag
            except BlockingIOError:
                pass
        return events

    # ------------------------------------------------------------------ connection

    def _connect(self) -> None:
        if self.sock is not None:
            self.sock.close(linger=0)
        self.sock = self._ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(self.connect)
        self.welcome = None
        self.hello_at = self.clock()  # (the back-off counts from here, calibration included)
        speed = self.runner.calibrate() if "spin" in self.executors else 0.0
        self._send(P.Hello(P.PROTOCOL_VERSION, self.machine, self.incarnation, self.executors, speed,
                           self.clock()))

    def _send(self, msg: Any) -> None:
        try:
            self.sock.send(P.encode(msg), zmq.NOBLOCK)  # type: ignore[union-attr]
        except zmq.Again:
            log.debug("%s: send queue full, dropped %s", self.machine, type(msg).__name__)

    def _receive_all(self) -> None:
        while self.sock is not None:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            now = self.clock()
            try:
                msg = P.decode(frame)
            except P.ProtocolError as e:
                log.warning("%s: dropped malformed message from the mapper: %s", self.machine, e.reason)
                continue
            if type(msg) not in P.FROM_MAPPER:
                log.warning("%s: dropped %s, not a mapper's message", self.machine, type(msg).__name__)
                continue
            self.last_heard = now
            self._handle(msg, now)
            if self.up_at is not None or self.exit_code:
                return

    def _handle(self, msg: Any, now: float) -> None:
        t = type(msg)
        if t is P.Heartbeat:
            self.mapper_clock, self.mapper_clock_received = msg.clock, now
        elif t is P.Welcome:
            first = self.welcome is None
            self.welcome = msg
            self.heartbeat_interval = msg.heartbeat_interval
            self.backoff = BACKOFF_MIN
            self.next_hb = now
            if msg.failures is not None and self.failures is None:
                mean_up, mean_down, seed = msg.failures
                self.failures = FailureSchedule(mean_up, mean_down, seed, msg.machine, msg.time_unit, now)
                self.next_down = self.failures.down_at
            try:
                self.runner.prepare(msg.executor, msg.share)
            except Exception as e:  # e.g. no throttle backend works here
                log.error("%s: cannot run the %s executor: %s", self.machine, msg.executor, e)
                self.exit_code = 2
                return
            if first and self.job is None:
                self._send(P.Ready(msg.share, self.clock()))
        elif t is P.JobMsg:
            self._start_job(msg, now)
        elif t is P.CancelMsg:
            if self.job is not None and self.job.msg.replica == msg.replica:
                self._kill_job()
                self._send(P.Ready(self.welcome.share, self.clock()))  # type: ignore[union-attr]
        elif t is P.Refused:
            if msg.reason.startswith("not registered") and self.welcome is not None:
                # The mapper gave us up (we were silent too long): our job went elsewhere.
                self._kill_job()
                self.incarnation = random.getrandbits(62)
                self._connect()
            else:
                log.error("%s: the mapper refused us: %s", self.machine, msg.reason)
                self.exit_code = 2
        elif t is P.Bye:
            log.info("%s: the mapper says %s", self.machine, msg.reason)
            self._kill_job()
            if self.stay:
                self.welcome = None
                self.failures = None
                self.next_down = math.inf
                self._connect()
            else:
                self.welcome = None
                self.stopping = True

    # ------------------------------------------------------------------ jobs

    def _start_job(self, msg: P.JobMsg, now: float) -> None:
        w = self.welcome
        if w is None:
            return
        if self.job is not None:
            log.warning("%s: got job %d while running %d; refusing it", self.machine, msg.job, self.job.msg.job)
            self._send(P.Failed(msg.replica, "busy"))
            return
        try:
            self.job = self.runner.start(w.executor, msg, w.share, w.time_unit, now)
        except Exception as e:
            log.warning("%s: could not start job %d: %s", self.machine, msg.job, e)
            self._send(P.Failed(msg.replica, f"could not start: {e}"[:200]))
            self._send(P.Ready(w.share, self.clock()))
            return
        self._send(P.Started(msg.replica, now, self.job.started))

    def _report_done(self, now: float) -> None:
        job = self.job
        self.job = None
        failure = job.failure()
        if failure is not None:
            self._send(P.Failed(job.msg.replica, failure[:400]))
            self._send(P.Ready(self.welcome.share, now))  # type: ignore[union-attr]
            return
        self.jobs_run += 1
        self._send(P.Done(job.msg.replica, job.received, job.started, now, job.achieved(), True))

    def _kill_job(self) -> None:
        if self.job is not None:
            self.job.kill()
            self.job = None

    # ------------------------------------------------------------------ failure injection

    def _go_down(self, now: float) -> None:
        self.up_at = self.failures.go_down(now)  # type: ignore[union-attr]
        log.info("%s: injected failure, down for %.2f s", self.machine, self.up_at - now)
        self._kill_job()
        if self.sock is not None:
            self.sock.close(linger=0)
            self.sock = None
        self.next_down = math.inf

    def _come_back(self, now: float) -> None:
        self.up_at = None
        self.failures.come_back(now)  # type: ignore[union-attr]
        self.next_down = self.failures.down_at  # type: ignore[union-attr]
        self.incarnation = random.getrandbits(62)
        self._connect()
        log.info("%s: back up", self.machine)
