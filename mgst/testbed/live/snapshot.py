"""The live view's snapshot: what the page shows, built in the mapper's loop and published as JSON bytes.

:class:`LivePublisher` is called from the mapper's loop (as its progress callback, about once a second).
It reads the mapper's objects there, in the mapper's thread, builds a plain dict, serialises it, and
puts the bytes on a board (:mod:`.board`): the HTTP server only ever reads the board, never a mapper
object. The cost per call is bounded: jobs are followed incrementally
(only the new ones and those not yet done are looked at), and the lists shown are capped.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from mgst.bot_metrics import arrivals_end, reduce_bags, summarize_bags
from mgst.core.state import MachineState
from mgst.intervals import batch_means_ci
from mgst.testbed.journal import JobLog
from mgst.testbed.live.board import SNAPSHOT_VERSION, Board, FolderBoard
from mgst.testbed.messages import REFUSE_LIMIT
from mgst.testbed.summary import BATCHES

log = logging.getLogger(__name__)

# Machines listed one by one (a run of thousands shows the first ones, and the counts of all): the
# snapshot stays under about 200 kB, and building it under a few ms, however large the run.
MAX_MACHINES_SHOWN = 500
# Job ids listed per machine (a machine has as many slots as it has, usually one).
MAX_JOBS_PER_MACHINE = 8
# Queues listed (the longest), e.g. one per bag in a Bag-of-Tasks run.
MAX_QUEUES_SHOWN = 40
# Events kept for the timeline (failures, suspicions, refusals): the latest ones.
MAX_EVENTS = 300
# Points kept for the plots: at one a second, the last 30 minutes.
MAX_POINTS = 1800
# The intervals (batch means over every job so far) are recomputed at most this often (s): their cost
# grows with the jobs done, and they do not move much in a few seconds.
INTERVAL_EVERY = 5.0


def _num(x: float | None, digits: int = 6) -> float | None:
    """JSON has no NaN: undefined values become null."""
    return None if x is None or not math.isfinite(x) else round(x, digits)


def _estimate(values: list[float]) -> dict[str, Any]:
    mean, low, high = batch_means_ci(values, BATCHES) if values else (math.nan, math.nan, math.nan)
    return {"jobs": len(values), "mean_response": _num(mean), "ci95": [_num(low), _num(high)]}


def machine_state(core_machine: Any, refusals: int, registered: bool, ever_up: bool) -> str:
    """One word for the page: expelled, silent, suspected, down, waiting (never registered) or up."""
    if refusals >= REFUSE_LIMIT:
        return "expelled"  # its allow-list refused the run's commands REFUSE_LIMIT times (mgst.testbed.messages)
    if core_machine.silent:
        return "silent"  # not heard for the liveness window; its jobs time out (detection by time-out)
    if core_machine.state is MachineState.DOWN:
        if core_machine.suspected:
            return "suspected"  # the policy suspects it down
        return "down" if registered or ever_up else "waiting"
    return "up"


class LivePublisher:
    """Builds the snapshot from a mapper and puts it on a board (call it from the mapper's loop).

    ``simulation`` is polled for the simulation's figures (None until they come); ``every`` (s) bounds
    how often a snapshot is built, whatever the caller's rate.
    """

    def __init__(self, board: Board | FolderBoard, *, every: float = 1.0,
                 simulation: Callable[[], dict[str, Any] | None] | None = None):
        self.board = board
        self.every = every
        self.simulation = simulation
        self.next_at = 0.0
        self.phase_over = False
        self._seen_jobs = 0  # journal.jobs are followed incrementally: the first _seen_jobs were looked at
        self._pending: dict[int, JobLog] = {}  # jobs not yet done
        self._responses: list[list[tuple[float, int, float]]] = []  # per class: (submitted, id, response) sorted
        self._done = 0
        self._intervals: dict[str, Any] | None = None
        self._intervals_at = -math.inf
        self._intervals_n = -1
        self._achieved: list[tuple[int, float]] = []  # per machine: (results counted, their share sum)
        self._last_state: list[str] = []
        self._last_refusals: list[int] = []
        self._periods_seen: list[tuple[int, int]] = []
        self._events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self._series: deque[str] = deque(maxlen=MAX_POINTS)  # each point as JSON text, serialised once
        # The first interval imports the t distribution (scipy, half a second): done now, before the run,
        # not in the mapper's loop (it stalled dispatching 0.5 s).
        batch_means_ci([0.0, 1.0], 2)

    def __call__(self, mapper: Any) -> None:
        now = time.time()
        if now < self.next_at:
            return
        self.next_at = now + self.every
        try:
            self.publish(mapper, now)
        except Exception:  # the view must never stop the run
            log.exception("the live view's snapshot failed; the run goes on")

    def finish(self, mapper: Any) -> None:
        """The run is over: a last snapshot, saying so."""
        self.phase_over = True
        self._intervals_at = -math.inf
        self.publish(mapper, time.time())

    # ------------------------------------------------------------------ building

    def publish(self, mapper: Any, now: float) -> None:
        """Build and put the snapshot; the plots' series (up to MAX_POINTS points) is spliced in as the text
        its points were serialised to once, not serialised again every second."""
        text = json.dumps(self.build(mapper, now), separators=(",", ":"))
        series = ('"series":{"columns":["elapsed_s","done","queued","running","up","mean_response"],"rows":['
                  + ",".join(self._series) + "]}")
        self.board.put(f"{text[:-1]},{series}}}".encode())

    def build(self, mapper: Any, now: float) -> dict[str, Any]:
        exp, core, journal = mapper.experiment, mapper.core, mapper.journal
        tu = mapper.time_unit
        t0 = mapper.t0
        if self.phase_over:
            phase = "over"
        elif t0 is None:
            phase = "waiting for pullers"
        elif mapper.resuming():
            phase = "resuming"
        elif mapper.draining(now):
            phase = "draining"
        else:
            phase = "generating"
        horizon = mapper.duration / tu
        warmup = min(exp.simulation.warmup, 0.1 * horizon)  # as the run's summary counts (run_result.finish_run)
        self._follow_jobs(journal, tu, warmup, horizon, len(exp.classes))
        machines, counts = self._machines(mapper, now)
        running = len(core.running)
        queued = core.queued_count
        elapsed = mapper.elapsed(now)  # (still while a resumed mapper waits: the plots' time never goes back)
        intervals = self._results(mapper, exp, now, warmup, horizon)
        up = counts.get("up", 0)
        overall = intervals.get("overall") or {}
        self._series.append(json.dumps([round(elapsed, 2), self._done, queued, running, up,
                                        overall.get("mean_response")]))
        return {
            "version": SNAPSHOT_VERSION,
            "at": now,
            "experiment": exp.name,
            "policy": exp.policy.name,
            "phase": phase,
            "elapsed_s": _num(elapsed, 3),
            "duration_s": mapper.duration,
            "time_unit_s": tu,
            "warmup": warmup,
            "registered": mapper.registered(),
            "jobs": {"generated": len(journal.jobs), "done": self._done, "running": running, "queued": queued,
                     # losers that ran on after their job was done (a policy that lets them), and their machine
                     # time in model units: the waste
                     "discarded": sum(m.stats.discarded for m in core.machines),
                     "wasted_time": _num(sum(m.stats.discarded_time for m in core.machines))},
            "machine_count": len(exp.machines),
            "machine_states": counts,
            "machines": machines,
            "queues": self._queues(core, exp),
            "results": intervals,
            "simulation": self.simulation() if self.simulation is not None else None,
            "events": sorted(self._events, key=lambda e: e["at"] or 0.0),
        }

    def _follow_jobs(self, journal: Any, tu: float, warmup: float, horizon: float, classes: int) -> None:
        """Take in the jobs that arrived since the last call, and the responses of those done since."""
        jobs = journal.jobs
        if len(jobs) > self._seen_jobs:
            for jl in itertools.islice(jobs.values(), self._seen_jobs, None):
                self._pending[jl.job.id] = jl
            self._seen_jobs = len(jobs)
        if not self._responses:
            self._responses = [[] for _ in range(classes)]
        replicas = journal.replicas
        finished = []
        for jid, jl in self._pending.items():
            if jl.done_by is None:
                continue
            r = replicas.get(jl.done_by)
            if r is None or r.t6 is None:
                continue
            finished.append(jid)
            self._done += 1
            # counted as the summary counts: submitted in [warm-up, horizon), not caught in an outage
            if warmup <= jl.job.submitted < horizon and not jl.across_outage:
                bisect.insort(self._responses[jl.job.job_class], (jl.job.submitted, jid, (r.t6 - jl.submitted) / tu))
        for jid in finished:
            del self._pending[jid]

    def _results(self, mapper: Any, exp: Any, now: float, warmup: float, horizon: float) -> dict[str, Any]:
        """Response times per class (or AVT, makespan, RWT for bags) so far, with their intervals."""
        n = sum(len(r) for r in self._responses)
        core = mapper.core
        bags = bool(core.all_bags)
        if self._intervals is not None and (now - self._intervals_at < INTERVAL_EVERY
                                            or (n == self._intervals_n and not bags)):
            return self._intervals
        self._intervals_at, self._intervals_n = now, n
        per_class = [[v for _, _, v in rows] for rows in self._responses]
        merged = sorted(itertools.chain.from_iterable(self._responses))
        out: dict[str, Any] = {
            "classes": [{"name": c.name, **_estimate(v)} for c, v in zip(exp.classes, per_class)],
            "overall": _estimate([v for _, _, v in merged]),
            "ci_method": f"batch means over {BATCHES} batches, as the run's summary",
        }
        if bags:
            model_now = core.now
            arrived = list(core.all_bags.values())
            reduced = reduce_bags(SimpleNamespace(bags=arrived, replication=0), warmup,
                                  min(horizon, max(model_now, warmup + 1e-9)),
                                  ran_out=arrivals_end(exp.workload, arrived))
            out["bags"] = summarize_bags([reduced]).as_dict()
            out["bags"]["done"] = sum(1 for b in core.all_bags.values() if b.completed is not None)
            out["bags"]["arrived"] = len(core.all_bags)
        self._intervals = out
        return out

    def _machines(self, mapper: Any, now: float) -> tuple[list[dict[str, Any]], dict[str, int]]:
        exp, core, journal = mapper.experiment, mapper.core, mapper.journal
        n = len(exp.machines)
        if not self._last_state:
            self._last_state = [""] * n
            self._last_refusals = [0] * n
            self._last_suspicions = [0] * n
            self._achieved = [(0, 0.0)] * n
            self._periods_seen = [(0, 0)] * n  # per machine: (up-periods seen, up-periods seen closed)
        counts: dict[str, int] = {}
        shown: list[dict[str, Any]] = []
        for j, (rec, conn, mlog) in enumerate(zip(core.machines, mapper.conns, journal.machines)):
            state = machine_state(rec, conn.refusals, conn.identity is not None, bool(mlog.periods))
            counts[state] = counts.get(state, 0) + 1
            k, total = self._achieved[j]
            if len(mlog.achieved) > k:
                total += sum(mlog.achieved[k:])
                k = len(mlog.achieved)
                self._achieved[j] = (k, total)
            self._note_changes(j, mlog.name, state, conn.refusals, rec.stats.suspicions, mlog.periods, now)
            if j < MAX_MACHINES_SHOWN:
                shown.append({
                    "name": mlog.name, "state": state, "activity": rec.state.value,
                    "share_requested": mlog.share, "share_reported": _num(rec.cpu_share, 4),
                    "share_achieved": _num(total / k, 4) if k else None,
                    "running": sorted(r.job.job.id for r in rec.replicas.values())[:MAX_JOBS_PER_MACHINE],
                    "jobs_run": mlog.jobs_run, "refusals": conn.refusals,
                    "clock_offset_s": _num(conn.clock.offset), "rtt_s": _num(conn.clock.rtt),
                    "registrations": mlog.registrations,
                })
        return shown, counts

    def _note_changes(self, j: int, name: str, state: str, refusals: int, suspicions: int, periods: list,
                      now: float) -> None:
        """The timeline: ups and downs at the instants the journal has them (a down shorter than a snapshot's
        period is not missed); suspicions and refusals by their counts (one that began and ended between two
        snapshots is not missed either); silences and expulsions as the snapshots see them."""
        seen, closed = self._periods_seen[j]
        for k in range(max(0, seen - 1), len(periods)):
            up, down = periods[k]
            if k >= seen:
                self._event(up, name, "registered" if k == 0 else "up", "")
            if down is not None and k >= closed:
                self._event(down, name, "down", "")
                closed = k + 1
        self._periods_seen[j] = (len(periods), closed)
        if refusals > self._last_refusals[j]:
            self._event(now, name, "refused", f"{refusals} command(s) refused by its allow-list")
            self._last_refusals[j] = refusals
        if suspicions > self._last_suspicions[j]:
            new = suspicions - self._last_suspicions[j]
            self._event(now, name, "suspected", f"{new} suspicion(s) by the policy" if new > 1 else "")
            self._last_suspicions[j] = suspicions
        before = self._last_state[j]
        if state != before:
            self._last_state[j] = state
            if state in ("silent", "expelled"):
                self._event(now, name, state, f"was {before}" if before else "")

    def _event(self, at: float | None, machine: str, kind: str, detail: str) -> None:
        self._events.append({"at": at, "machine": machine, "kind": kind, "detail": detail})

    def _queues(self, core: Any, exp: Any) -> list[dict[str, Any]]:
        names = {i: c.name for i, c in enumerate(exp.classes)}
        bags = bool(core.all_bags)
        rows = [(len(q), key) for key, q in core.queues.items()]
        if len(rows) > MAX_QUEUES_SHOWN:  # the longest queues are the ones shown
            rows = sorted(rows, key=lambda x: -x[0])[:MAX_QUEUES_SHOWN]
        rows.sort(key=lambda x: x[1])  # listed by class (or bag) order: class 1 first
        out = []
        for length, key in rows:
            label = f"bag {key}" if bags else (f"class {names[key]}" if key in names else str(key))
            out.append({"queue": label, "waiting": length})
        return out
