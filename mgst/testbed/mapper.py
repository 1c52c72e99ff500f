"""The mapper: drives the scheduling core from the wall clock and the ZeroMQ messages of puller daemons.

Everything in a testbed run revolves around this: the :class:`Mapper` holds the
state of the run (the core, the journal, the pullers' connections, the run's
clock and its timers) and the objects it shares that state with, each built here
with what it needs: the router (the socket), the dispatcher (the core's decisions
carried out), the message handler (what each puller message means), the
heartbeats (when silence means down), the machines' checkpoints and, for a
resumed run, the resume. None of them imports this module (docs/testbed.md).
"""

from __future__ import annotations

import gc
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq

from mgst.availability import registry as availability
from mgst.core.events import BagArrived, Event, JobArrived, MachineDown, RunStart, TimerFired
from mgst.core.state import MachineState
from mgst.model import Bag, Experiment, Job
from mgst.policies.failure import PolicyFailed, PolicyStuck
from mgst.sim.overheads import OverheadSampler, grid_return_delays
from mgst.staging import StagingSampler
from mgst.testbed.checkpoints import RELEASE_CHECKPOINTS_BEFORE, MachineCheckpoints
from mgst.testbed.connection import Connection
from mgst.testbed.core_events import to_plain as event_to_plain
from mgst.testbed.decision_time import DecisionTime
from mgst.testbed.dispatch import Dispatcher
from mgst.testbed.experiment_codec import to_plain
from mgst.testbed.inputs import input_digests
from mgst.testbed.journal import Journal
from mgst.testbed.lasting import Lasting
from mgst.testbed.liveness import LIVENESS, Heartbeats, heartbeat_interval_for
from mgst.testbed.local_time import zone_offset
from mgst.testbed.messages import PullerMessages, some_names
from mgst.testbed.overlay import MapperOverlay
from mgst.testbed.policy_failure import handled
from mgst.testbed.replay import make_core
from mgst.testbed.resume import Resume, next_item, replay_to_resume
from mgst.testbed.router import RECEIVE_BATCH, Router
from mgst.testbed.run_clock import RunClock, WallTimers
from mgst.testbed.run_dir import NewRunDir
from mgst.testbed.run_lock import lock_run, note_holder
from mgst.testbed.run_result import TestbedRun, drain_bound, finish_run
from mgst.testbed.store import JournalWriteError, RunStore
from mgst.testbed.unreachable import PendingUnreachable
from mgst.testbed.wire_availability import availability_forms, availability_until
from mgst.wire import protocol as P
from mgst.wire import security
from mgst.wire.drops import DropLog
from mgst.workload import make_workload

log = logging.getLogger(__name__)

# How often the journal notes that the mapper is alive (bounds the outage a crash leaves).
TICK = 0.5
# A Paused notice's reason is cut to this (a journal path can be long; the protocol allows MAX_STR).
PAUSE_REASON_MAX = 400
# Rounds of committing and sending in one flush: a failed send may decide more (a machine gone).
FLUSH_ROUNDS = 100
# How long a new run waits for its pullers to register (s), and a resumed one for its pullers to come back (they
# reconnect by themselves; a resumed `mgst run` starts its pullers anew, and gives them REGISTER_TIMEOUT).
REGISTER_TIMEOUT = 60.0
RESUME_WAIT = 10.0
# At most one line per this many seconds says that sends failed (a puller that reads nothing fails every one).
SEND_FAILURE_LOG_PERIOD = 5.0
# An interrupted run (Ctrl-C, SIGTERM) drains for at most this long (s), not the run's drain time-out (30 s or
# more): the user wants out, and should have it within 10 s; the jobs still unfinished are cut off.
INTERRUPT_DRAIN = 4.0
# A drain in which jobs stay queued, none running, while every machine is up and asking for work and the policy
# waits on no timer, for this long (s), is said (once): nothing but the drain's limit will end it.
STUCK_DRAIN = 30.0
# Seconds with no puller connected, the clock running, before the mapper says so (once a stretch): every puller gone
# (they gave up on a mapper silent past their --give-up: a stall of the head node), jobs queued for no machine
NOBODY_FOR = 10.0
# The default farewell (s) at most: the pullers' acknowledgements usually end it at once; it lasts only while a
# puller down at the end has not come back.
FAREWELL_MAX = 60.0


def default_farewell(experiment: Experiment, time_unit: float) -> float:
    """How long a run's end waits by default for pullers down at the end (injected failures) to come back and be
    told: 2 s and five mean down periods, in the run's wall seconds."""
    return min(FAREWELL_MAX, 2.0 + 5 * availability.longest_down(experiment.failures, experiment) * time_unit)


class Interrupted(Exception):
    """The run was stopped before it began (while waiting for pullers)."""


class Mapper:
    """One testbed run: register pullers, generate jobs in real time, schedule, drain, report.

    The job generator draws the same streams as replication 0 of the simulator
    with the same seed, so the two runs see the same job sequence. With ``out``,
    every event is journalled to ``out/journal.sqlite`` as it happens, and
    nothing the journal does not have leaves the mapper (write-ahead); with
    ``resume``, the run in ``out`` continues where its journal ends. ``network``: the settings of the
    emulated network its pullers are behind (mgst run --network), journalled; a resume must give the same.
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
        register_timeout: float = REGISTER_TIMEOUT,
        begin_with: int | None = None,
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
        farewell: float | None = 0.0,
        resume_wait: float = RESUME_WAIT,
        network: dict[str, Any] | None = None,
    ):
        self.security = security.security_mode(bind, keys, insecure)
        tb = experiment.testbed
        replayed, replay_s = None, 0.0
        if resume:
            if out is None:
                raise ValueError("resume needs the run's directory")
            replayed, replay_s = replay_to_resume(out, experiment, network, self.security)
            meta = replayed.meta
            experiment = replayed.experiment
            duration, time_unit, seed = meta["duration"], meta["time_unit"], meta["seed"]
            executor, failures = meta["executor"], meta["failures"]
        self.experiment = experiment
        self.duration = tb.duration if duration is None else duration
        self.time_unit = tb.time_unit if time_unit is None else time_unit
        self.seed = experiment.simulation.seed if seed is None else seed
        # How a failure is noticed: silence for the liveness window, or MGST's per-job time-out
        # (the policy's SilenceTimeouts acts on machines we report silent).
        detect_by_timeout = tb.detection == "timeout"
        # None: by the number of machines (mgst.testbed.liveness: 0.2 s for a lab, longer for thousands).
        self.heartbeat_interval = (heartbeat_interval_for(len(experiment.machines)) if heartbeat_interval is None
                                   else heartbeat_interval)
        self.liveness = liveness
        self.register_timeout = register_timeout
        # Begin once this many pullers registered (None: all of them); the others join later, their machines DOWN
        # until then (pilot jobs of a batch system start as the queue lets them: docs/lab.md).
        self.begin_with = begin_with
        self.resume_wait = resume_wait
        # None: long enough for a puller down at the end to come back (the run's own time unit, a resumed one's too)
        self.farewell = default_farewell(experiment, self.time_unit) if farewell is None else farewell
        self.executor = tb.executor if executor is None else executor
        if self.executor == "command" and len(tb.commands) != len(experiment.classes):
            raise ValueError("the command executor needs [testbed] commands, one per job class")
        self.failures = failures and experiment.failures is not None
        self.progress = progress  # called every progress_interval seconds (monitoring)
        self.progress_interval = progress_interval
        self.drain_timeout = drain_timeout if drain_timeout is not None else drain_bound(experiment, self.time_unit)
        # Each machine's availability as its puller plays it (mgst.availability: a trace is sent over the run's
        # length, its generation and drain), made once: a law the wire cannot carry is refused here, not later.
        self.availability_until = availability_until(experiment, self.duration, self.time_unit, self.drain_timeout)
        self.availability_forms = (availability_forms(experiment, self.seed, self.availability_until) if self.failures
                                   else None)
        # Bound before the journal is created: a bind refused leaves no journal behind (that would refuse the retry).
        self.router = Router(bind, keys, context, len(experiment.machines))
        self.endpoint = self.router.endpoint
        # A new run's directory: its journal is removed again if the run never begins (run()).
        self.new_dir = NewRunDir(out) if out is not None and replayed is None else None
        try:
            self._open_journal(experiment, replayed, imports, network)
        except BaseException:
            self.router.close()
            if replayed is not None:
                replayed.store.close()
            raise
        self.clock = RunClock(self.time_unit)
        self.conns = [Connection(clock=m.clock) for m in self.journal.machines]
        for conn, m in zip(self.conns, self.journal.machines):
            conn.incarnation = m.incarnations[-1] if m.incarnations else None
        self.by_identity: dict[bytes, int] = {}  # a registered puller's routing id -> its machine
        # When a receive pass last found the socket empty: silence is judged as of then (mgst.testbed.liveness).
        self.drained_at = time.time()
        self._stuck = Lasting(STUCK_DRAIN)  # (_say_if_nothing_runs: nothing could run, in the drain; said once)
        self._nobody = Lasting(NOBODY_FOR, again=True)  # (_say_if_nobody_is_here: no puller connected)
        # Staging durations from the experiment's model (the simulator's stream, replication 0).
        self.staging = StagingSampler(experiment.staging, self.seed, 0) if experiment.staging is not None else None
        # The grids' returned-result delays (mgst.availability.grids): drawn per job as the simulation draws them
        # (its post-compute overheads, replication 0's streams), held by the puller before it reports the result.
        delays = grid_return_delays(experiment)
        self.result_holds = OverheadSampler(delays, self.seed, 0) if delays is not None else None
        self.drops = DropLog(log)
        # messages that could not leave (their count, and the count and time of the last line saying so)
        self.send_failures = 0
        self._send_failures_told = 0
        self._send_failure_logged = -math.inf
        self.timers = WallTimers()
        self.stopping = False  # set (e.g. by a signal handler) to end generation early and drain
        self.aborting = False  # set to stop at once (a second interrupt): the journal stays consistent
        # time.perf_counter() when the core (its policy) began the input it handles now; None between inputs. A signal
        # handler reads it: a policy that does not return holds the loop, which would never see ``aborting``.
        self.deciding_since: float | None = None
        self._gc_frozen = False  # the objects of before t0 are out of the collector's sight (_begin)
        # The wall time this mapper spends in the core, input by input (a resumed one: from its resume on)
        self.decision_time = DecisionTime()
        self.paused: str | None = None  # why the run paused (its journal cannot be written), once it has
        self.policy_failure: str | None = None  # what the core raised, once it failed (the run then stopped)
        # A decision that did not return, ended by a third interrupt: its input's seq in the journal (its replay
        # stops there, not in the policy again) and how long it held the run; None if none.
        self.policy_stuck: dict[str, Any] | None = None
        # GridBot's overlay (mgst.testbed.overlay), set by the driver that starts the pullers: it takes its turns at
        # the grids whose size it drives, at model times, from the run's start (None: a fixed set of machines).
        self.overlay: MapperOverlay | None = None
        try:
            self.dispatcher = Dispatcher(experiment, self.journal, self.conns, self.clock, self.timers,
                                         send=self.router.send, feed=self.feed, executor=self.executor,
                                         staging=self.staging,
                                         hold=(lambda j: self.result_holds.draw(j)[2]) if self.result_holds else None)
            self.checkpoints = MachineCheckpoints(self.core, experiment, self.time_unit, self.feed)
            self.heartbeats = Heartbeats(experiment, self.core, self.journal, self.conns, self.by_identity,
                                         send=self.router.send, feed=self.feed, interval=self.heartbeat_interval,
                                         liveness=liveness, detect_by_timeout=detect_by_timeout)
            # sends that found a connection gone, judged once what waits is read (mgst.testbed.unreachable)
            self.unreachable = PendingUnreachable(self.by_identity, self.heartbeats.unreachable,
                                                  self.heartbeat_interval, liveness)
            self.messages = PullerMessages(
                experiment, self.core, self.journal, self.conns, self.by_identity, self.clock, self.drops,
                self.router, self.checkpoints, keys, feed=self.feed, machine_gone=self.heartbeats.machine_gone,
                heartbeat_interval=self.heartbeat_interval, liveness=liveness, executor=self.executor,
                failures=self.failures, seed=self.seed, unreachable=self.unreachable,
                availability_forms=self.availability_forms, availability_until=self.availability_until)
            self.resume = (Resume(replayed, replay_s, self.clock, self.conns, feed=self.feed,
                                  push_timer=self.timers.push, duration=self.duration,
                                  drain_timeout=self.drain_timeout)
                           if replayed is not None else None)
        except BaseException:
            self.router.close()
            self._close_journal()
            raise

    def _open_journal(self, experiment: Experiment, replayed: Any, imports: tuple[str, ...],
                      network: dict[str, Any] | None) -> None:
        """The journal and core: replayed (a resume), or new (with a store in the run's directory, if any)."""
        if replayed is not None:
            self.journal = replayed.journal
            self.core = replayed.core
            return
        store = None
        if self.new_dir is not None:
            try:
                store = RunStore(self.new_dir.journal, create=True)
            except (JournalWriteError, OSError):  # made, not writable (a full disk): removed, or it refuses the retry
                self.new_dir.discard()  # (a journal that was there already is a StoreError, raised before it is made)
                raise
            try:
                lock = lock_run(self.new_dir.out)  # held while this mapper runs: a --resume meanwhile is refused
                store.hold_lock(lock)
                note_holder(lock)
                created = time.time()
                store.set_meta(experiment=to_plain(experiment), seed=self.seed, duration=self.duration,
                               time_unit=self.time_unit, executor=self.executor, failures=self.failures,
                               imports=list(imports), security=self.security, created=created,
                               utc_offset_s=zone_offset(created),
                               inputs=input_digests(experiment), network=network)
            except BaseException:
                store.close()
                self.new_dir.discard()
                raise
        self.journal = Journal(experiment, store)
        self.core = make_core(experiment, self.seed)

    def _close_journal(self) -> None:
        """Close the journal's store; a new run's journal is removed if the run never began (no job in it)."""
        if self.journal.store is not None:
            self.journal.store.close()
        if self.new_dir is not None and self.clock.t0 is None and not self.journal.jobs:
            self.new_dir.discard()

    # ------------------------------------------------------------------ time

    @property
    def t0(self) -> float | None:
        """The wall time of model time 0; None until every puller has registered."""
        return self.clock.t0

    def model_now(self, wall: float) -> float:
        return self.clock.model_now(wall)

    def elapsed(self, wall: float) -> float:
        """The run's seconds at wall time ``wall``: 0 before it begins, still while a resumed mapper waits for its
        pullers (the outage is cut out of the run), as its model time counts them."""
        return self.clock.model_now(wall) * self.time_unit

    def resuming(self) -> bool:
        """Whether a resumed mapper is holding its clock while it waits for its pullers."""
        return self.clock.held is not None

    def _say_if_nothing_runs(self, now: float, drain_deadline: float) -> None:
        """In the drain: jobs queued, none running, every machine up and asking for work, no timer of the policy's
        to wait for, and so for STUCK_DRAIN s: said once (a warning), since the drain then only waits for its
        limit (a requirement no host meets: the simulation says as much, 'nothing was left to happen')."""
        core = self.core
        stuck = (core.queued_count > 0 and not core.running and not core.timers
                 and all(m.state is not MachineState.DOWN and m.asking > 0 for m in core.machines))
        lasted = self._stuck.due(now, stuck)
        if lasted is not None:
            log.warning("%d jobs queued, none running, and every machine up and asking for work for %.0f s of the "
                        "drain: the policy sends them to no machine (a requirement no host meets?); the drain waits "
                        "for its limit, %.0f s from now (Ctrl-C ends it, the results kept)", core.queued_count,
                        lasted, max(0.0, drain_deadline - now))

    def _say_if_nobody_is_here(self, now: float) -> None:
        """The clock runs and no puller has been connected for NOBODY_FOR s: said once a stretch (a warning), since
        jobs then queue for no machine until the drain cuts them off (every puller gave up on this mapper silent past
        their --give-up, a stall of the head node; or they were stopped)."""
        lasted = self._nobody.due(now, not self.by_identity)
        if lasted is not None:
            log.warning("no puller has been connected for %.0f s (every machine down: by its failure law, or pullers "
                        "that gave up on this mapper, silent past their --give-up, or were stopped): %d jobs queue for "
                        "no machine; start the pullers that are gone again", lasted, self.core.queued_count)

    def draining(self, now: float) -> bool:
        """Whether the run drains at wall time ``now``: its end of generation has passed, or it was stopped (the
        journal knows the end of generation from the last arrival before it, and the drain counts from the end)."""
        generation_end = self.journal.generation_end  # (model time)
        return self.clock.t0 is not None and (self.stopping or (
            generation_end is not None and self.model_now(now) >= generation_end))

    def registered(self) -> int:
        return sum(c.identity is not None for c in self.conns)

    def all_registered(self) -> bool:
        """Every machine has its puller (O(1) until the last one says hello: each holds an identity)."""
        return len(self.by_identity) >= len(self.conns) and self.registered() == len(self.conns)

    # ------------------------------------------------------------------ the core, journalled

    def feed(self, now: float, event: Event) -> None:
        """Feed the core one event through its one entry point (recorded first, typed, for replay: core_events) and
        carry out what it decides. Nothing once the policy has failed: the core stopped half-way through an input,
        and the run's end must not feed it (a puller found gone while the last messages are sent)."""
        if self.policy_failure is not None:
            return
        if type(event) in RELEASE_CHECKPOINTS_BEFORE:
            self.checkpoints.release(event, now)
        mnow = self.clock.model_now(now)
        if self.journal.store is not None:
            name, fields = event_to_plain(event)
            self.journal.store.append("event", (name, mnow, fields))
        # A machine down loses every replica it holds; the core says so (JobRequeued) only of a job's last one, not
        # of a replica whose job runs elsewhere too, nor of a loser running on after its job was done.
        held = list(self.core.machines[event.machine].replicas) if type(event) is MachineDown else ()
        deciding = time.perf_counter()
        self.deciding_since = deciding
        try:
            outputs = handled(self.core, mnow, event)  # (PolicyFailed: the run stops, _run)
        except KeyboardInterrupt as e:
            if not self.aborting:  # (not the third interrupt's, raised inside the policy by the command's handler)
                raise
            held = time.perf_counter() - deciding
            store = self.journal.store
            self.policy_stuck = {"seq": store.last_seq if store is not None else None, "held_s": round(held, 3)}
            stuck = PolicyStuck(f"it did not return in {held:.0f} s, and the run was ended inside it (a third "
                                "interrupt)")
            stuck.__traceback__ = e.__traceback__  # (where the interrupt found it: the log shows the policy's frames)
            raise PolicyFailed(self.core.policy.name, type(event).__name__, mnow, stuck) from None
        finally:
            self.deciding_since = None
        self.decision_time.add(time.perf_counter() - deciding)
        self.dispatcher.carry_out(outputs, now)
        for rid in held:
            self.journal.end("lost", rid)  # (only a replica the journal has running: one requeued is ended already)

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
                if self.paused is None and self.farewell > 0 and not self.aborting and self.clock.t0 is not None:
                    # pullers that were down at the end (injected failures) learn that the run is over (a run that
                    # never began has none: its pullers did not come, or were told at once)
                    # (an interrupted run says farewell for no longer than it drained: the user wants out)
                    farewell = min(self.farewell, INTERRUPT_DRAIN) if self.stopping else self.farewell
                    self.router.farewell(farewell, lambda: self.aborting, self._not_told(), self._registered())
            finally:
                self._unfreeze()  # (a run that raised after t0 has not)
                self.router.close(linger_ms=500)  # let the byes go out
                self._close_journal()

    def close(self) -> None:
        """Close the socket and journal of a mapper that will not run (run() closes them otherwise)."""
        self.router.close()
        self._close_journal()

    def _unfreeze(self) -> None:
        """Give what the run froze at t0 back to the collector (once)."""
        if self._gc_frozen:
            self._gc_frozen = False
            gc.unfreeze()

    def _run(self) -> TestbedRun:
        socket = self.router.socket
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        started = time.time()
        horizon = self.duration / self.time_unit  # model time
        workload = make_workload(self.experiment, self.seed, 0)
        next_job: Job | Bag | None = None
        generation_end = math.inf
        drain_deadline = math.inf
        clock, timers = self.clock, self.timers
        next_hb = next_tick = next_report = started
        backlog = False
        interrupted_at: float | None = None  # when the loop first saw self.stopping (after t0)
        warned_alone = False  # (a resume with no puller back: said once)
        try:
            if self.resume is not None:
                next_job = self.resume.prepare(workload, started)
            # (a fresh run's RunStart waits for the pullers: the policy's start() sees them up and asking, as in the
            # simulation: _begin)
            log.info("mapper on %s waiting for %d pullers", self.endpoint, len(self.conns))
            while not self.aborting:
                now = time.time()
                if clock.t0 is None:
                    if self.stopping:
                        raise Interrupted("stopped while waiting for pullers to register")
                    if self.all_registered() or (self.begin_with is not None and self.registered() >= self.begin_with):
                        self._begin(now)
                    elif now - started > self.register_timeout:
                        missing = [m.name for m, c in zip(self.experiment.machines, self.conns) if c.identity is None]
                        raise TimeoutError(f"{len(missing)} of {len(self.conns)} pullers did not register within "
                                           f"{self.register_timeout:g} s: {some_names(missing)}")
                    if clock.t0 is not None:
                        next_job = next_item(workload)
                        generation_end = clock.t0 + self.duration
                elif clock.held is not None and not self.registered() and now - started > self.resume_wait:
                    # No puller is back: the run would go on with no machine, its jobs queued until the drain cut
                    # them off (a resume after the pullers gave up, --give-up). It waits for one, as a new run waits
                    # for its pullers, and then stops, the journal kept as it was.
                    if self.stopping:
                        raise Interrupted("stopped while waiting for the pullers to come back")
                    if not warned_alone:
                        warned_alone = True
                        log.warning("no puller is back %.0f s after the resume: the run waits for one (up to %.0f s); "
                                    "pullers that gave up (their --give-up) must be started again",
                                    self.resume_wait, self.register_timeout)
                    if now - started > self.register_timeout:
                        names = some_names([m.name for m in self.experiment.machines])
                        raise TimeoutError(f"no puller came back within {self.register_timeout:g} s of the resume "
                                           f"(of {len(self.conns)}: {names}); the run is kept as it was: start the "
                                           "pullers again, then resume it again")
                elif clock.held is not None and (self.all_registered()
                                                 or now - started > self.resume_wait or self.stopping):
                    assert self.resume is not None  # (only a resume holds the clock)
                    next_job, generation_end, drain_deadline = self.resume.end_wait(now, next_job)
                    self._rebase_failures(now)
                    self.messages.release_held_requests(now)
                # arrivals
                while next_job is not None and clock.t0 is not None and clock.held is None:
                    due = clock.t0 + next_job.submitted * self.time_unit
                    if next_job.submitted >= horizon or self.stopping:
                        next_job = None
                        if self.stopping:  # stopped early: the horizon is now
                            generation_end = min(generation_end, now)
                        drain_deadline = self._generation_over(generation_end)
                        log.info("generation over (no arrival before the horizon, in %.1f s); then a drain of at most "
                                 "%.1f s", max(0.0, generation_end - now), self.drain_timeout)
                        break
                    if due > now:
                        break
                    # The core's clock must not step back: the job keeps its generated submission time,
                    # but the event happens now (at most a poll period after it was due).
                    if type(next_job) is Bag:
                        for task in next_job.tasks:
                            self.journal.job_arrived(task, due)
                        self.feed(now, BagArrived(next_job))
                    else:
                        self.journal.job_arrived(next_job, due)
                        self.feed(now, JobArrived(next_job))
                    next_job = next_item(workload)
                    if next_job is None:  # the workload is exhausted (a list, a trace): generation is over
                        generation_end = min(generation_end, now)
                        drain_deadline = self._generation_over(generation_end)
                        log.info("the workload is exhausted; draining (at most %.1f s)", self.drain_timeout)
                if self.stopping and clock.t0 is not None and clock.held is None and next_job is None:
                    if interrupted_at is None:
                        interrupted_at = now
                        log.info("interrupted: draining for at most %.1f s", INTERRUPT_DRAIN)
                        if now < generation_end:  # after the last arrival, before the horizon: generation ends now
                            generation_end = now
                            drain_deadline = min(drain_deadline, self._generation_over(now))
                        if interrupted_at + INTERRUPT_DRAIN < drain_deadline:  # kept, for a resume after a crash in it
                            drain_deadline = interrupted_at + INTERRUPT_DRAIN
                            self.journal.interrupted(clock.model_now(drain_deadline))
                    if self._no_machine_up():  # nothing queued or running can finish: no wait
                        log.warning("interrupted, and no machine is up: %d jobs queued, %d running cut off",
                                    self.core.queued_count, len(self.core.running))
                        break
                if clock.t0 is not None and clock.held is None and next_job is None and now >= generation_end:
                    if not self.core.queued_count and not self.core.running and not self.core.view.live:
                        break  # (a loser that runs on after its job is done ends as it would: its waste counts)
                    if now >= drain_deadline:
                        log.warning("drain time-out: %d jobs queued, %d running", self.core.queued_count,
                                    len(self.core.running))
                        break
                    self._say_if_nothing_runs(now, drain_deadline)
                if clock.t0 is not None and clock.held is None:
                    self._say_if_nobody_is_here(now)
                overlay = self.overlay
                if (overlay is not None and clock.t0 is not None and clock.held is None
                        and now >= clock.t0 + overlay.next_at() * self.time_unit):  # (as an arrival is due: after them)
                    try:  # (the overlay asks the policy which grids a bag may use, what it holds queued)
                        overlay.due(clock.model_now(now), self.core.machines, self.core.view)
                    except Exception as e:
                        raise PolicyFailed(self.core.policy.name, "the overlay's turn", clock.model_now(now), e
                                           ) from e
                # timers
                while timers.next_at() <= now and clock.held is None and clock.t0 is not None:
                    key = timers.pop()
                    if key in self.core.timers:  # (a stale entry is skipped)
                        self.feed(now, TimerFired(key))
                if now >= next_hb:
                    self.unreachable.beat(now)  # (a gap its pullers may have taken for silence: a grace)
                    if self.unreachable.grace_until > now:  # (handshakes it cut short: said as such)
                        self.router.handshakes.after_stall(self.unreachable.grace_until)
                    self.heartbeats.beat(now, self.drained_at, self.unreachable.grace_until)
                    next_hb = now + self.heartbeat_interval / self.heartbeats.slices
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
                deadline = min(deadline, timers.next_at())
                if overlay is not None and clock.t0 is not None:
                    deadline = min(deadline, clock.t0 + overlay.next_at() * self.time_unit)
                if next_job is not None and clock.t0 is not None:
                    deadline = min(deadline, clock.t0 + next_job.submitted * self.time_unit)
                if clock.t0 is not None and next_job is None:
                    deadline = min(deadline, drain_deadline)
                deadline = min(deadline, self.unreachable.due(time.time()))
                timeout_ms = 0 if backlog else math.ceil(max(0.0, (deadline - time.time()) * 1000))
                events = dict(poller.poll(timeout_ms))
                backlog = False
                if socket in events:
                    backlog = self.messages.receive_some(RECEIVE_BATCH)
                if not backlog:  # nothing waits: everything sent to us so far has been read (mgst.testbed.liveness)
                    self.drained_at = time.time()
                if self.unreachable:
                    self.unreachable.judge(time.time(), backlog)
                self._flush()
            if not self.aborting:
                self._flush()
                if self.unreachable:
                    # the last sends' failures (nothing more is read), judged as they stand, before the run's end (a
                    # policy that fails on what follows fails as in the run)
                    self.unreachable.judge(time.time(), False, final=True)
                    self._flush()
        except PolicyFailed as e:  # the core cannot go on: the run stops here, and what was done is written
            self._policy_failed(e)
        end = time.time()
        if clock.t0 is not None and next_job is not None:  # aborted while generating
            generation_end = min(generation_end, end)
        if self.journal.generation_end is None and clock.t0 is not None:
            self.journal.generation_over(clock.model_now(min(generation_end, end)))
        if self.journal.store is not None:
            self.journal.tick(end)
        self._flush()
        if self.journal.store is not None:  # last, once every event is committed: a journal with it is a run over
            # (a commit failing after it would pause the run, exit 75, and leave one --resume refuses as finished)
            failed = {} if self.policy_failure is None else {"policy_failure": self.policy_failure}
            if self.policy_stuck is not None:
                failed["policy_stuck"] = self.policy_stuck
            self.journal.store.set_meta(drops=dict(self.drops.counts), aborted=self.aborting, ended=end,
                                        decision_time=self.decision_time.plain(), **failed)
        return self._result(started, end, generation_end, horizon)

    def _policy_failed(self, failure: PolicyFailed) -> None:
        """The core raised while it handled an input: the run stops at once (the core may be half-way through the
        input); its end says why (the journal's settings too, with its end mark, once every event is committed). A
        failure before the run began (the policy's start) ends it as a start that fails: PolicyFailed, nothing
        kept."""
        cause = failure.cause
        began = self.clock.t0 is not None
        log.error("%s: %s", failure, "the run stops; what was done is written" if began else "the run does not begin",
                  exc_info=(type(cause), cause, cause.__traceback__))
        self.policy_failure = str(failure)
        self.aborting = True
        if not began:
            raise failure

    def _no_machine_up(self) -> bool:
        """Every machine is down (its puller gone, silent or failed)."""
        return all(m.state is MachineState.DOWN for m in self.core.machines)

    def _generation_over(self, generation_end: float) -> float:
        """Arrivals end at wall time ``generation_end``: journal it; when the drain ends (wall). The drain time-out
        counts from the end of generation, as a resumed run counts it (mgst.testbed.resume) and the simulation
        beside the run does, not from when the mapper saw that no more jobs would come (its last arrival)."""
        self.journal.generation_over(self.clock.model_now(generation_end))
        return generation_end + self.drain_timeout

    def _result(self, started: float, end: float, generation_end: float, horizon: float) -> TestbedRun:
        self._unfreeze()
        meta = self.journal.store.meta() if self.journal.store is not None else {}
        run = finish_run(self.experiment, self.core, self.journal, self.time_unit, self.clock.t0 or started,
                         generation_end, end, self.drops.counts, horizon, self.seed, self.security, self.aborting,
                         meta.get("utc_offset_s"))
        run.resumes = meta.get("resumes", [])
        run.policy_failure = self.policy_failure
        run.decision_time = self.decision_time
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
        # The policy sets itself up seeing every machine that registered up and asking, as a simulation's policy sees
        # its machines in start() (it saw none here, registrations coming after it: an LP planned for an empty grid);
        # a journal of before kept it first, and its mapper, dead before the clock began, had it replayed
        if not self.core.started:
            self.feed(now, RunStart())
        self.clock.begin(now)
        self.journal.began(now)
        # A timer set while model time stood at 0 (waiting for pullers) is due at its model time from now.
        self.timers.rebase(now, self.time_unit, self.core.timers)
        if self.failures:  # failures start with the run's clock, as in the simulation
            for j, conn in enumerate(self.conns):
                if conn.identity is not None:  # (with --begin-with, one registering later misses them)
                    self.router.send(conn.identity, P.Begin(self.messages.failure_law(j)), j)
        log.info("%d of %d pullers registered; generating jobs for %.1f s", self.registered(), len(self.conns),
                 self.duration)

    def _rebase_failures(self, now: float) -> None:
        """A resumed run's clock runs again: each puller playing a failure law is told the model time (a Begin),
        on which it re-bases its schedule (which ran on through the outage and the wait, while model time stood
        still); from now on a Begin follows each welcome too (a puller away now, or whose Begin is lost)."""
        if not self.failures:
            return
        at = self.clock.model_now(now)
        for j, conn in enumerate(self.conns):
            if conn.identity is not None:
                self.router.send(conn.identity, P.Begin(self.messages.failure_law(j), at), j)
        self.messages.rebase_on_welcome = True

    # ------------------------------------------------------------------ sending (after the journal has it)

    def _flush(self) -> None:
        """Commit the journal, then send what it decided (write-ahead: no puller holds a job the log lacks)."""
        router = self.router
        for _ in range(FLUSH_ROUNDS):  # a failed send may decide more (machine gone): bounded
            if self.journal.store is not None:
                self.journal.store.commit()
            if not router.outbox:
                return
            router.send_queued(self._undeliverable)

    def _undeliverable(self, identity: bytes, machine: int | None, e: zmq.ZMQError) -> None:
        """A message to ``identity`` could not leave: if its peer is gone, or reads nothing (its queue full: what
        we send it is lost, its jobs and cancels alike), its machine is unreachable, once judged so
        (mgst.testbed.unreachable). Logged at a bounded rate."""
        self.send_failures += 1
        now = time.monotonic()
        if now - self._send_failure_logged >= SEND_FAILURE_LOG_PERIOD:
            more = self.send_failures - self._send_failures_told - 1
            log.info("could not send to %s: %s%s", self.messages.sender(identity), e,
                     f" ({more} more failed sends since the last line)" if more else "")
            self._send_failure_logged, self._send_failures_told = now, self.send_failures
        if e.errno in (zmq.EHOSTUNREACH, zmq.EAGAIN) and machine is not None:
            self.unreachable.failed(identity, machine, "unreachable" if e.errno == zmq.EHOSTUNREACH
                                    else "not reading (its queue is full)", time.time())

    def _not_told(self) -> set[str]:
        """The machines whose puller the bye may not have reached, which the farewell waits for: with injected
        failures, every one (a puller down by its schedule reads nothing, and the mapper may not know it yet);
        else those unregistered, down or silent at the end (none: no farewell at all)."""
        machines = self.experiment.machines
        if availability.longest_down(self.experiment.failures, self.experiment) > 0:
            return {m.name for m in machines}
        return {m.name for m, conn, state in zip(machines, self.conns, self.core.machines)
                if conn.identity is None or state.state is MachineState.DOWN or state.silent}

    def _registered(self) -> dict[bytes, str]:
        """The registered pullers' connections, to their machines' names: their acknowledged bye ends their wait."""
        return {conn.identity: m.name for m, conn in zip(self.experiment.machines, self.conns)
                if conn.identity is not None}

    def _say_bye(self) -> None:
        """The run is over (Bye), or paused (Paused): every registered puller is told."""
        frame = P.encode(P.Bye("run over") if self.paused is None else P.Paused(self.paused[:PAUSE_REASON_MAX]))
        self.router.say_bye(frame, [conn.identity for conn in self.conns if conn.identity is not None])
