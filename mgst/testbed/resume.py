"""How a resumed mapper takes over from a dead one: the generator's place, the held clock, the pullers' return.

:func:`replay_to_resume` rebuilds the journal and the core from the run's store
(:func:`mgst.testbed.replay.replay`); a :class:`Resume` decides the rest: model
time stands still until the pullers are back (or the wait is over), then runs on
from where it stopped, with the outage cut out.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mgst.core.events import MachineDown, MachineReady
from mgst.core.state import MachineState
from mgst.model import Bag, Experiment, Job
from mgst.testbed.connection import Connection
from mgst.testbed.experiment_codec import difference, to_plain
from mgst.testbed.inputs import changed_inputs, experiment_inputs
from mgst.testbed.replay import Replayed, replay
from mgst.testbed.run_clock import RunClock
from mgst.testbed.run_lock import lock_run, note_holder
from mgst.workload import JobSource

log = logging.getLogger("mgst.testbed.mapper")


class RunOver(Exception):
    """The run to resume has finished: there is nothing to continue (its results were written at its end)."""

    def __init__(self, out: Path):
        self.out = out
        super().__init__(f"the run in {out} is already finished; its results are in {out}/ ('mgst export {out}' "
                         "writes them again from its journal)")


def run_is_over(meta: dict[str, Any]) -> bool:
    """A journal's settings say that its run reached its end (drained, timed out, or stopped): its mapper recorded
    the end (``ended``; a journal of before that key: the drop counts it wrote at the same moment)."""
    return "ended" in meta or "drops" in meta


def replay_to_resume(out: Path, experiment: Experiment, network: dict[str, Any] | None = None,
                     security: str | None = None) -> tuple[Replayed, float]:
    """The run in ``out`` replayed, and how long that took (s); RunOver if it has finished (nothing to resume:
    the mapper must not listen, nor write its results again). ValueError if it would not go on as it began:
    another experiment, an input file (a trace) that changed since, another emulated network than ``network`` (the
    one the resumed run's pullers are behind, None: none), or with CURVE where it ran without, or the other way
    (``security``: the resuming mapper's mode, mgst.wire.security.security_mode; None: not checked)."""
    replay_started = time.monotonic()
    lock = lock_run(out) if out.is_dir() else None  # RunBusy while its mapper still writes it
    try:
        replayed = replay(out)  # (a damaged journal is refused here, finished or not)
    except BaseException:
        if lock is not None:
            os.close(lock)
        raise
    if lock is not None:
        replayed.store.hold_lock(lock)
    replay_s = time.monotonic() - replay_started
    try:
        if run_is_over(replayed.meta):
            raise RunOver(out)
        if replayed.policy_failure is not None:  # (its mapper died before it could end the run; or the code changed)
            raise ValueError(f"cannot resume {out}: its journal replays up to where {replayed.policy_failure}: the "
                             "policy failed there before its mapper could end the run, or its code (or mgst's) "
                             "changed since the run began; a run cannot go on from there (the core stopped half-way "
                             f"through that input): 'mgst export {out}' writes what it did")
        if replayed.diverged is not None:  # (a mapper resumed on it would hold other replicas than its pullers run)
            raise ValueError(f"cannot resume {out}: its journal does not replay as the run went: {replayed.diverged}; "
                             "a run cannot go on from a core that is not the run's")
        differs = difference(to_plain(experiment), replayed.meta["experiment"])
        if differs is not None:
            raise ValueError(f"{out} was run with another experiment than the file gives now ({differs}): resume it "
                             "with the file as the run began")
        _check_same_setting(out, experiment, replayed.meta, network)
        _check_same_security(out, replayed.meta.get("security"), security)
    except BaseException:
        replayed.store.close()
        raise
    if lock is not None:
        note_holder(lock)
    return replayed, replay_s


def _check_same_setting(out: Path, experiment: Experiment, meta: dict[str, Any], network: dict[str, Any] | None
                        ) -> None:
    """ValueError naming what would make the resumed part differ from the part before: an input's bytes (a
    journal of before input digests is resumed with a warning), or the emulated network."""
    recorded = meta.get("inputs")
    if recorded is None:
        if experiment_inputs(experiment):
            log.warning("%s: its journal predates input digests: whether its trace changed since it began cannot be "
                        "checked", out)
    else:
        problems = changed_inputs(recorded)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ValueError(f"cannot resume {out}: {problems[0]}{more}; its part after the resume would not be the "
                             "same experiment. Put the file back as it was, or start a new run")
    was = meta.get("network")
    if _spec(was) != _spec(network):
        if was is None:
            raise ValueError(f"cannot resume {out} behind an emulated network ({_spec(network)}): it ran without one")
        raise ValueError(f"cannot resume {out} here: its pullers ran behind an emulated network ({_spec(was)}), "
                         f"which this resume would not make; resume it with 'mgst run FILE --resume {out}', which "
                         "makes the same network again")


def _check_same_security(out: Path, was: Any, now: str | None) -> None:
    """ValueError if a run that ran with CURVE keys would go on without them, or one that ran without, with them (its
    summary would say one thing of the whole run, its journal another; and its pullers speak what they started
    with)."""
    if now is None or not isinstance(was, str) or (was == "curve") == (now == "curve"):
        return
    if was == "curve":
        raise ValueError(f"cannot resume {out} without keys: it ran with CURVE keys, which its pullers hold; resume it "
                         "with --keys DIR (the folder its mapper had)")
    raise ValueError(f"cannot resume {out} with keys: it ran without them ({was}), and its pullers speak no CURVE; "
                     "resume it as it ran")


def _spec(network: dict[str, Any] | None) -> str | None:
    """The ``--network`` text of a network's settings (None: no network)."""
    return None if network is None else str(network.get("spec"))


class Resume:
    """The steps of a resumed run, on the state the mapper shares with it (the replayed journal and core,
    the pullers' connections, the run's clock); ``feed`` gives the core an input as the mapper does
    (journalled, its decisions carried out), ``push_timer`` sets a wall-clock timer for a core timer."""

    def __init__(self, replayed: Replayed, replay_s: float, clock: RunClock, conns: list[Connection], *,
                 feed: Callable[..., None], push_timer: Callable[[float, Any], None], duration: float,
                 drain_timeout: float):
        self.journal = replayed.journal
        self.core = replayed.core
        self.model_time = replayed.model_time  # the core's clock when the journal ends
        self.replay_s = replay_s
        self.clock = clock
        self.conns = conns
        self.machines = replayed.experiment.machines
        self.feed = feed
        self.push_timer = push_timer
        self.duration = duration
        self.drain_timeout = drain_timeout
        self.wait_started = 0.0  # when the resumed mapper began waiting for its pullers (wall)

    def prepare(self, workload: JobSource, now: float) -> Job | Bag | None:
        """Set up from the replayed journal: hold model time until the pullers are back; the next job."""
        j = self.journal
        mc = self.model_time
        if j.start is None:  # the old mapper died before its clock started: start afresh
            return None
        self.clock.hold(mc, now)  # t0 provisional; fixed when the wait ends
        self.wait_started = now
        outage = now - (j.last_wall if j.last_wall is not None else now)
        j.resumed(now, self.clock.t0)
        # The resume is listed from its start, its wait's figures unknown until the wait ends (end_wait): a mapper
        # killed while it waits for its pullers leaves its resume listed, as cut short.
        self._list_resume({"replay_s": self.replay_s, "reconnect_s": None, "pullers_back": None,
                           "pullers": len(self.conns)}, replace_last=False)
        # What the old mapper's pullers asked for is withdrawn: a job requeued while the clock stands still (a
        # returning puller no longer holds its replica) would go to a machine whose puller may not be back, and start
        # and end at one model instant. Each puller asks again once welcomed; its request is held until the clock
        # runs (mgst.testbed.messages, _ready).
        for jdx, m in enumerate(self.core.machines):
            if m.state is MachineState.READY:
                self.feed(now, MachineReady(jdx, None, 0))
        log.info("resuming at model time %.3f after an outage of %.1f s: %d jobs, %d running, %d queued",
                 mc, outage, len(j.jobs), len(self.core.running), self.core.queued_count)
        # the generator continues the same seeded sequence where it stopped
        nxt = None
        if j.generation_end is None:
            last = max(j.jobs, default=-1)
            nxt = next_item(workload)
            while nxt is not None and _last_id(nxt) <= last:
                nxt = next_item(workload)
        return nxt

    def end_wait(self, now: float, next_job: Any) -> tuple[Any, float, float]:
        """The pullers are back (or the wait is over): machines still missing are down; the clock runs again.
        The next job, the end of generation and the drain's deadline (wall)."""
        back = sum(1 for conn in self.conns if conn.identity is not None)
        timing = {"replay_s": self.replay_s, "reconnect_s": now - self.wait_started,
                  "pullers_back": back, "pullers": len(self.conns)}
        log.info("resumed: journal replayed in %.2f s, %d of %d pullers back after %.2f s", self.replay_s, back,
                 len(self.conns), timing["reconnect_s"])
        self._list_resume(timing, replace_last=True)  # (the wait is over, whatever happens next)
        for jdx, conn in enumerate(self.conns):
            if conn.identity is None and self.core.machines[jdx].state is not MachineState.DOWN:
                log.info("%s did not come back: down", self.machines[jdx].name)
                self.journal.machine_down(jdx, now)
                self.feed(now, MachineDown(jdx))
        t0 = self.clock.run_on(now)
        self.journal.began(t0)
        # timers the replayed core holds (the policy's, and the silence time-outs)
        time_unit = self.clock.time_unit
        for key, at in self.core.timers.items():
            self.push_timer(t0 + at * time_unit, key)
        j = self.journal
        if j.generation_end is not None:
            # What was left of the drain: model time stood still through the outage, so the run drains to the model
            # time its drain ends at (a new drain each time would let a run resumed in its drain outlast its failure
            # laws' span, mgst.testbed.wire_availability, and the jobs the simulation beside it drains): its drain
            # time-out after the end of generation, or sooner if the run was interrupted (the journal keeps when
            # the interrupt's short drain ends).
            generation_end = t0 + j.generation_end * time_unit
            drain_deadline = generation_end + self.drain_timeout
            if j.interrupt_drain_end is not None:
                drain_deadline = min(drain_deadline, t0 + j.interrupt_drain_end * time_unit)
            drain_deadline = max(now, drain_deadline)
            log.info("resumed in the drain: %.1f s of it left", drain_deadline - now)
            return None, generation_end, drain_deadline
        return next_job, t0 + self.duration, math.inf

    def _list_resume(self, timing: dict[str, Any], *, replace_last: bool) -> None:
        """Add this resume's entry to the run's ``resumes`` (or, with ``replace_last``, complete the entry
        :meth:`prepare` added)."""
        store = self.journal.store
        if store is None:
            return
        resumes = list(store.meta().get("resumes", []))
        if replace_last and resumes:
            resumes[-1] = timing
        else:
            resumes.append(timing)
        store.set_meta(resumes=resumes)


def next_item(workload: JobSource) -> Job | Bag | None:
    """The workload's next job or bag; None when it has no more."""
    try:
        return workload.next()
    except StopIteration:
        return None


def _last_id(item: Job | Bag) -> int:
    """The id of the last job in ``item`` (a job, or a bag's last task; -1 for an empty bag)."""
    if type(item) is Bag:
        return item.tasks[-1].id if item.tasks else -1
    return item.id  # type: ignore[union-attr]
