"""The pilot overlay: while the run has queued work and free machine identities, submit pilots (one per
submit_interval, up to max_pilots live); pilots with no work leave by themselves (--idle-exit). Reads the run's
state from the mapper's live view (/api/snapshot, loopback) and the pilots' from Slurm."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from mgst.lab import pilots as P
from mgst.lab import slurm
from mgst.lab.slurm import SlurmError
from mgst.lab.slurm_config import SlurmLab

log = logging.getLogger(__name__)

MAX_SNAPSHOT = 16 << 20  # bytes of /api/snapshot read (a run of 500 machines: some hundred kilobytes)
FETCH_TIMEOUT = 10.0
DEFAULT_POLL = 1.0
# How long the live view may be unreachable before the overlay ends: once seen, the mapper has exited (the run is
# over: a loopback server that answered does not fall silent for seconds otherwise); never seen, it is not there
# (a mapper takes a few seconds to start).
GONE_AFTER, NEVER_SEEN_AFTER = 3.0, 60.0


class LiveViewError(Exception):
    """The live view did not answer as it should; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class RunState:
    phase: str
    queued: int
    running: int


def read_snapshot(url: str, timeout: float = FETCH_TIMEOUT) -> RunState:
    """The run's phase and queue from the live view at ``url`` (``http://127.0.0.1:PORT/``), checked."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # (the mapper's host: never a proxy)
    try:
        with opener.open(url.rstrip("/") + "/api/snapshot", timeout=timeout) as answer:
            data = answer.read(MAX_SNAPSHOT + 1)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise LiveViewError(f"cannot read {url}: {getattr(e, 'reason', e)}") from None
    if len(data) > MAX_SNAPSHOT:
        raise LiveViewError(f"{url}: a snapshot over {MAX_SNAPSHOT >> 20} MiB: refused")
    try:
        snap = json.loads(data)
        phase, jobs = snap["phase"], snap.get("jobs") or {}
        queued, running = jobs.get("queued", 0), jobs.get("running", 0)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise LiveViewError(f"{url}: not a live view's snapshot") from None
    if not (isinstance(phase, str) and len(phase) < 64 and all(isinstance(n, int) and 0 <= n < 2**53
                                                               for n in (queued, running))):
        raise LiveViewError(f"{url}: a snapshot with wrong values")
    return RunState(phase, queued, running)


def follow(lab: SlurmLab, live_url: str, say: Callable[[str], None], *, poll: float = DEFAULT_POLL,
           clock: Callable[[], float] = time.monotonic) -> int:
    """Keep the overlay until the run is over; every submission and every departure said (with the seconds since
    the start). Returns the number of pilots submitted."""
    P.check_submission(lab)
    P.stage_keys(lab)
    t0 = clock()
    seen_at: float | None = None
    next_submit = t0
    submitted = 0
    was_live: dict[int, str] = {}
    while True:
        now = clock()
        try:
            run = read_snapshot(live_url)
            seen_at = now
        except LiveViewError as e:
            if (now - seen_at > GONE_AFTER) if seen_at is not None else (now - t0 > NEVER_SEEN_AFTER):
                if seen_at is None:
                    raise
                say(f"{now - t0:7.1f} s  the mapper's live view is gone: the run is over")
                return submitted
            log.debug("%s", e)
            time.sleep(poll)
            continue
        pilots = P.with_states(P.recorded(lab))
        live = [p for p in pilots if p.live]
        for p in pilots:
            if p.job in was_live and not p.live:
                state = slurm.record_of(p.job)
                said = slurm.describe(state) if state is not None else "ended (no record left)"
                say(f"{now - t0:7.1f} s  job {p.job} ({p.machine}) left: {said}")
        was_live = {p.job: p.machine for p in live}
        if run.phase == "over":
            say(f"{now - t0:7.1f} s  the run is over ({len(live)} pilots still live leave on the mapper's bye)")
            return submitted
        pending = sum(1 for p in live if p.state is not None and p.state.state == "PENDING")
        free = P.free_identities(lab, pilots)
        if run.queued > pending and len(live) < lab.max_pilots and free and now >= next_submit:
            try:
                pilot = P.submit(lab, free[0])
            except SlurmError as e:
                say(f"{now - t0:7.1f} s  error: {e}")
            else:
                submitted += 1
                was_live[pilot.job] = pilot.machine
                say(f"{now - t0:7.1f} s  submitted job {pilot.job} for {pilot.machine} ({run.queued} jobs queued, "
                    f"{len(live) + 1} pilots)")
            next_submit = now + lab.submit_interval
        time.sleep(poll)
