"""Sane limits on what a mapper's messages may ask of a puller: each value is clamped, or the puller stops.

``mgst/wire/protocol.py`` lets through any finite number of the right sign; this module
bounds what the puller does with it, in one place, before ``puller/daemon.py``
acts on a message. For every field of every mapper message the choice is one of:

- **clamp** (logged once per kind): the value is absurd but harmless once bounded
  (a heartbeat interval of 1e300 s; a job of 1e300 time units, which no run can
  see end either way);
- **stop** (one ERROR line, ``Bye`` with the reason, exit 2): the value defines
  the run and the puller cannot serve it faithfully (a time unit outside what any
  experiment can have, a failure law beyond any model time, a machine index beyond
  any experiment's, an executor the puller did not offer);
- **pass** (the protocol's check is enough): ids, seeds, sizes, progress, shares,
  timestamps, texts. A seed only names a random stream (numpy takes any natural
  number up to 2**63); ids are dictionary keys; timestamps are only echoed and
  compared; shares and progress are in [0, 1], which every executor and throttle takes.

A Share, Job or Cancel before a welcome, and a message the mapper may not send, is
dropped and logged (``puller/daemon.py``); slots beyond the hello's offer are clamped
to it (``puller/slots.py``), as are checkpoints closer than 10 ms.

The limits are far beyond what ``mgst/config/experiment.py`` lets an experiment have
(``tests/test_puller_limits.py`` checks that no legitimate run is clamped or
refused), and near enough that wall-clock arithmetic stays finite and exact.
"""

from __future__ import annotations

import logging
import math

from mgst.availability import registry as availability
from mgst.wire import protocol as P
from mgst.wording import printable

log = logging.getLogger(__name__)

# Wall seconds per model time unit. mgst's experiments allow 1e-3 s to 86,400 s (config.MIN_TIME_UNIT,
# MAX_TIME_UNIT); 10x room either side. Below 1e-4 s a time unit is shorter than the puller's own poll
# granularity (1 ms) by 10x: it would measure its loop, not the model. Outside: stop.
MIN_TIME_UNIT = 1e-4
MAX_TIME_UNIT = 1e6
# Heartbeat interval, wall seconds (the mapper's is 0.2 s). Below 10 ms the puller would spend its time
# heartbeating (100 messages a second is already 20x the mapper's rate); above 10 minutes the puller would
# wait 50 minutes (LIVENESS intervals) to notice a dead mapper. Clamped: liveness only, no result depends on it.
MIN_HEARTBEAT = 0.01
MAX_HEARTBEAT = 600.0
# The longest wall time one job computes or stages, and the longest checkpoint interval, in seconds: about
# 32 years, 385x the longest run an experiment may generate jobs for (config.MAX_DURATION, 30 days). A job
# clamped to it cannot end within any run either way; the clamp keeps deadlines, spin iteration counts and
# command environments finite (1e300 time units x 86,400 s overflows to inf). A checkpoint interval above
# it means no checkpoint in any run: it is taken as 0 (none).
MAX_WALL = 1e9
# A failure law's model-time parameters (means, MTTF, repair mean and sd, a markov3 slot, a trace's span).
# Experiments allow up to 1e9 time units (config.MAX_TIME); 1000x room. Beyond, a law's periods times the time
# unit could overflow: stop.
MAX_LAW_TIME = 1e12
# The machine index a welcome may give: experiments have at most 100,000 machines (config_models.MAX_MACHINES);
# 100x room. It only picks the failure streams; beyond it the mapper is not one of mgst's: stop.
MAX_MACHINE = 10_000_000
# A refusal's reason is printed at most this long (the rest is counted): a mapper's reason is a sentence.
MAX_REASON_SHOWN = 1000
# A bye's or a pause's reason, and other texts from the mapper, are printed at most this long: a sentence.
MAX_SHOWN = 400
# The longest single wait of the puller's loop, seconds: the loop only goes round again, so any instant in
# the far future (an up period of 1e20 s) costs one wake-up a minute, and no poll timeout can overflow.
MAX_POLL = 60.0


class Unusable(ValueError):
    """A welcome (or a Begin's failure law) this puller cannot serve: it stops, exit 2, with this line."""


def _outside(value: float, low: float, high: float) -> bool:
    return not low <= value <= high


class Limits:
    """The puller's checks of its mapper's messages; it remembers which clamps it has logged (once each)."""

    def __init__(self, machine: str):
        self.machine = machine
        self.clamped: dict[str, int] = {}  # kind of clamp -> how many times (the first is logged)

    def _clamp(self, kind: str, text: str, *args: object) -> None:
        n = self.clamped.get(kind, 0)
        self.clamped[kind] = n + 1
        if n == 0:
            log.warning("%s: " + text + " (logged once)", self.machine, *args)

    # ------------------------------------------------------------------ messages

    def welcome(self, msg: P.Welcome, offered: tuple[str, ...]) -> P.Welcome:
        """``msg`` with its harmless extremes clamped; Unusable if the puller cannot serve it (``offered``: the
        executors its hello offered; mgst's mapper refuses a puller without the run's, so never asks for another)."""
        if msg.executor not in offered:
            off = " (the command executor is off: no --allow or --allow-file)" if msg.executor == "command" else ""
            raise Unusable(f"the mapper asks for the {msg.executor[:40]!r} executor; this puller offers "
                           f"{', '.join(offered)}{off}")
        if _outside(msg.time_unit, MIN_TIME_UNIT, MAX_TIME_UNIT):
            raise Unusable(f"the mapper's time unit {msg.time_unit:.3g} s is outside [{MIN_TIME_UNIT:g}, "
                           f"{MAX_TIME_UNIT:g}] s: this puller cannot emulate it")
        if msg.machine > MAX_MACHINE:
            raise Unusable(f"the mapper's machine index {msg.machine} is beyond {MAX_MACHINE:,}")
        self.failure_law(msg.failures)
        heartbeat = min(MAX_HEARTBEAT, max(MIN_HEARTBEAT, msg.heartbeat_interval))
        if heartbeat != msg.heartbeat_interval:
            self._clamp("heartbeat", "the mapper's heartbeat interval %.3g s is outside [%g, %g] s; using %g s",
                        msg.heartbeat_interval, MIN_HEARTBEAT, MAX_HEARTBEAT, heartbeat)
        checkpoint = msg.checkpoint_interval
        if checkpoint * msg.time_unit > MAX_WALL:
            self._clamp("checkpoint", "checkpoints every %.3g s asked, beyond %g s: none are sent",
                        checkpoint * msg.time_unit, MAX_WALL)
            checkpoint = 0.0
        return msg._replace(heartbeat_interval=heartbeat, checkpoint_interval=checkpoint)

    def failure_law(self, failures: tuple | None) -> None:
        """Unusable if a failure law's model-time parameters are beyond MAX_LAW_TIME (the law's own checks,
        e.g. a Weibull shape it cannot draw, are ``adjuster/failures.py``'s)."""
        if failures is None:
            return
        times = availability.wire_times(failures)
        if any(t > MAX_LAW_TIME for t in times):
            raise Unusable(f"the mapper's {failures[0]} failure law has a time beyond {MAX_LAW_TIME:g} time units "
                           f"({', '.join(f'{t:.3g}' for t in times)})")

    def job(self, msg: P.JobMsg, time_unit: float) -> P.JobMsg:
        """``msg`` with its computing, staging and result-holding wall times clamped to MAX_WALL seconds."""
        longest = MAX_WALL / time_unit  # (time_unit >= MIN_TIME_UNIT: finite)
        if msg.work > longest:
            self._clamp("work", "replica %d: %.3g s of work asked, beyond %g s; clamped", msg.replica,
                        msg.work * time_unit, MAX_WALL)
            msg = msg._replace(work=longest)
        if msg.stage > longest:
            self._clamp("stage", "replica %d: %.3g s of staging asked, beyond %g s; clamped", msg.replica,
                        msg.stage * time_unit, MAX_WALL)
            msg = msg._replace(stage=longest)
        if msg.hold > longest:
            self._clamp("hold", "replica %d: its result held %.3g s asked, beyond %g s; clamped", msg.replica,
                        msg.hold * time_unit, MAX_WALL)
            msg = msg._replace(hold=longest)
        return msg


def shown_reason(reason: str) -> str:
    """A refusal as the puller prints it: printable, at most MAX_REASON_SHOWN characters, then how many more."""
    return printable(reason, MAX_REASON_SHOWN)


def poll_timeout_ms(seconds: float) -> int:
    """A poll timeout in whole milliseconds for a wait of ``seconds`` (any float), within [0, MAX_POLL]."""
    if not seconds > 0:  # (NaN too)
        return 0
    return math.ceil(min(seconds, MAX_POLL) * 1000)
