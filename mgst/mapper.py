"""The mapper: drives the scheduling core from the wall clock and the ZeroMQ messages of puller daemons."""

from __future__ import annotations

import gc
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from mgst import protocol as P
from mgst import security
from mgst.admission import HELLO_BURST, TokenBuckets, hello_rate
from mgst.availability import registry as availability
from mgst.core.decisions import (
    Assign,
    Cancel,
    JobCompleted,
    JobRequeued,
    MachineSuspected,
    ReplicaTimedOut,
    SetTimer,
)
from mgst.core.state import MachineState
from mgst.drops import DropLog
from mgst.experiment_codec import to_plain
from mgst.journal import Journal
from mgst.liveness import LIVENESS, PAUSE_GRACE, heartbeat_interval_for, slices_for
from mgst.mapper_messages import READY_BURST, READY_RATE, RELEASE_CHECKPOINTS_BEFORE, Connection, PullerMessages
from mgst.mapper_resume import Resuming, next_item
from mgst.model import Bag, Experiment, Job
from mgst.replay import call_core, encode_args, make_core, replay
from mgst.staging import StagingSampler
from mgst.store import FILENAME, JournalWriteError, RunStore
from mgst.testbed_run import TestbedRun, finish_run
from mgst.workload import make_workload

log = logging.getLogger(__name__)

# At most this many messages are handled per receive pass; then timers, arrivals and
# heartbeats get their turn, so that a flood cannot stall them. ROUTER sockets read
# their peers fair-queued, so a flooding peer cannot starve the others either.
RECEIVE_BATCH = 256
# Messages a peer may have queued at the mapper: a puller has a handful in flight at most;
# with MAX_FRAME this caps what one flooding connection can make the mapper hold (16 MB).
RCVHWM = 256
# Connections the kernel queues for the mapper to accept, at least (ZeroMQ's default): one per
# machine, so that thousands of pullers starting at once are not dropped and made to retry their
# connection 1, 3, 7... s later (the kernel caps it at net.core.somaxconn).
LISTEN_BACKLOG = 100
# An LPAS_DG run with this many machines or more, and no resolve_debounce, is told about the option:
# each re-solve then takes 10 ms or more (17 ms at 1,000), and every registration or failure makes one.
DEBOUNCE_HINT_MACHINES = 500
# How often the journal notes that the mapper is alive (bounds the outage a crash leaves).
TICK = 0.5
# A Paused notice's reason is cut to this (a journal path can be long; the protocol allows MAX_STR).
PAUSE_REASON_MAX = 400

_TIMER = 0


class Interrupted(Exception):
    """The run was stopped before it began (while waiting for pullers)."""


class Mapper(PullerMessages, Resuming):
    """One testbed run: register pullers, generate jobs in real time, schedule, drain, report.

    The job generator draws the same streams as replication 0 of the simulator
    with the same seed, so the two runs see the same job sequence. With ``out``,
    every event is journalled to ``out/journal.sqlite`` as it happens, and
    nothing the journal does not have leaves the mapper (write-ahead); with
    ``resume``, the run in ``out`` continues where its journal ends.
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
        heartbeat_interval: float | None = None,
        liveness: int = LIVENESS,
        executor: str | None = None,
        failures: bool = True,
        progress: Callable[[Mapper], None] | None = None,
        progress_interval: float = 1.0,
        context: zmq.Context | None = None,
        keys: security.ServerKeys | None = None,
        insecure: bool = False,
        out: Path | None = None,
        resume: bool = False,
        imports: tuple[str, ...] = (),
        farewell: float = 0.0,
        resume_wait: float = 10.0,
    ):
        self.security = security.security_mode(bind, keys, insecure)
        tb = experiment.testbed
        self.resuming = resume
        if resume:
            if out is None:
                raise ValueError("resume needs the run's directory")
            replay_started = time.monotonic()
            self._replayed = replay(out)
            self._replay_s = time.monotonic() - replay_started
            meta = self._replayed.meta
            if to_plain(experiment) != meta["experiment"]:
                self._replayed.store.close()
                raise ValueError(f"{out} was run with another experiment than {experiment.name!r}")
            experiment = self._replayed.experiment
            duration, time_unit, seed = meta["duration"], meta["time_unit"], meta["seed"]
            executor, failures = meta["executor"], meta["failures"]
        self.experiment = experiment
        if (experiment.policy.name == "lpas_dg" and len(experiment.machines) >= DEBOUNCE_HINT_MACHINES
                and experiment.policy.options.get("resolve_debounce") is None):
            log.warning("lpas_dg re-solves its LP at every machine up or down; with %d machines, consider "
                        "[policy] resolve_debounce (docs/policies.md)", len(experiment.machines))
        self.duration = tb.duration if duration is None else duration
        self.time_unit = tb.time_unit if time_unit is None else time_unit
        self.seed = experiment.simulation.seed if seed is None else seed
        # How a failure is noticed: silence for the liveness window, or MGST's per-job time-out
        # (the policy's SilenceTimeouts acts on machines we report silent).
        self.detect_by_timeout = tb.detection == "timeout"
        # None: by the number of machines (mgst.liveness: 0.2 s for a lab, longer for thousands).
        self.heartbeat_interval = (heartbeat_interval_for(len(experiment.machines)) if heartbeat_interval is None
                                   else heartbeat_interval)
        self.liveness = liveness
        self.register_timeout = register_timeout
        self.resume_wait = resume_wait
        self.farewell = farewell
        self.executor = tb.executor if executor is None else executor
        if self.executor == "command" and len(tb.commands) != len(experiment.classes):
            raise ValueError("the command executor needs [testbed] commands, one per job class")
        self.failures = failures and experiment.failures is not None
        self.progress = progress  # called every progress_interval seconds (monitoring)
        self.progress_interval = progress_interval
        # Long enough for a job that started at the last moment on the slowest machine.
        biggest = max(c.granularity for c in experiment.classes)
        slowest = max(biggest / (min(r for r in m.rates if r > 0) * m.availability) for m in experiment.machines)
        self.drain_timeout = drain_timeout if drain_timeout is not None else max(30.0, 50 * slowest * self.time_unit)
        # Each machine's availability as its puller plays it (mgst.availability: a trace is sent over the run's
        # length, its generation and drain), made once: a law the wire cannot carry is refused here, not later.
        self.availability_until = (self.duration + self.drain_timeout) / self.time_unit
        until = self.availability_until
        self.availability_forms = ([availability.to_wire(experiment, j, self.seed, until)
                                    for j in range(len(experiment.machines))] if self.failures else None)
        if resume:
            self.journal = self._replayed.journal
            self.core = self._replayed.core
        else:
            store = None
            if out is not None:
                store = RunStore(out / FILENAME, create=True)
                store.set_meta(experiment=to_plain(experiment), seed=self.seed, duration=self.duration,
                               time_unit=self.time_unit,
                               executor=self.executor, failures=self.failures,
                               imports=list(imports), security=self.security, created=time.time())
            self.journal = Journal(experiment, store)
            self.core = make_core(experiment, self.seed)
        self.names = {m.name: j for j, m in enumerate(experiment.machines)}
        self.conns = [Connection(clock=m.clock) for m in self.journal.machines]
        for conn, m in zip(self.conns, self.journal.machines):
            conn.incarnation = m.incarnations[-1] if m.incarnations else None
        self.by_identity: dict[bytes, int] = {}
        # Machines by the key they registered with (the journal's), to tell a shared key in O(1).
        self.machines_of_key: dict[str, set[int]] = {}
        for j, mlog in enumerate(self.journal.machines):
            if mlog.key is not None:
                self.machines_of_key.setdefault(mlog.key, set()).add(j)
        # When a receive pass last found the socket empty: silence is judged as of then (mgst.liveness).
        self.drained_at = time.time()
        self._hb_slice = 0
        # Staging durations from the experiment's model (the simulator's stream, replication 0).
        self.staging = StagingSampler(experiment.staging, self.seed, 0) if experiment.staging is not None else None
        self.drops = DropLog(log)
        # per (key, machine): admitted hellos, at a rate the failure law's restarts never need
        self.hello_rate = TokenBuckets(HELLO_BURST, hello_rate(experiment.failures if self.failures else None,
                                                               self.time_unit, experiment))
        # per machine: requests for work that change something
        self.ready_rate = TokenBuckets(READY_BURST, READY_RATE)
        # Machines that held back a checkpoint (mgst.checkpoints) since the last timer recorded them all.
        self.holding_checkpoints: set[int] = set()
        self._timers: list[tuple[float, int, int, Any]] = []
        self._seq = itertools.count()
        self._outbox: list[tuple[bytes, bytes, int | None]] = []
        self._frozen: float | None = None  # model time, held while a resumed mapper waits for its pullers
        self.t0: float | None = None
        self.stopping = False  # set (e.g. by a signal handler) to end generation early and drain
        self.aborting = False  # set to stop at once (a second interrupt): the journal stays consistent
        self._gc_frozen = False  # the objects of before t0 are out of the collector's sight (_begin)
        self.paused: str | None = None  # why the run paused (its journal cannot be written), once it has
        # A ZAP handler serves a whole context: a secured mapper gets a context of its own, so that two
        # mappers in one process (tests, benchmarks) never share or clash over one.
        self._own_context = context is None and keys is not None
        self._ctx = context or (zmq.Context() if self._own_context else zmq.Context.instance())
        self._auth = security.start_authenticator(self._ctx, keys) if keys is not None else None
        self._curve = keys is not None
        # With per-machine keys (mgst keys), authorized/NAME.key binds machine NAME to its key from the
        # start: another admitted key cannot take a name whose puller has not registered yet.
        self.prebound_keys = security.named_keys(keys, self.names) if keys is not None else {}
        try:
            self.socket = self._ctx.socket(zmq.ROUTER)
            self.socket.setsockopt(zmq.LINGER, 0)
            self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
            self.socket.setsockopt(zmq.MAXMSGSIZE, P.MAX_FRAME)
            self.socket.setsockopt(zmq.RCVHWM, RCVHWM)
            self.socket.setsockopt(zmq.BACKLOG, max(LISTEN_BACKLOG, len(self.conns)))
            if keys is not None:
                security.secure_server(self.socket, keys)
            if bind.endswith(":0"):
                port = self.socket.bind_to_random_port(bind[: -len(":0")])
                bind = f"{bind[: -len(':0')]}:{port}"
            else:
                self.socket.bind(bind)
        except BaseException:
            if hasattr(self, "socket"):
                self.socket.close(linger=0)
            self._close_auth()
            raise
        self.endpoint = bind

    # ------------------------------------------------------------------ time

    def model_now(self, wall: float) -> float:
        if self._frozen is not None:
            return self._frozen
        return 0.0 if self.t0 is None else max(0.0, (wall - self.t0) / self.time_unit)

    def registered(self) -> int:
        return sum(c.identity is not None for c in self.conns)

    def all_registered(self) -> bool:
        """Every machine has its puller (O(1) until the last one says hello: each holds an identity)."""
        return len(self.by_identity) >= len(self.conns) and self.registered() == len(self.conns)

    # ------------------------------------------------------------------ the core, journalled

    def _core(self, method: str, now: float, *args: Any) -> None:
        """Feed the core one input (recorded first, for replay) and carry out what it decides."""
        if method in RELEASE_CHECKPOINTS_BEFORE:
            self._release_checkpoints(method, now, args)
        mnow = self.model_now(now)
        if self.journal.store is not None:
            self.journal.store.append("core", (method, mnow, encode_args(method, args)))
        self._carry_out(call_core(self.core, method, mnow, args), now)

    # ------------------------------------------------------------------ run

    def run(self) -> TestbedRun:
        """The run, to its end; JournalWriteError if the journal cannot be written: the run is paused."""
        try:
            return self._run()
        except JournalWriteError as e:  # nothing the journal lacks has left (_flush): tell the pullers, stop
            log.info("%s: the run is paused", e)  # (the CLI says it, once)
            self.paused = str(e)
            raise
        finally:
            try:
                self._say_bye()
                if self.paused is None:
                    self._farewell()
            finally:
                self._unfreeze()  # (a run that raised after t0 has not)
                self.socket.close(linger=500)  # ms: let the byes go out
                self._close_auth()
                if self.journal.store is not None:
                    self.journal.store.close()

    def _unfreeze(self) -> None:
        """Give what the run froze at t0 back to the collector (once)."""
        if self._gc_frozen:
            self._gc_frozen = False
            gc.unfreeze()

    def _close_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None
        if self._own_context:
            self._own_context = False
            self._ctx.term()  # every socket of it is closed by now

    def _run(self) -> TestbedRun:
        poller = zmq.Poller()
        poller.register(self.socket, zmq.POLLIN)
        started = time.time()
        horizon = self.duration / self.time_unit  # model time
        workload = make_workload(self.experiment, self.seed, 0)
        next_job: Job | Bag | None = None
        generation_end = math.inf
        drain_deadline = math.inf
        if self.resuming:
            next_job = self._prepare_resume(workload, started)
        else:
            self._core("start", started)
        log.info("mapper on %s waiting for %d pullers", self.endpoint, len(self.conns))
        next_hb = next_tick = next_report = started
        backlog = False
        while not self.aborting:
            now = time.time()
            if self.t0 is None:
                if self.stopping:
                    raise Interrupted("stopped while waiting for pullers to register")
                if self.all_registered():
                    self._begin(now)
                elif now - started > self.register_timeout:
                    missing = [m.name for m, c in zip(self.experiment.machines, self.conns) if c.identity is None]
                    raise TimeoutError(f"pullers did not register within {self.register_timeout:g} s: "
                                       f"{', '.join(missing)}")
                if self.t0 is not None:
                    next_job = next_item(workload)
                    generation_end = self.t0 + self.duration
            elif self._frozen is not None and (self.all_registered()
                                                or now - started > self.resume_wait or self.stopping):
                next_job, generation_end, drain_deadline = self._end_resume_wait(now, next_job)
            # arrivals
            while next_job is not None and self.t0 is not None and self._frozen is None:
                due = self.t0 + next_job.submitted * self.time_unit
                if next_job.submitted >= horizon or self.stopping:
                    next_job = None
                    if self.stopping:  # stopped early: the horizon is now
                        generation_end = min(generation_end, now)
                    self.journal.generation_over(self.model_now(generation_end))
                    drain_deadline = now + self.drain_timeout
                    log.info("generation over; draining (at most %.1f s)", self.drain_timeout)
                    break
                if due > now:
                    break
                # The core's clock must not step back: the job keeps its generated submission time,
                # but the event happens now (at most a poll period after it was due).
                if type(next_job) is Bag:
                    for task in next_job.tasks:
                        self.journal.job_arrived(task, due)
                    self._core("bag_arrived", now, next_job)
                else:
                    self.journal.job_arrived(next_job, due)
                    self._core("job_arrived", now, next_job)
                next_job = next_item(workload)
                if next_job is None:  # the workload is exhausted (a list, a trace): generation is over
                    generation_end = min(generation_end, now)
                    self.journal.generation_over(self.model_now(generation_end))
                    drain_deadline = now + self.drain_timeout
                    log.info("the workload is exhausted; draining (at most %.1f s)", self.drain_timeout)
            if self.t0 is not None and self._frozen is None and next_job is None and now >= generation_end:
                if not self.core.queued_count and not self.core.running:
                    break
                if now >= drain_deadline:
                    log.warning("drain time-out: %d jobs queued, %d running", self.core.queued_count,
                                len(self.core.running))
                    break
            # timers
            while self._timers and self._timers[0][0] <= now and self._frozen is None and self.t0 is not None:
                _, _, _, key = heapq.heappop(self._timers)
                if key in self.core.timers:
                    self._core("timer_fired", now, key)
            if now >= next_hb:
                self._heartbeat(now)
                next_hb = now + self.heartbeat_interval / slices_for(len(self.conns))
            if now >= next_tick and self.journal.store is not None:
                self.journal.tick(now)
                next_tick = now + TICK
            if self.progress is not None and now >= next_report:
                self.progress(self)
                next_report = now + self.progress_interval
            self._flush()
            # wait for the next thing to do
            deadline = min(next_hb, next_tick if self.journal.store is not None else math.inf)
            if self.progress is not None:
                deadline = min(deadline, next_report)
            if self._timers:
                deadline = min(deadline, self._timers[0][0])
            if next_job is not None and self.t0 is not None:
                deadline = min(deadline, self.t0 + next_job.submitted * self.time_unit)
            if self.t0 is not None and next_job is None:
                deadline = min(deadline, drain_deadline)
            timeout_ms = 0 if backlog else math.ceil(max(0.0, (deadline - time.time()) * 1000))
            events = dict(poller.poll(timeout_ms))
            backlog = False
            if self.socket in events:
                backlog = self._receive_some(RECEIVE_BATCH)
            else:  # nothing waits: everything sent to us so far has been read
                self.drained_at = time.time()
            self._flush()
        end = time.time()
        if self.t0 is not None and next_job is not None:  # aborted while generating
            generation_end = min(generation_end, end)
        if self.journal.generation_end is None and self.t0 is not None:
            self.journal.generation_over(self.model_now(min(generation_end, end)))
        if self.journal.store is not None:
            self.journal.tick(end)
            self.journal.store.set_meta(drops=dict(self.drops.counts), aborted=self.aborting)
        self._flush()
        return self._result(started, end, generation_end, horizon)

    def _result(self, started: float, end: float, generation_end: float, horizon: float) -> TestbedRun:
        self._unfreeze()
        run = finish_run(self.experiment, self.core, self.journal, self.time_unit, self.t0 or started,
                         generation_end, end, self.drops.counts, horizon, self.seed, self.security, self.aborting)
        if self.journal.store is not None:
            run.resumes = self.journal.store.meta().get("resumes", [])
        return run

    def _begin(self, now: float) -> None:
        """Every machine is registered: model time 0 is now (after the collection below)."""
        # What exists now (the experiment, the machines, their keys and connections, the plan) lives until
        # the end: out of the collector's sight, a full collection in the run scans only what the run made
        # (one paused the mapper 74 ms at 3,000 pullers otherwise). Undone in _result.
        gc.collect()
        gc.freeze()
        self._gc_frozen = True
        now = max(now, time.time())
        self.t0 = now
        self.journal.began(now)
        # A timer set while model time stood at 0 (waiting for pullers) is due at its model time from now.
        self._timers = [(now + self.core.timers[key] * self.time_unit, kind, seq, key)
                        for _, kind, seq, key in self._timers if key in self.core.timers]
        heapq.heapify(self._timers)
        if self.failures:  # failures start with the run's clock, as in the simulation
            for j, conn in enumerate(self.conns):
                self._send(conn.identity, P.Begin(self._failure_law(j)), j)
        log.info("all %d pullers registered; generating jobs for %.1f s", len(self.conns), self.duration)

    # ------------------------------------------------------------------ liveness

    def _heartbeat(self, now: float) -> None:
        """Heartbeat the next slice of the machines, and judge their silence (mgst.liveness)."""
        dead_after = self.liveness * self.heartbeat_interval
        # As of the last time we had read all that was waiting: what sits unread behind a pause of ours
        # (a GC, an LP solve, a backlog) was heard. A socket never emptied for PAUSE_GRACE is a flood.
        heard_until = max(self.drained_at, now - PAUSE_GRACE)
        slices = slices_for(len(self.conns))
        first = self._hb_slice
        self._hb_slice = (first + 1) % slices
        for j in range(first, len(self.conns), slices):
            conn = self.conns[j]
            if conn.identity is None:
                continue
            if heard_until - conn.last_seen > dead_after:
                self._unreachable(j, now, f"silent for {now - conn.last_seen:.2f} s")
                if conn.identity is None:  # taken down; a silent one is still heartbeated: back when it answers
                    continue
            conn.hb_seq += 1
            conn.hb_sent = time.time()
            self._send(conn.identity, P.Heartbeat(conn.hb_seq, conn.hb_sent, conn.remote_clock,
                                                  conn.remote_received), j)

    def _unreachable(self, j: int, now: float, why: str) -> None:
        """It does not answer (``why``): down, or, when failures are detected by time-out, silent."""
        m = self.core.machines[j]
        name = self.experiment.machines[j].name
        if not self.detect_by_timeout:
            log.info("%s %s: down", name, why)
            self._machine_gone(j, now)
        elif m.state is not MachineState.DOWN and not m.silent:
            log.info("%s %s; its jobs time out at %g x their expected time", name, why,
                     self.experiment.testbed.timeout_factor)
            self._core("machine_silent", now, j)

    def _machine_gone(self, j: int, now: float) -> None:
        conn = self.conns[j]
        if conn.identity is not None:
            self.by_identity.pop(conn.identity, None)
            conn.identity = None
        if self.core.machines[j].state is not MachineState.DOWN:
            self.journal.machine_down(j, now)
            self._core("machine_down", now, j)

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
                self.journal.completed(d.job.id, d.replica, d.machine)
                self.journal.end("done", d.replica)
            elif t is JobRequeued:
                self.journal.requeued(d.job.id)
                self.journal.end("lost", d.replica)
            elif t is SetTimer:
                wall = (self.t0 or now) + d.at * self.time_unit
                self._push_timer(wall, d.key)
            elif t is ReplicaTimedOut:  # a policy gave up on it: nothing to kill, a late result still counts
                self.journal.timed_out(d.job_id)
                self.journal.end("timeout", d.replica)
            elif t is MachineSuspected:  # a policy took it down; it is back at its next request
                self.journal.machine_down(d.machine, now)

    def _push_timer(self, wall: float, key: Any) -> None:
        """Fire the policy's timer ``key`` at wall time ``wall`` (stale entries are skipped when popped)."""
        heapq.heappush(self._timers, (wall, _TIMER, next(self._seq), key))

    def _dispatch(self, d: Assign, now: float) -> None:
        j = d.machine
        job = d.job
        m = self.experiment.machines[j]
        rate = m.rates[job.job_class]
        conn = self.conns[j]
        t1, t2 = conn.pending
        conn.pending = (None, None)
        self.journal.sent(d.replica, job.id, j, t1, t2, now)
        key, argv = "", ()
        if self.executor == "command":
            command = self.experiment.testbed.commands[job.job_class]
            key, argv = (command, ()) if isinstance(command, str) else ("", tuple(command))
        stage = 0.0
        if d.staging and self.staging is not None:
            stage = self.staging.duration(d.progress > 0.0)
            if stage <= 0.0:  # nothing to transfer after all: it computes from the start
                self._core("replica_computing", now, d.replica)
        self._send(conn.identity, P.JobMsg(job.id, d.replica, job.job_class, job.size, job.size / rate,
                                           d.progress, stage, key, argv), j)

    # ------------------------------------------------------------------ sending (after the journal has it)

    def _send(self, identity: bytes | None, msg: Any, machine: int | None = None) -> None:
        if identity is not None:
            self._outbox.append((identity, P.encode(msg), machine))

    def _flush(self) -> None:
        """Commit the journal, then send what it decided (write-ahead: no puller holds a job the log lacks)."""
        for _ in range(100):  # a failed send may decide more (machine gone): bounded
            if self.journal.store is not None:
                self.journal.store.commit()
            if not self._outbox:
                return
            out, self._outbox = self._outbox, []
            for identity, frame, machine in out:
                try:
                    self.socket.send_multipart([identity, frame], zmq.NOBLOCK)
                except zmq.ZMQError as e:  # peer gone (ROUTER_MANDATORY) or its queue full
                    log.info("could not send to %s: %s", self._sender(identity), e)
                    gone = e.errno == zmq.EHOSTUNREACH and machine is not None
                    if gone and self.by_identity.get(identity) == machine:
                        self._unreachable(machine, time.time(), "unreachable")

    def _say_bye(self) -> None:
        """The run is over (Bye), or paused (Paused): every registered puller is told."""
        self._outbox.clear()  # decided by events the journal may lack: never sent
        frame = P.encode(P.Bye("run over") if self.paused is None else P.Paused(self.paused[:PAUSE_REASON_MAX]))
        for conn in self.conns:
            if conn.identity is not None:
                try:
                    self.socket.send_multipart([conn.identity, frame], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    def _farewell(self) -> None:
        """For ``farewell`` seconds after the run, answer any hello with a bye: pullers that were down
        at the end (injected failures) learn that the run is over and exit."""
        if self.farewell <= 0 or self.aborting:
            return
        end = time.monotonic() + self.farewell
        bye = P.encode(P.Bye("run over"))
        while not self.aborting and (left := end - time.monotonic()) > 0:
            if not self.socket.poll(math.ceil(left * 1000)):
                continue
            for _ in range(RECEIVE_BATCH):
                try:
                    identity, *rest = self.socket.recv_multipart(zmq.NOBLOCK)
                except (zmq.Again, ValueError):
                    break
                try:
                    if len(rest) == 1 and type(P.decode(rest[0])) is P.Hello:
                        self.socket.send_multipart([identity, bye], zmq.NOBLOCK)
                except (P.ProtocolError, zmq.ZMQError):
                    pass

