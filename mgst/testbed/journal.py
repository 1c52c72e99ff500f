"""The testbed's event journal: every observable instant of every job and machine, its replay and CSV export."""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgst.model import Experiment, Job
from mgst.results import JOB_COLUMNS, six_places
from mgst.testbed.clock_offsets import MAX_DRIFT, OffsetEstimator
from mgst.testbed.local_time import wall_iso as local_iso
from mgst.testbed.store import RunStore

# The incarnations of a machine remembered (a retired one that hellos again is refused for good): a
# puller that lost its name retries within seconds, long before this many newer ones have registered
# (re-registrations are rate-limited, mgst.testbed.admission.HELLO_RATE), and the list stays short to copy.
INCARNATIONS_KEPT = 64


# The mapper notes from its loop every half second (mapper.TICK) that it is alive. A longer silence between two
# notes of a run under way is a stall: the loop did not turn (its host, its disk or its own work held it), and
# arrivals, requests and results waited. A silence of this many seconds or more is kept (Journal.stalls): the
# stall itself, and up to the half second between two notes.
STALL = 2.0


@dataclass(slots=True)
class ReplicaLog:
    """The instants of section 4.3.2 for one replica, all on the mapper's clock (seconds).

    t1 the puller announced it was free, t2 the mapper learnt it, t3 the decision
    was made and the job sent, t4r the puller received it, t4 it started, t5 it
    finished, t6 the mapper learnt it was done. There is no result transfer, so
    the paper's t7 is t6. Puller-side instants are kept as the puller stamped them
    (``*_remote``) and put on the mapper's clock when they are recorded, with the
    offset estimated from the heartbeats of the last minute (the estimator's
    bounded window), kept within what the replica's message of that time allows
    (none arrives before it left). The journal's events carry everything the
    correction uses, in order, so a replay computes the same values.
    """

    replica: int
    job: int
    machine: int
    t1_remote: float | None
    t2: float | None
    t3: float
    t4r_remote: float | None = None
    t4_remote: float | None = None
    t5_remote: float | None = None
    t6: float | None = None
    t1: float | None = None  # the corrected instants, set as the puller's are recorded
    t4r: float | None = None
    t4: float | None = None
    t5: float | None = None
    # done, cancelled, lost (its machine down), unheld (sent as its puller reconnected: never received), timeout,
    # failed, refused, discarded, cut off
    outcome: str = "running"
    achieved_share: float | None = None
    late_heard: bool = False  # a result after its time-out, its job done meanwhile, was told the core (once)


@dataclass(slots=True)
class JobLog:
    job: Job
    submitted: float  # wall time of arrival
    replicas: list[int] = field(default_factory=list)
    done_by: int | None = None
    timed_out: bool = False
    requeues: int = 0
    across_outage: bool = False  # submitted before a mapper crash, done after it: its times include the outage


@dataclass(slots=True)
class MachineLog:
    name: str
    share: float  # requested a_j
    clock: OffsetEstimator = field(default_factory=OffsetEstimator)  # of this machine's clock
    periods: list[list[float | None]] = field(default_factory=list)  # [up_since, down_at] on the mapper's clock
    # The down_at of the periods a policy's suspicion ended (the machine taken down without a failure: back at its
    # next request), not a failure's
    suspected: set[float] = field(default_factory=set)
    # The down_at of the periods its puller ended by leaving (its Bye: --idle-exit, a stop, the mapper's "run over"),
    # not a failure's
    left: set[float] = field(default_factory=set)
    achieved: list[float] = field(default_factory=list)  # per finished job
    jobs_run: int = 0
    offset: float = 0.0
    rtt: float | None = None
    incarnations: list[int] = field(default_factory=list)  # the latest INCARNATIONS_KEPT incarnations, in order
    registrations: int = 0  # incarnations registered in all
    # hellos of a registered incarnation on a new connection: its puller heard nothing from the mapper for its
    # liveness window (a stall, the network), or came back to a resumed mapper
    reconnections: int = 0
    key: str | None = None  # the CURVE public key (z85) its name is bound to; None without CURVE
    speed: float = 0.0  # calibrated spin-kernel iterations per second, as the puller reported
    expelled: tuple[float, str] | None = None  # (wall time, why) the mapper took it out of the run for good


class Journal:
    """Written by the mapper as things happen; read at the end for CSVs and statistics.

    Every change goes through one recording method, which appends an event to
    the run's store (if it has one) and applies it here; :meth:`apply` applies
    a stored event, so that replaying a store rebuilds the same journal.
    """

    def __init__(self, experiment: Experiment, store: RunStore | None = None):
        self.experiment = experiment
        self.store = store
        self.jobs: dict[int, JobLog] = {}
        self.replicas: dict[int, ReplicaLog] = {}
        self.machines = [MachineLog(m.name, m.availability) for m in experiment.machines]
        self.start: float | None = None  # wall time of model time 0 (moved on by a resume)
        self.first_start: float | None = None  # wall time the run began (its first begin; a resume leaves it)
        self.generation_end: float | None = None  # model time arrivals stopped
        self.interrupt_drain_end: float | None = None  # model time an interrupted run's drain ends at the latest
        self.last_wall: float | None = None  # the latest wall time the journal saw (ticks included)
        self.outages: list[tuple[float, float]] = []  # (last heard of the old mapper, resumed), wall time
        self.late_results = 0  # results that reached a resumed mapper for jobs finished during its outage
        self.last_tick: float | None = None  # the mapper's latest note that it is alive (wall time)
        self.holding = False  # a resumed mapper holds the run's clock until its pullers are back: no stall counts
        # The loop's stalls, STALL s and more without a note, in a run under way: (seconds into the run on its clock
        # when the loop was last heard, seconds without a note). At most one per STALL s of the run: bounded.
        self.stalls: list[tuple[float, float]] = []
        # Jobs sent back to the queue, by what ended the replica that was their last: its outcome (a few kinds;
        # "unknown" in a journal written before the requeue named its replica).
        self.requeue_causes: Counter[str] = Counter()

    # --- recording ------------------------------------------------------------

    def _record(self, kind: str, *args: Any) -> None:
        if self.store is not None:
            self.store.append(kind, args)
        self._APPLY[kind](self, *args)

    def apply(self, kind: str, args: tuple) -> bool:
        """Apply a stored event; False if it is not a journal event (a core input, say)."""
        f = self._APPLY.get(kind)
        if f is None:
            return False
        f(self, *args)
        return True

    def began(self, wall: float) -> None:
        """Model time 0 is ``wall``."""
        self._record("begin", wall)

    def job_arrived(self, job: Job, wall: float) -> None:
        self._record("arrive", job.id, job.job_class, job.submitted, job.size, job.bag, wall)

    def sent(self, replica: int, job: int, machine: int, t1_remote: float | None, t2: float | None,
             t3: float) -> None:
        self._record("sent", replica, job, machine, t1_remote, t2, t3)

    def started(self, replica: int, received: float, started: float) -> None:
        self._record("started", replica, received, started)

    def reported_done(self, replica: int, received: float, started: float, finished: float, wall: float,
                      achieved: float) -> None:
        self._record("done", replica, received, started, finished, wall, achieved)

    def machine_up(self, machine: int, wall: float) -> None:
        self._record("up", machine, wall)

    def machine_down(self, machine: int, wall: float) -> None:
        self._record("down", machine, wall)

    def machine_suspected(self, machine: int, wall: float) -> None:
        """A policy took ``machine`` down without a failure (a suspicion): its period ends, not as a failure's."""
        self._record("suspect", machine, wall)

    def machine_left(self, machine: int, wall: float) -> None:
        """``machine``'s puller said it leaves (its Bye): its period ends, not as a failure's."""
        self._record("leave", machine, wall)

    def machine_expelled(self, machine: int, wall: float, why: str) -> None:
        """The mapper took ``machine`` out of the run for good (``why``); its down follows."""
        self._record("expel", machine, wall, why)

    def end(self, outcome: str, replica: int) -> None:
        r = self.replicas.get(replica)
        if r is not None and r.outcome == "running":
            self._record("end", outcome, replica)

    def timed_out(self, job: int) -> None:
        self._record("timeout", job)

    def requeued(self, job: int, replica: int) -> None:
        """``job`` went back to its queue, ``replica`` (ended already) its last."""
        self._record("requeue", job, replica)

    def completed(self, job: int, replica: int, machine: int) -> None:
        self._record("complete", job, replica, machine)

    def registered(self, machine: int, incarnation: int, speed: float, key: str | None) -> None:
        self._record("register", machine, incarnation, speed, key)

    def clock_sample(self, machine: int, t1: float, t2: float, t3: float, t4: float) -> None:
        self._record("clock", machine, t1, t2, t3, t4)

    def generation_over(self, model_time: float) -> None:
        self._record("genend", model_time)

    def interrupted(self, drain_end: float) -> None:
        """The run was interrupted (Ctrl-C, SIGTERM): its drain ends at model time ``drain_end`` at the latest, sooner
        than its drain time-out would end it (a resumed run drains to there, not further)."""
        self._record("interrupt", drain_end)

    def tick(self, wall: float) -> None:
        """The mapper is alive at ``wall`` (bounds the outage a crash leaves)."""
        self._record("tick", wall)

    def resumed(self, resumed_at: float, t0: float) -> None:
        """A new mapper took over at ``resumed_at``; model time 0 is now ``t0`` (the outage is cut out)."""
        self._record("resume", self.last_wall if self.last_wall is not None else resumed_at, resumed_at, t0)

    # --- applying ---------------------------------------------------------------

    def _begin(self, wall: float) -> None:
        # The run's clock runs from here: a first begin is its start (silences count from it); a resumed one ends
        # the hold (its wall is model time 0, long before: silences count from the next note).
        self.last_tick = None if self.holding else wall
        self.holding = False
        self.start = wall
        if self.first_start is None:
            self.first_start = wall
        self._saw(wall)

    def _saw(self, wall: float | None) -> None:
        if wall is not None and (self.last_wall is None or wall > self.last_wall):
            self.last_wall = wall

    def _arrive(self, jid: int, cls: int, submitted: float, size: float, bag: int | None, wall: float) -> None:
        self.jobs[jid] = JobLog(Job(jid, cls, submitted, size, bag), wall)
        self._saw(wall)

    def _sent(self, replica: int, job: int, machine: int, t1_remote: float | None, t2: float | None,
              t3: float) -> None:
        r = self.replicas[replica] = ReplicaLog(replica, job, machine, t1_remote, t2, t3)
        self.jobs[job].replicas.append(replica)
        if t1_remote is not None:  # its request arrived after it left: offset >= t1_remote - t2
            low = t1_remote - t2 if t2 is not None else -math.inf
            r.t1 = self.machines[machine].clock.to_local(t1_remote, low=low)
        self._saw(t3)

    def _started(self, replica: int, received: float, started: float) -> None:
        self._started_at(self.replicas[replica], received, started)

    def _started_at(self, r: ReplicaLog, received: float, started: float) -> None:
        """The puller received the job at ``received`` and started it at ``started`` (its clock)."""
        if r.t4 is not None and (r.t4r_remote, r.t4_remote) == (received, started):
            return  # corrected when first reported (a result repeats them): kept as they were
        r.t4r_remote, r.t4_remote = received, started
        # The job, sent at t3, arrived after it left: offset <= t4r_remote - t3.
        clock = self.machines[r.machine].clock
        high = received - r.t3
        r.t4r, r.t4 = clock.to_local(received, high=high), clock.to_local(started, high=high)

    def _done(self, replica: int, received: float, started: float, finished: float, wall: float,
              achieved: float) -> None:
        r = self.replicas[replica]
        self._started_at(r, received, started)
        r.t5_remote, r.t6 = finished, wall
        # The result arrived after it left: offset >= t5_remote - t6; the job, after it was sent: offset <=
        # t4r_remote - t3. Both bound the offset at all of the replica's instants, each widened by the drift
        # possible in between (MAX_DRIFT): with each held by its own message only, an estimate that one bound
        # corrected and the other did not put a 10 ms job's end 30 ms before its start. (The start's instants keep
        # the estimate they were corrected with when reported; the result's bound only raises their offset.)
        clock = self.machines[r.machine].clock
        low, high = finished - wall, received - r.t3
        drift = MAX_DRIFT * max(0.0, finished - received)  # (from the Started bound's instant to the result's)
        if low - drift <= high:
            floor = low - drift
            if r.t4r is not None and received - r.t4r < floor:
                r.t4r = received - floor
            if r.t4 is not None and started - r.t4 < floor:
                r.t4 = started - floor
            r.t5 = clock.to_local(finished, low=low, high=high + drift)
            if r.t4 is not None:  # (an estimate that moved between the two reports: the puller's own duration holds)
                r.t5 = min(max(r.t5, r.t4 + (finished - started) * (1.0 - MAX_DRIFT)), wall)
        else:  # bounds that contradict (a clock that stepped in between): each instant held by its own message
            r.t5 = clock.to_local(finished, low=low)
        r.achieved_share = achieved
        self.machines[r.machine].achieved.append(achieved)
        if self.outages and r.t3 < self.outages[-1][0] <= wall:
            self.late_results += 1
        self._saw(wall)

    def _up(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if not periods or periods[-1][1] is not None:
            periods.append([wall, None])
        self._saw(wall)

    def _down(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if periods and periods[-1][1] is None:
            periods[-1][1] = wall
        self._saw(wall)

    def _suspect(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if periods and periods[-1][1] is None:
            self.machines[machine].suspected.add(wall)
        self._down(machine, wall)

    def _leave(self, machine: int, wall: float) -> None:
        periods = self.machines[machine].periods
        if periods and periods[-1][1] is None:
            self.machines[machine].left.add(wall)
        self._down(machine, wall)

    def _expel(self, machine: int, wall: float, why: str) -> None:
        self.machines[machine].expelled = (wall, why)
        self._saw(wall)

    def _end(self, outcome: str, replica: int) -> None:
        self.replicas[replica].outcome = outcome

    def _timeout(self, job: int) -> None:
        self.jobs[job].timed_out = True

    def _requeue(self, job: int, replica: int | None = None) -> None:
        self.jobs[job].requeues += 1
        r = self.replicas.get(replica) if replica is not None else None
        self.requeue_causes[r.outcome if r is not None else "unknown"] += 1

    def _complete(self, job: int, replica: int, machine: int) -> None:
        j = self.jobs[job]
        j.done_by = replica
        # The replica that completed the job is done, even if it had been given up as lost (a late result that
        # counts: the core took it, so the journal's outcome agrees).
        self.replicas[replica].outcome = "done"
        self.machines[machine].jobs_run += 1

    def _register(self, machine: int, incarnation: int, speed: float, key: str | None) -> None:
        m = self.machines[machine]
        if not m.incarnations or m.incarnations[-1] != incarnation:
            m.incarnations.append(incarnation)
            m.registrations += 1
            if len(m.incarnations) > INCARNATIONS_KEPT:
                del m.incarnations[0]
        else:
            m.reconnections += 1
        m.speed = speed
        m.key = key

    def _clock(self, machine: int, t1: float, t2: float, t3: float, t4: float) -> None:
        self.machines[machine].clock.add(t1, t2, t3, t4)
        self._saw(t4)

    def _genend(self, model_time: float) -> None:
        self.generation_end = model_time

    def _interrupt(self, drain_end: float) -> None:
        old = self.interrupt_drain_end
        self.interrupt_drain_end = drain_end if old is None else min(old, drain_end)

    def _tick(self, wall: float) -> None:
        last, start = self.last_tick, self.start
        if last is not None and start is not None and not self.holding and last >= start and wall - last >= STALL:
            self.stalls.append((last - start, wall - last))
        if last is None or wall > last:  # (a note the loop stamped before the begin's stamp keeps the begin)
            self.last_tick = wall
        self._saw(wall)

    def _resume(self, last: float, resumed_at: float, t0: float) -> None:
        self.outages.append((last, resumed_at))
        self.last_tick = None  # (an outage is not a stall: the next mapper's notes begin anew)
        self.holding = True  # (nor is the wait for its pullers: model time stands still, until the next begin)
        self.start = t0
        # Jobs in the air at the crash: their response times include the outage.
        for j in self.jobs.values():
            if j.done_by is None:
                j.across_outage = True
        for m in self.machines:  # the machines were out of our sight: close their periods at the crash
            if m.periods and m.periods[-1][1] is None:
                m.periods[-1][1] = last
        self._saw(resumed_at)

    _APPLY: dict[str, Callable[..., None]] = {
        "begin": _begin, "arrive": _arrive, "sent": _sent, "started": _started, "done": _done, "up": _up,
        "down": _down, "suspect": _suspect, "leave": _leave, "expel": _expel, "end": _end, "timeout": _timeout,
        "requeue": _requeue, "complete": _complete,
        "register": _register, "clock": _clock, "genend": _genend, "interrupt": _interrupt,
        "tick": _tick, "resume": _resume,
    }

    def correct(self) -> None:
        """Note each machine's clock offset and delay for machines.csv (call once the run is over).

        The replicas' instants are already on the mapper's clock: each was corrected as it was
        recorded (:meth:`_sent`, :meth:`_started_at`, :meth:`_done`). The replica's own messages
        arrived after they left: its request (t1 -> t2), the job (t3 -> t4r) and its result
        (t5 -> t6). An offset estimated from the heartbeats can be off by half a heartbeat's round
        trip, more than a job's one-way delay on a LAN; each instant is kept within the bound of
        the message that crossed at that time (not of the others: over a long job a drifting
        clock moves the offset more than that).
        """
        for m in self.machines:
            m.offset = m.clock.offset
            m.rtt = m.clock.rtt

    # --- statistics ----------------------------------------------------------

    def done_replicas(self) -> list[ReplicaLog]:
        return [self.replicas[j.done_by] for j in self.jobs.values() if j.done_by is not None]

    def delays(self) -> dict[str, dict[str, float | int | None]]:
        """Delays in seconds: communication (t4 - t3), scheduling (t3 - max(t2, submission)),
        request (t2 - t1) and report (t6 - t5), over the replicas that completed their jobs."""
        done = self.done_replicas()
        submitted = {j.done_by: j.submitted for j in self.jobs.values() if j.done_by is not None}
        return {
            "communication_delay_s": _stats([r.t4 - r.t3 for r in done if r.t4 is not None]),
            # from the moment both the job and the machine's request were there to the decision
            "scheduling_delay_s": _stats([r.t3 - max(r.t2, submitted[r.replica]) for r in done
                                          if r.t2 is not None]),
            "request_delay_s": _stats([r.t2 - r.t1 for r in done if r.t1 is not None and r.t2 is not None]),
            "report_delay_s": _stats([r.t6 - r.t5 for r in done if r.t5 is not None and r.t6 is not None]),
        }

    # --- export ----------------------------------------------------------------

    EXTRA = (
        "Response Time", "Replicas", "Requeues", "Size", "Puller Free (t1)", "Mapper Learnt Free (t2)",
        "Puller Received", "Puller Finished (t5)", "Communication Delay (s)", "Scheduling Delay (s)", "Counted",
        # losers that ran on after the job was done (a policy that lets them), their machine time (model units)
        "Discarded", "Wasted Time",
        "Bag",  # the Bag-of-Tasks id of a task (empty for a job of a class workload)
    )

    def write_jobs_csv(self, path: Path, time_unit: float, counted: set[int], status: dict[int, str],
                       utc_offset: float, waste: dict[int, tuple[int, float]] | None = None) -> None:
        """One row per job, its instants local times at the run's ``utc_offset`` (seconds); ``waste``: per job, its
        losers that ran on and their machine time (none: 0)."""
        waste = waste or {}

        def wall_iso(t: float | None) -> str:
            return local_iso(t, utc_offset)

        names = [m.name for m in self.experiment.machines]
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(JOB_COLUMNS + self.EXTRA)
            for jid in sorted(self.jobs):
                j = self.jobs[jid]
                r = self.replicas.get(j.done_by) if j.done_by is not None else (
                    self.replicas[j.replicas[-1]] if j.replicas else None)
                done = j.done_by is not None and r is not None and r.t6 is not None
                w.writerow([
                    jid, r.replica if r else "", j.job.job_class + 1, names[r.machine] if r else "",
                    wall_iso(j.submitted), wall_iso(r.t3 if r else None), wall_iso(r.t4 if r else None),
                    wall_iso(r.t6 if done else None), status.get(jid, "Queued"), "Yes" if j.timed_out else "No",
                    six_places((r.t6 - j.submitted) / time_unit) if done else "", len(j.replicas), j.requeues,
                    six_places(j.job.size), wall_iso(r.t1 if r else None), wall_iso(r.t2 if r else None),
                    wall_iso(r.t4r if r else None), wall_iso(r.t5 if r else None),
                    f"{r.t4 - r.t3:.6f}" if r and r.t4 is not None else "",
                    f"{r.t3 - max(r.t2, j.submitted):.6f}" if r and r.t2 is not None else "",
                    "Yes" if jid in counted else "No",
                    waste.get(jid, (0, 0.0))[0], f"{waste.get(jid, (0, 0.0))[1]:.6f}",
                    "" if j.job.bag is None else j.job.bag,
                ])


def _stats(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "median": None, "mean": None, "p99": None, "max": None}
    v = sorted(values)
    return {
        "n": len(v),
        "median": statistics.median(v),
        "mean": statistics.fmean(v),
        "p99": v[min(len(v) - 1, math.ceil(0.99 * len(v)) - 1)],
        "max": v[-1],
    }
