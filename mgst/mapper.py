"""The mapper: drives the scheduling core from the wall clock and ZeroMQ messages of puller daemons."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from mgst import protocol as P
from mgst.clock import OffsetEstimator
from mgst.core.decisions import Assign, Cancel, JobCompleted, JobRequeued, SetTimer
from mgst.core.scheduler import Scheduler
from mgst.core.state import JobStatus
from mgst.journal import Journal
from mgst.model import Experiment
from mgst.policies import policy_class
from mgst.streams import Purpose, python_random
from mgst.workload.poisson import PoissonWorkload

log = logging.getLogger(__name__)

# How often the mapper heartbeats each puller, and how many silent intervals make a
# machine dead (the Paranoid Pirate pattern of the ZeroMQ guide uses 1 s and 3).
HEARTBEAT_INTERVAL = 0.2
LIVENESS = 5
# Malformed frames: log the first few in full, then every LOG_EVERY-th.
LOG_FIRST, LOG_EVERY = 10, 100

_TIMER, _TIMEOUT = 0, 1


@dataclass(slots=True)
class Connection:
    """What the mapper knows of the puller serving one machine."""

    identity: bytes | None = None  # ZeroMQ routing id, None while not registered
    incarnation: int | None = None
    last_seen: float = 0.0
    remote_clock: float = -1.0  # the puller's last heartbeat clock, to echo
    remote_received: float = -1.0  # when it arrived (our clock)
    clock: OffsetEstimator = field(default_factory=OffsetEstimator)  # the machine's, shared with the journal
    pending: tuple[float | None, float | None] = (None, None)  # (t1 on its clock, t2) of its latest request
    hb_seq: int = 0


@dataclass(slots=True)
class TestbedRun:
    """What a mapper run leaves behind, for results and reports."""

    __test__ = False  # not a pytest test class, despite the name

    experiment: Experiment
    core: Scheduler
    journal: Journal
    time_unit: float
    t0: float  # wall time of model time 0
    generation_end: float  # wall time when arrivals stopped
    end: float  # wall time when the run ended
    cut_off: list[int]  # jobs unfinished when the drain timed out
    malformed: Counter
    warmup: float  # model time
    seed: int = 0  # the run seed: the job sequence and failure trace it drew


class Mapper:
    """One testbed run: register pullers, generate jobs in real time, schedule, drain, report.

    The job generator draws the same streams as replication 0 of the simulator
    with the same seed, so the two runs see the same job sequence.
    """

    def __init__(
        self,
        experiment: Experiment,
        bind: str,
        *,
        duration: float | None = None,
        time_unit: float | None = None,
        seed: int | None = None,
        drain_timeout: float | None = None,
        register_timeout: float = 60.0,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        liveness: int = LIVENESS,
        timeout_factor: float | None = None,
        executor: str | None = None,
        failures: bool = True,
        progress: Callable[[Mapper], None] | None = None,
        progress_interval: float = 1.0,
        context: zmq.Context | None = None,
    ):
        tb = experiment.testbed
        self.experiment = experiment
        self.duration = tb.duration if duration is None else duration
        self.time_unit = tb.time_unit if time_unit is None else time_unit
        self.seed = experiment.simulation.seed if seed is None else seed
        self.timeout_factor = tb.timeout_factor if timeout_factor is None else timeout_factor
        self.heartbeat_interval = heartbeat_interval
        self.liveness = liveness
        self.register_timeout = register_timeout
        self.executor = tb.executor if executor is None else executor
        if self.executor == "command" and len(tb.commands) != len(experiment.classes):
            raise ValueError("the command executor needs [testbed] commands, one per job class")
        self.failures = failures and experiment.failures is not None
        self.progress = progress  # called every progress_interval seconds (monitoring)
        self.progress_interval = progress_interval
        # Long enough for a job that started at the last moment on the slowest machine.
        slowest = max(1.0 / (min(r for r in m.rates if r > 0) * m.availability) for m in experiment.machines)
        self.drain_timeout = drain_timeout if drain_timeout is not None else max(30.0, 50 * slowest * self.time_unit)
        spec = experiment.policy
        cls = policy_class(spec.name)
        self.policy = cls(cls.Options.from_mapping(spec.options), python_random(self.seed, 0, Purpose.POLICY))
        self.core = Scheduler(experiment.classes, experiment.machines, self.policy)
        self.journal = Journal(experiment)
        self.names = {m.name: j for j, m in enumerate(experiment.machines)}
        self.conns = [Connection(clock=m.clock) for m in self.journal.machines]
        self.by_identity: dict[bytes, int] = {}
        self.malformed: Counter = Counter()
        self._malformed_total = 0
        self.long_jobs = 0  # time-outs of jobs on machines that were alive (no action taken)
        self._timers: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self.t0: float | None = None
        self._ctx = context or zmq.Context.instance()
        self.socket = self._ctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if bind.endswith(":0"):
            port = self.socket.bind_to_random_port(bind[: -len(":0")])
            bind = f"{bind[: -len(':0')]}:{port}"
        else:
            self.socket.bind(bind)
        self.endpoint = bind
        self.stopping = False  # set (e.g. by a signal handler) to end generation early

    # ------------------------------------------------------------------ time

    def model_now(self, wall: float) -> float:
        return 0.0 if self.t0 is None else max(0.0, (wall - self.t0) / self.time_unit)

    def registered(self) -> int:
        return sum(c.identity is not None for c in self.conns)

    # ------------------------------------------------------------------ run

    def run(self) -> TestbedRun:
        try:
            return self._run()
        finally:
            self._say_bye()
            self.socket.close(linger=500)  # ms: let the byes go out

    def _run(self) -> TestbedRun:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        self._carry_out(self.core.start(0.0), time.time())
        started = time.time()
        log.info("mapper on %s waiting for %d pullers", self.endpoint, len(self.conns))
        next_hb = started
        workload = PoissonWorkload(self.experiment.arrival_rates, self.seed, 0)
        next_job = None
        horizon = self.duration / self.time_unit  # model time
        generation_end = math.inf
        drain_deadline = math.inf
        next_report = started
        while True:
            now = time.time()
            if self.t0 is None:
                if self.registered() == len(self.conns):
                    self._begin(now)
                elif now - started > self.register_timeout:
                    missing = [m.name for m, c in zip(self.experiment.machines, self.conns) if c.identity is None]
                    raise TimeoutError(f"pullers did not register within {self.register_timeout:g} s: "
                                       f"{', '.join(missing)}")
                if self.t0 is not None:
                    next_job = workload.next_job()
                    generation_end = self.t0 + self.duration
            # arrivals
            while next_job is not None and self.t0 is not None:
                due = self.t0 + next_job.submitted * self.time_unit
                if next_job.submitted >= horizon or self.stopping:
                    next_job = None
                    if self.stopping:  # stopped early: the horizon is now
                        generation_end = min(generation_end, now)
                    drain_deadline = now + self.drain_timeout
                    log.info("generation over; draining (at most %.1f s)", self.drain_timeout)
                    break
                if due > now:
                    break
                self.journal.job_arrived(next_job, due)
                # The core's clock must not step back: the job keeps its generated submission time,
                # but the event happens now (at most a poll period after it was due).
                self._carry_out(self.core.job_arrived(self.model_now(now), next_job), now)
                next_job = workload.next_job()
            if self.t0 is not None and next_job is None and now >= generation_end:
                if not self.core.queued_count and not self.core.running:
                    break
                if now >= drain_deadline:
                    log.warning("drain time-out: %d jobs queued, %d running", self.core.queued_count,
                                len(self.core.running))
                    break
            # timers
            while self._timers and self._timers[0][0] <= now:
                _, kind, _, arg = heapq.heappop(self._timers)
                if kind == _TIMER:
                    if arg in self.core.timers:
                        self._carry_out(self.core.timer_fired(self.model_now(now), arg), now)
                else:
                    self._job_timeout(arg, now)
            if now >= next_hb:
                self._heartbeat(now)
                next_hb = now + self.heartbeat_interval
            if self.progress is not None and now >= next_report:
                self.progress(self)
                next_report = now + self.progress_interval
            # wait for the next thing to do
            deadline = next_hb
            if self.progress is not None:
                deadline = min(deadline, next_report)
            if self._timers:
                deadline = min(deadline, self._timers[0][0])
            if next_job is not None and self.t0 is not None:
                deadline = min(deadline, self.t0 + next_job.submitted * self.time_unit)
            if self.t0 is not None and next_job is None:
                deadline = min(deadline, drain_deadline)
            timeout_ms = max(0.0, (deadline - time.time()) * 1000)
            events = dict(poller.poll(math.ceil(timeout_ms)))
            if self.socket in events:
                self._receive_all()
        end = time.time()
        self.core.close(self.model_now(end))
        self.journal.correct()
        cut = [jid for jid, rec in self.core.jobs.items() if rec.status is not JobStatus.DONE]
        for r in self.journal.replicas.values():
            if r.outcome == "running":
                r.outcome = "cut off"
        warmup = min(self.experiment.simulation.warmup, 0.1 * horizon)
        return TestbedRun(self.experiment, self.core, self.journal, self.time_unit, self.t0 or started,
                          generation_end, end, cut, self.malformed, warmup)

    def _begin(self, now: float) -> None:
        """Every machine is registered: model time 0 is now."""
        self.t0 = now
        self.journal.start = now
        log.info("all %d pullers registered; generating jobs for %.1f s", len(self.conns), self.duration)

    # ------------------------------------------------------------------ receiving

    def _receive_all(self) -> None:
        sock = self.socket
        while True:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            now = time.time()
            if len(frames) != 2:
                self._bad(frames[0] if frames else b"", f"{len(frames) - 1} frames")
                continue
            identity, frame = frames
            try:
                msg = P.decode(frame)
            except P.ProtocolError as e:
                self._bad(identity, e.reason)
                continue
            if type(msg) not in P.FROM_PULLER:
                self._bad(identity, f"{type(msg).__name__} is not a puller's message")
                continue
            try:
                self._handle(identity, msg, now)
            except Exception:  # no input may crash the mapper; a bug here must still be seen
                log.exception("error handling %s from %s", type(msg).__name__, identity.hex())
                self.malformed["handler error"] += 1

    def _bad(self, identity: bytes, reason: str) -> None:
        self._malformed_total += 1
        self.malformed[reason.split(":")[0] if ":" in reason else reason] += 1
        n = self._malformed_total
        if n <= LOG_FIRST or n % LOG_EVERY == 0:
            who = self.by_identity.get(identity)
            sender = self.experiment.machines[who].name if who is not None else identity.hex()[:16]
            log.warning("dropped malformed message #%d from %s: %s", n, sender, reason)

    def _handle(self, identity: bytes, msg: Any, now: float) -> None:
        t = type(msg)
        if t is P.Hello:
            self._hello(identity, msg, now)
            return
        j = self.by_identity.get(identity)
        if j is None:
            if t is not P.Bye:
                self._bad(identity, f"{t.__name__} from an unregistered sender")
                self._send(identity, P.Refused("not registered: send hello"))
            return
        conn = self.conns[j]
        conn.last_seen = now
        core = self.core
        if t is P.Heartbeat:
            conn.remote_clock, conn.remote_received = msg.clock, now
            if msg.echo >= 0:
                conn.clock.add(msg.echo, msg.echo_received, msg.clock, now)
        elif t is P.Ready:
            conn.pending = (msg.clock, now)
            self._carry_out(core.machine_ready(self.model_now(now), j, msg.share), now)
        elif t is P.Started:
            r = self.journal.replicas.get(msg.replica)
            if r is not None and r.machine == j:
                r.t4r_remote, r.t4_remote = msg.received, msg.started
        elif t is P.Done:
            r = self.journal.replicas.get(msg.replica)
            if r is None or r.machine != j:
                self._bad(identity, f"done of replica {msg.replica}, not one of this machine's")
                return
            r.t4r_remote, r.t4_remote, r.t5_remote, r.t6 = msg.received, msg.started, msg.finished, now
            r.achieved_share = msg.achieved_share
            self.journal.machines[j].achieved.append(msg.achieved_share)
            mnow = self.model_now(now)
            self._carry_out(core.replica_done(mnow, msg.replica), now)
            if msg.ready:
                conn.pending = (msg.finished, now)
                self._carry_out(core.machine_ready(mnow, j), now)
        elif t is P.Failed:
            self.journal.end("failed", msg.replica)
            self._carry_out(core.replica_failed(self.model_now(now), msg.replica, msg.reason or "failed"), now)
        elif t is P.Bye:
            log.info("%s leaves: %s", self.experiment.machines[j].name, msg.reason)
            self._machine_gone(j, now)

    def _hello(self, identity: bytes, msg: P.Hello, now: float) -> None:
        if msg.version != P.PROTOCOL_VERSION:
            self._bad(identity, f"protocol version {msg.version}")
            self._send(identity, P.Refused(f"protocol version {msg.version}; this mapper speaks "
                                           f"{P.PROTOCOL_VERSION}"))
            return
        j = self.names.get(msg.machine)
        if j is None:
            self._send(identity, P.Refused(f"unknown machine {msg.machine!r}; this experiment has "
                                           f"{', '.join(self.names)}"))
            self.malformed["unknown machine"] += 1
            return
        if self.executor not in msg.executors:
            self._send(identity, P.Refused(f"this run needs the {self.executor!r} executor"))
            self.malformed["missing executor"] += 1
            return
        conn = self.conns[j]
        mnow = self.model_now(now)
        if conn.incarnation is not None and conn.incarnation != msg.incarnation:
            # The machine restarted: whatever it ran is gone, even if we had not noticed.
            if self.core.machines[j].is_up:
                self._carry_out(self.core.machine_down(mnow, j), now)
                self.journal.machine_down(j, now)
        if conn.identity is not None and conn.identity != identity:
            self.by_identity.pop(conn.identity, None)
        conn.identity = identity
        self.by_identity[identity] = j
        if conn.incarnation != msg.incarnation:
            self.journal.machines[j].incarnations += 1
        self.journal.machines[j].speed = msg.speed
        conn.incarnation = msg.incarnation
        conn.last_seen = now
        m = self.experiment.machines[j]
        failures = None
        if self.failures:
            f = self.experiment.failures
            failures = (f.mean_up, f.mean_down, self.seed)
        self._send(identity, P.Welcome(P.PROTOCOL_VERSION, j, self.time_unit, self.heartbeat_interval,
                                       m.availability, self.executor, failures))
        if not self.core.machines[j].is_up:
            self.journal.machine_up(j, now)
        self._carry_out(self.core.machine_up(mnow, j, m.availability), now)
        log.info("%s registered (incarnation %x)", m.name, msg.incarnation & 0xFFFFFFFF)

    # ------------------------------------------------------------------ liveness

    def _heartbeat(self, now: float) -> None:
        dead_after = self.liveness * self.heartbeat_interval
        for j, conn in enumerate(self.conns):
            if conn.identity is None:
                continue
            if now - conn.last_seen > dead_after:
                log.info("%s silent for %.2f s: down", self.experiment.machines[j].name, now - conn.last_seen)
                self._machine_gone(j, now)
                continue
            conn.hb_seq += 1
            self._send(conn.identity, P.Heartbeat(conn.hb_seq, time.time(), conn.remote_clock,
                                                  conn.remote_received), j)

    def _machine_gone(self, j: int, now: float) -> None:
        conn = self.conns[j]
        if conn.identity is not None:
            self.by_identity.pop(conn.identity, None)
            conn.identity = None
        if self.core.machines[j].is_up:
            self.journal.machine_down(j, now)
            self._carry_out(self.core.machine_down(self.model_now(now), j), now)

    def _job_timeout(self, replica: int, now: float) -> None:
        """The paper's per-job time-out, as the failure detector it was there.

        At k x the job's expected time the machine is declared failed (T/O: Yes,
        the job is resubmitted) unless it has shown it is alive within the
        heartbeat window: then the job is merely long (sizes are exponential, so
        one in e^k jobs outlasts k means) and goes on.
        """
        r = self.core.replica(replica)
        if r is None:
            return  # finished, cancelled or lost meanwhile
        j = r.machine
        conn = self.conns[j]
        if conn.identity is not None and now - conn.last_seen <= self.liveness * self.heartbeat_interval:
            self.long_jobs += 1
            return
        log.info("replica %d of job %d timed out on %s", replica, r.job.id, self.experiment.machines[j].name)
        self.journal.jobs[r.job.id].timed_out = True
        self.journal.end("timeout", replica)
        self._carry_out(self.core.replica_failed(self.model_now(now), replica, "timeout"), now)
        self._machine_gone(j, now)

    # ------------------------------------------------------------------ decisions

    def _carry_out(self, outputs: list, now: float) -> None:
        for d in outputs:
            t = type(d)
            if t is Assign:
                self._dispatch(d, now)
            elif t is Cancel:
                self.journal.end("cancelled", d.replica)
                conn = self.conns[d.machine]
                if conn.identity is not None:
                    self._send(conn.identity, P.CancelMsg(d.replica), d.machine)
            elif t is JobCompleted:
                self.journal.jobs[d.job.id].done_by = d.replica
                self.journal.end("done", d.replica)
                self.journal.machines[d.machine].jobs_run += 1
            elif t is JobRequeued:
                self.journal.jobs[d.job.id].requeues += 1
                self.journal.end("lost", d.replica)
            elif t is SetTimer:
                wall = (self.t0 or now) + d.at * self.time_unit
                heapq.heappush(self._timers, (wall, _TIMER, next(self._seq), d.key))

    def _dispatch(self, d: Assign, now: float) -> None:
        j = d.machine
        job = d.job
        m = self.experiment.machines[j]
        rate = m.rates[job.job_class]
        conn = self.conns[j]
        t1, t2 = conn.pending
        conn.pending = (None, None)
        self.journal.sent(d.replica, job.id, j, t1, t2, now)
        command = self.experiment.testbed.commands[job.job_class] if self.executor == "command" else ()
        self._send(conn.identity, P.JobMsg(job.id, d.replica, job.job_class, job.size, job.size / rate,
                                           d.progress, command), j)
        if self.timeout_factor:
            expected = (1.0 - d.progress) / (rate * self.core.machines[j].cpu_share)  # mean, model time
            heapq.heappush(self._timers, (now + self.timeout_factor * expected * self.time_unit, _TIMEOUT,
                                          next(self._seq), d.replica))

    def _send(self, identity: bytes | None, msg: Any, machine: int | None = None) -> None:
        if identity is None:
            return
        try:
            self.socket.send_multipart([identity, P.encode(msg)], zmq.NOBLOCK)
        except zmq.ZMQError as e:  # peer gone (ROUTER_MANDATORY) or its queue full
            log.info("could not send %s to %s: %s", type(msg).__name__, identity.hex()[:16], e)
            if machine is not None and e.errno == zmq.EHOSTUNREACH:
                self._machine_gone(machine, time.time())

    def _say_bye(self) -> None:
        for conn in self.conns:
            if conn.identity is not None:
                try:
                    self.socket.send_multipart([conn.identity, P.encode(P.Bye("run over"))], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
