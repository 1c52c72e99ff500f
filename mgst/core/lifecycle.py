"""The transitions of jobs, replicas and machines (the rows of mgst.core.transitions), carried out on the records.

Each method below makes the transitions its docstring names; the table says which exist and what
they do. In check mode every transition is looked up in the table where it is made. The Scheduler
holds one Lifecycle; policies never call it.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from mgst.core.decisions import (
    Assign,
    BagCompleted,
    Cancel,
    InputError,
    JobCompleted,
    JobRequeued,
    MachineSuspected,
    Output,
    ReplicaDiscarded,
    ReplicaTimedOut,
    shown,
)
from mgst.core.hooks import PolicyError
from mgst.core.progress import Progress, machine_rate
from mgst.core.ready import ReadyQueue
from mgst.core.state import (
    CHECKPOINT_TIE,
    COMPUTING,
    STAGING,
    WAITING,
    BagRecord,
    JobRecord,
    JobStatus,
    MachineRecord,
    MachineState,
    Outcome,
    ReplicaRecord,
)
from mgst.core.transitions import END_EVENT, JOB, MACHINE, NEW, REPLICA, Checker
from mgst.core.tuples import new_tuple
from mgst.core.view import View

# Outputs are made with tuple.__new__ (new_tuple: in C where built): a NamedTuple's own __new__ is a
# Python function, the costliest step of an assignment or a completion once the core is compiled
# (the result is the same).
# Final: a C static when compiled, where a plain global is a dict lookup at every use (docs/build.md).
_new_tuple: Final = new_tuple
_ASSIGN: Final = Assign
_JOB_COMPLETED: Final = JobCompleted
_CANCEL: Final = Cancel
_FULL_PACE: Final = 1.0  # a replica on a CPU of its own
_NO_PACE: Final = 0.0  # one waiting on its host for a CPU

log = logging.getLogger(__name__)


class Lifecycle:
    """The core's state transitions, on the records of one :class:`View`."""

    def __init__(
        self, view: View, *, max_replicas: int, resume: bool, stage_start: bool, stage_resume: bool,
        check: bool = False, cancel_losers: bool = True,
    ):
        self.view = view
        # The view's containers, read on every transition (the same objects).
        self.machines = view.machines
        self.queues = view.queues
        self.running = view.running
        self.live = view.live
        self.given_up = view.given_up
        self.ready: ReadyQueue = view.ready_queue
        self.max_replicas = max_replicas
        self.resume = resume  # a new replica starts from its job's best checkpoint
        self.stage_start = stage_start  # every replica stages first
        self.stage_resume = stage_resume  # a replica resuming from a checkpoint stages first
        self.cancel_losers = cancel_losers  # a job's other replicas are cancelled when one completes it (else run on)
        # Report JobCompleted when a job is done; a driver with no use for it (the simulator) turns it off.
        self.report_completions = True
        self.out: list[Output] = []  # the outputs of the event being handled
        # Rates and the ends they move (Eta decisions into the same outputs: Scheduler._begin sets both lists).
        self.progress = Progress()
        # Replicas ended and started during the event, for the policy's hooks (None: it declares none).
        self.ended: list[ReplicaRecord] | None = None
        self.started: list[ReplicaRecord] | None = None
        self.requeued = False  # a job went back to a queue during this event
        self.next_replica = 1
        self.no_progress: Any = 0.0  # a progress of 0 (most replicas) as one float object (see start)
        # Check mode: every transition looked up in the table where it is made (None: not checked).
        self.checker: Checker | None = Checker(view.machines) if check else None

    def stale(self, what: str) -> None:
        """An event that refers to something already over (or unknown): counted, and nothing changes."""
        self.view.stale_events += 1
        log.debug("stale event at t=%s: %s", self.view.now, what)

    # ------------------------------------------------------------------ jobs and replicas

    def start(self, chosen: Any, m: MachineRecord) -> None:
        """Start a replica of ``chosen`` (a JobRecord: what the policy chose, checked here) in one of the slots ``m``
        asks to fill.

        job QUEUED|RUNNING --start--> RUNNING; replica NEW --start|start_staging-->; machine READY --fill|fill_last-->.
        """
        j = m.index
        if not m.asking:
            raise PolicyError(f"assign to machine {m.name}, which is not asking for work")
        if not isinstance(chosen, JobRecord):  # (typed Any, so that this check, not a compiled cast, meets it)
            raise PolicyError(f"choose() returned {type(chosen).__name__} {shown(chosen)}, not a job's record (a "
                              "JobRecord of the view, such as a queue's head) or None")
        rec: JobRecord = chosen
        c = rec.job.job_class
        rate = m.rates[c]
        if rate <= 0.0:
            raise PolicyError(f"assign of a class-{c + 1} job to {m.name}, which cannot run it")
        view = self.view
        now = view.now
        status = rec.status
        if status is JobStatus.QUEUED:
            self.queues[rec.queue_key].remove(rec)
            view.queued_count -= 1
            rec.status = JobStatus.RUNNING
            rec.idle_time += now - rec.queued_since
            self.running[rec.id_key] = rec
            bag = rec.bag
            if bag is not None:
                bag.queued -= 1
                bag.running[rec.id_key] = rec
                if bag.first_dispatch is None:
                    bag.first_dispatch = now
        elif status is JobStatus.RUNNING:
            if len(rec.replicas) >= self.max_replicas:
                raise PolicyError(
                    f"job {rec.job.id} has {len(rec.replicas)} replicas; the limit is {self.max_replicas}"
                )
            for other in rec.replicas.values():
                if other.machine == j:
                    raise PolicyError(f"assign of job {rec.job.id} to {m.name}, which already runs a replica of it")
        else:
            raise PolicyError(f"assign of job {rec.job.id}, which is done")
        asking = m.asking - 1
        m.asking = asking
        if not asking:
            self.ready.remove(j)
            m.state = MachineState.BUSY
        rid = self.next_replica
        self.next_replica = rid + 1
        rec.attempts += 1
        progress = rec.best_progress if self.resume else 0.0
        staging = self.stage_start or (progress > 0.0 and self.stage_resume)
        waiting = False
        if not staging:  # it takes one of the machine's cpus, or waits on the host for one
            if m.computing < m.cpus:
                m.computing += 1
            else:
                waiting = True
        r = ReplicaRecord(rid, rec, j, rec.attempts, now, progress, machine_rate(rate, m.cpu_share, True), staging,
                          waiting)
        if waiting:
            m.waiting.append(r)
        key = r.id_key
        rec.replicas[key] = r
        rec.history.append(r)
        m.stats.started(now)
        self.live[key] = r
        m.replicas[key] = r
        if rec.first_sent is None:
            rec.first_sent = now
        progress_object: Any = self.no_progress  # a progress of 0 (most replicas) as one float object:
        if progress:  # compiled, a float argument is a new object each time
            progress_object = progress
        pace = _NO_PACE if waiting else _FULL_PACE
        self.out.append(_new_tuple(_ASSIGN, rec.job, j, key, progress_object, staging, r.finish_time(), pace))
        if self.started is not None:
            self.started.append(r)
        if self.checker is not None:
            self.checker.moved(JOB, rec, status, "start", rec.status)
            event = "start_staging" if staging else "start_waiting" if waiting else "start"
            self.checker.moved(REPLICA, r, NEW, event, r.phase)
            self.checker.moved(MACHINE, m, MachineState.READY, "fill" if asking else "fill_last", m.state)

    def computing(self, r: ReplicaRecord) -> None:
        """Staging is over: replica STAGING --computing--> COMPUTING on a free CPU (its end reported), or
        --computing_no_cpu--> WAITING on the host (reported too: pace 0); COMPUTING|WAITING --computing--> the same."""
        phase = r.phase
        event = "computing"
        if phase == STAGING:
            m = self.machines[r.machine]
            if m.computing < m.cpus:
                m.computing += 1
                self._compute(r, m)
            else:
                r.phase = WAITING
                r.wait_from = self.view.now
                m.waiting.append(r)
                self.progress.moved(r.id_key, r, _NO_PACE)
                event = "computing_no_cpu"
        if self.checker is not None:
            self.checker.moved(REPLICA, r, phase, event, r.phase)

    def _compute(self, r: ReplicaRecord, m: MachineRecord) -> None:
        """``r`` holds one of ``m``'s cpus from now: it computes at the machine rule's rate; its end is reported."""
        now = self.view.now
        r.phase = COMPUTING
        r.computing_since = now
        r.set_rate(now, machine_rate(m.rates[r.job.job.job_class], m.cpu_share, True))
        self.progress.moved(r.id_key, r, _FULL_PACE)

    def _cpu_freed(self, m: MachineRecord) -> None:
        """One of ``m``'s cpus is free: the replica that has waited longest on the host takes it
        (replica WAITING --cpu_free--> COMPUTING)."""
        now = self.view.now
        while m.waiting and m.computing < m.cpus:
            r = m.waiting.pop(0)
            m.computing += 1
            r.waited += now - r.wait_from  # type: ignore[operator]  # (set while it waits)
            r.wait_from = None
            self._compute(r, m)
            if self.checker is not None:
                self.checker.moved(REPLICA, r, WAITING, "cpu_free", r.phase)

    def checkpoint(self, r: ReplicaRecord, progress: float) -> None:
        """replica STAGING|COMPUTING --checkpoint--> the same: its checkpoint and the job's best noted."""
        if progress > r.checkpoint:
            r.checkpoint = progress
            job = r.job
            best = job.best_progress
            if progress > best:
                job.best_progress = progress  # a tie's larger value too: where a new replica resumes
                # Useful (Anglano & Canonico's RWT): better than the stored one (equal is not), and stored for a
                # new replica to resume from; without resuming (resume off), no checkpoint makes a replica useful.
                if self.resume and progress - best > CHECKPOINT_TIE:
                    r.best = True
        if self.checker is not None:
            self.checker.moved(REPLICA, r, r.phase, "checkpoint", r.phase)

    def _release(self, r: ReplicaRecord, outcome: Outcome) -> MachineRecord:
        """End a live replica: detach it from its job and its machine's slot.

        replica live --result|cancel|lose|fail|time_out--> its outcome; machine --release|release_last-->.
        """
        now = self.view.now
        phase = r.phase
        r.live = False
        r.outcome = outcome
        r.ended = now  # work stops counting here (ReplicaRecord.remaining)
        key = r.id_key
        del r.job.replicas[key]
        del self.live[key]
        m = self.machines[r.machine]
        del m.replicas[key]
        if phase == COMPUTING:
            m.computing -= 1
            if m.waiting:
                self._cpu_freed(m)
        elif phase == WAITING:
            m.waiting.remove(r)
            r.waited += now - r.wait_from  # type: ignore[operator]  # (set while it waits)
            r.wait_from = None
        state = m.state
        if state is MachineState.BUSY and not m.replicas:
            m.state = MachineState.FREE
        held = r.charged_time  # (its time waiting on the host for a CPU is not charged)
        m.stats.busy_time += held
        if r.discarded:  # a loser that ran on: whatever its end, its machine time is waste
            m.stats.discarded += 1
            m.stats.discarded_time += held
        if self.ended is not None:
            self.ended.append(r)
        if self.checker is not None:
            self.checker.moved(REPLICA, r, phase, END_EVENT[outcome], outcome)
            self.checker.moved(MACHINE, m, state, "release" if m.replicas else "release_last", m.state)
        return m

    def complete(self, r: ReplicaRecord, computed: float | None = None) -> None:
        """A replica's result: job RUNNING|QUEUED --result--> DONE; replica live or given up --result--> DONE.

        ``computed``: how long it computed, as the driver measured it (None: the core's own figure)."""
        job = r.job
        now = self.view.now
        status = job.status
        if computed is not None:
            r.computed = computed
        else:
            since = r.computing_since
            r.computed = now - since if since is not None else None
        if r.live:
            st = self._release(r, Outcome.DONE).stats
        else:  # a replica we had given up on delivered after all: take its result
            if self.checker is not None:
                self.checker.moved(REPLICA, r, r.outcome, "result", Outcome.DONE)  # type: ignore[arg-type]
            r.outcome = Outcome.DONE
            r.late = True
            r.ended = now
            st = self.machines[r.machine].stats
            if status is JobStatus.QUEUED:
                self.queues[job.queue_key].remove(job)
                self.view.queued_count -= 1
                job.idle_time += now - job.queued_since
            if self.ended is not None:
                self.ended.append(r)
        c = job.job.job_class
        # x[c] = x[c] + ..., not x[c] += ...: compiled, += on a list item is the generic number protocol
        completed = st.completed_by_class
        completed[c] = completed[c] + 1
        service = st.service_by_class
        service[c] = service[c] + (now - r.sent)
        st.completed += 1
        st.note_outcome(True)
        job.status = JobStatus.DONE
        job.completed = now
        job.done_by = r.id_key
        job.done_on = r.machine
        job.done_sent = r.sent
        if self.checker is not None:
            self.checker.moved(JOB, job, status, "result", job.status)
        if status is JobStatus.RUNNING:  # (a late result may find its job queued)
            del self.running[job.id_key]
        if job.replicas:
            if self.cancel_losers:
                for sibling in list(job.replicas.values()):
                    self.cancel(sibling)
            else:  # they run on: their results will be discarded
                for sibling in job.replicas.values():
                    sibling.discarded = True
        if self.report_completions:
            self.out.append(_new_tuple(_JOB_COMPLETED, job.job, r.id_key, r.machine))
        bag = job.bag
        if bag is not None:
            if status is JobStatus.RUNNING:
                del bag.running[job.id_key]
            else:
                bag.queued -= 1
            bag.done += 1
            if bag.done == bag.size:
                self.bag_done(bag)

    def discard(self, r: ReplicaRecord) -> None:
        """A loser that ran on delivered after its job was done: replica live --discard--> DISCARDED, and job DONE
        --loser_ended--> DONE. Its result is recorded, not used; the host did its work (a success for its history)."""
        job = r.job
        st = self._release(r, Outcome.DISCARDED).stats
        st.note_outcome(True)
        st.discarded_results += 1
        self.out.append(ReplicaDiscarded(r.id, r.machine, job.job.id))
        if self.checker is not None:
            self.checker.moved(JOB, job, JobStatus.DONE, "loser_ended", job.status)

    def bag_done(self, bag: BagRecord) -> None:
        view = self.view
        bag.completed = view.now
        view.bags.pop(bag.id, None)
        q = self.queues.get(bag.key)
        if q is bag.queue:
            del self.queues[bag.key]
            view.queues_version += 1
        self.out.append(BagCompleted(bag.id))

    def cancel(self, r: ReplicaRecord) -> None:
        """replica live --cancel--> CANCELLED (a sibling won, or the policy's Cancel)."""
        job = r.job
        m = self._release(r, Outcome.CANCELLED)
        m.stats.cancelled += 1
        self.out.append(_new_tuple(_CANCEL, r.id_key, m.index, job.id_key))
        if job.status is JobStatus.RUNNING:
            self.given_up[r.id_key] = r
            self._ended_without_result(job, r, "cancelled")
        elif self.checker is not None and job.status is JobStatus.DONE and r.discarded:
            self.checker.moved(JOB, job, JobStatus.DONE, "loser_ended", job.status)

    def lose(self, r: ReplicaRecord, reason: str, outcome: Outcome = Outcome.LOST) -> None:
        """A live replica ended without a result (--lose|fail|time_out-->); its result still counts once if it comes."""
        st = self._release(r, outcome).stats
        st.lost += 1
        if outcome is Outcome.FAILED:
            st.failed += 1
        elif outcome is Outcome.TIMED_OUT:
            st.timed_out += 1
        st.note_outcome(False)
        job = r.job
        if job.status is JobStatus.DONE:  # a loser that ran on: its job is done, nothing to requeue or wait for
            if self.checker is not None:
                self.checker.moved(JOB, job, JobStatus.DONE, "loser_ended", job.status)
            return
        self.given_up[r.id_key] = r
        self._ended_without_result(job, r, reason)

    def time_out(self, r: ReplicaRecord, notice: bool = True) -> None:
        """Give up on a live replica (T/O); ``notice`` tells the driver, which did not decide it."""
        r.job.timeouts += 1
        if notice:
            self.out.append(ReplicaTimedOut(r.id, r.machine, r.job.job.id))
        self.lose(r, "timeout", Outcome.TIMED_OUT)

    def _ended_without_result(self, job: JobRecord, r: ReplicaRecord, reason: str) -> None:
        """job RUNNING --replica_ended--> RUNNING, or --last_replica_ended--> QUEUED (requeued)."""
        if job.replicas:
            if self.checker is not None:
                self.checker.moved(JOB, job, job.status, "replica_ended", job.status)
            return
        view = self.view
        self.requeued = True
        job.status = JobStatus.QUEUED
        job.requeues += 1
        job.queued_since = view.now
        self.running.pop(job.id_key, None)
        self.queues[job.queue_key].requeue(job)
        view.queued_count += 1
        bag = job.bag
        if bag is not None:
            del bag.running[job.id_key]
            bag.queued += 1
        self.out.append(JobRequeued(job.job, r.id, r.machine, reason))
        if self.checker is not None:
            self.checker.moved(JOB, job, JobStatus.RUNNING, "last_replica_ended", job.status)

    # ------------------------------------------------------------------ machines

    def bring_up(self, m: MachineRecord, share: float | None) -> bool:
        """Note the machine's CPU share; machine DOWN --up--> FREE (then True), an up one stays as it is."""
        self.set_share(m, share)
        state = m.state
        if state is MachineState.DOWN:
            m.state = MachineState.FREE
            m.suspected = False
            m.reclaimed = False  # a machine that comes back is UP, unless it says otherwise
            m.up_since = self.view.now
            m.history.up(self.view.now, m.cpu_share)
            self.view.capacity_version += 1
            if self.checker is not None:
                self.checker.moved(MACHINE, m, state, "up", m.state)
            return True
        if self.checker is not None:
            self.checker.moved(MACHINE, m, state, "up", state)
        return False

    def take_down(self, m: MachineRecord, suspected: bool = False) -> None:
        """machine FREE|READY|BUSY --down|suspect--> DOWN: every live replica lost (those waiting on the host
        first, so that none takes a CPU the machine no longer has)."""
        for r in list(m.waiting):
            self.lose(r, "machine down")
        for r in list(m.replicas.values()):
            self.lose(r, "machine down")
        self.ready.discard(m.index)
        state = m.state
        m.asking = 0
        m.state = MachineState.DOWN
        m.suspected = suspected
        m.silent = False
        if suspected:
            m.stats.suspicions += 1
        else:
            m.stats.failures += 1
        view = self.view
        m.history.down(view.now)
        if m.up_since is not None:
            m.stats.up_time += view.now - m.up_since
            m.up_since = None
        view.capacity_version += 1
        if suspected:
            self.out.append(MachineSuspected(m.index))
        if self.checker is not None:
            self.checker.moved(MACHINE, m, state, "suspect" if suspected else "down", m.state)

    def make_ready(self, m: MachineRecord, slots: int | None = None) -> None:
        """The machine asks for work for ``slots`` slots (None: all it has free).

        machine --ask--> READY, --ask_none--> as it was, or READY --withdraw_idle|withdraw_busy--> FREE|BUSY.
        """
        state = m.state
        free = m.slots - len(m.replicas)
        want = free if slots is None or slots > free else slots
        if m.reclaimed or m.cpu_share <= 0.0:  # no CPU to give: it asks for none (docs/models.md)
            want = 0
        if want > 0:
            m.asking = want
            if state is not MachineState.READY:
                m.state = MachineState.READY
                self.ready.add(m.index)
            event = "ask"
        elif state is MachineState.READY:
            m.asking = 0
            self.ready.remove(m.index)
            m.state = MachineState.BUSY if m.replicas else MachineState.FREE
            event = "withdraw_busy" if m.replicas else "withdraw_idle"
        else:
            event = "ask_none"
        if self.checker is not None:
            self.checker.moved(MACHINE, m, state, event, m.state)

    def set_availability(self, m: MachineRecord, reclaimed: bool, share: float) -> None:
        """The machine is UP or RECLAIMED at ``share``: its replicas re-marked (set_share); one that has no CPU to
        give (reclaimed, or share 0) withdraws its request (READY --withdraw_idle|withdraw_busy-->); then
        machine --reclaim|give_back--> the same state, when that changed."""
        if reclaimed != m.reclaimed:  # (the history's state follows from both: the flag first, then the share)
            m.history.set_reclaimed(self.view.now, reclaimed)
        self.set_share(m, share)
        if m.state is MachineState.READY and (reclaimed or m.cpu_share <= 0.0):
            self.make_ready(m, 0)
        if reclaimed != m.reclaimed:
            m.reclaimed = reclaimed
            self.view.capacity_version += 1
            if self.checker is not None:
                self.checker.moved(MACHINE, m, m.state, "reclaim" if reclaimed else "give_back", m.state)

    def ask_one(self, m: MachineRecord) -> None:
        """A free one-slot machine asks for its slot (make_ready's common case, inlined): FREE --ask--> READY."""
        m.asking = 1
        m.state = MachineState.READY
        self.ready.add(m.index)
        if self.checker is not None:
            self.checker.moved(MACHINE, m, MachineState.FREE, "ask", m.state)

    def set_share(self, m: MachineRecord, share: float | None) -> None:
        """machine --share--> the same, and each live replica on it: a computing one re-marked at the new rate."""
        if share is not None and share != m.cpu_share:
            if not 0.0 <= share <= 1.0:
                raise InputError(f"CPU share {share} of machine {m.name} outside [0, 1]")
            m.cpu_share = share
            now = self.view.now
            m.history.set_share(now, share)
            progress = self.progress
            for r in m.replicas.values():
                if r.phase == COMPUTING:  # (staging and waiting ones do no work at any share)
                    r.set_rate(now, machine_rate(m.rates[r.job.job.job_class], share, True))
                    progress.moved(r.id_key, r, _FULL_PACE)
                if self.checker is not None:
                    self.checker.moved(REPLICA, r, r.phase, "share", r.phase)
            self.view.capacity_version += 1
            if self.checker is not None:
                self.checker.moved(MACHINE, m, m.state, "share", m.state)
